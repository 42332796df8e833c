//! The sSwitch of a Lachesis agent: the forwarding-rule types of the bus contract, the rule
//! algebra, the rule table that the IO path consults (first match wins) and the quiesce gate
//! the data paths hold IO at.
//!
//! This crate does no IO and no async, and allocates nothing on the lookup path; only the
//! gate's blocking admit waits (on a condition variable, for a resume).
//!
//! - [`rule`]: `Rule`, `Match`, `Detour`, `Op`, `Tenant`, `Classifier`, mirroring
//!   `api-schemas/bus/common.schema.json` (serde, unknown fields rejected, the schema's
//!   constraints checked while deserializing).
//! - [`algebra`]: the rule algebra, [`Match::matches`] (the reference semantics of one IO),
//!   [`Match::covers`] and [`Match::overlaps`].
//! - [`table`]: [`RuleTable`], the ordered, indexed table with the Switch API verbs
//!   (insert, delete, quiesce, resume) and [`RuleTable::lookup`].
//! - [`gate`]: [`Gate`], the quiesce gate of the data paths (hold, count in flight, drain,
//!   resume), and [`Held`], the flows a quiesce holds.
//! - [`cgroup`]: what a `cgroup` tenant classifier's value means (a cgroup v2 path as
//!   `/proc/PID/cgroup` shows it, never a host path) and where its directory is.
//! - [`names`]: the name pattern shared by tenants and rules, and serde helpers.
//! - [`stage`]: [`StageConfig`], the stage contract: the stages rules name as targets.

pub mod algebra;
pub mod cgroup;
pub mod gate;
pub mod names;
pub mod rule;
pub mod stage;
pub mod table;

pub use gate::{Admitted, FlowCounts, Gate, Held, Selects, Waiting};
pub use rule::{
    path_prefix_matches, ByteRange, Classifier, ClassifierKind, Detour, DetourKind, DetourTarget,
    DetourWhat, Match, Nullable, Op, Rule, Tenant, MAX_PRIORITY,
};
pub use stage::{
    check_stages, host_path_error, CacheConfig, CacheEngine, EnginePart, Eviction, LogConfig,
    PartHandle, Priority, RateLimitConfig, StageChange, StageConfig, WriteMode,
};
pub use table::{IoHeader, OwnedIoHeader, RuleTable, TableError};
