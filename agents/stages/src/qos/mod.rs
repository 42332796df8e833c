//! The data path's IO scheduler (issue 34, Moirai §5.3.1-5.3.2): per tenant a dmClock
//! reservation (a qos stage's `min_bytes_per_s`), weight (its `priority`) and limits
//! (`bytes_per_s`, `iops`), and the declared-IO dispatcher as a class of low weight.
//!
//! - `classes.rs`: a qos stage's config as scheduler parameters (priority → weight);
//! - `mclock.rs`: the decisions, pure (no clock, no locks), tested by counts against a naive
//!   model;
//! - `gate.rs`: where IO waits: a bound on what passes at once, and the scheduler choosing
//!   what goes next;
//! - the qos stage a rule sends IO through is a stage: `stage/qos.rs`.

pub mod classes;
pub mod gate;
pub mod mclock;

pub use gate::{ClassKey, Gate, Permit};
pub use mclock::Counters;

/// Requests a data path's scheduler lets pass at once. One: every IO through a qos stage is
/// ordered by the scheduler (the FUSE switch serves a few requests at once, `--mount-threads`;
/// with more slots than that nothing would ever wait, and nothing would be reordered).
pub const DEPTH: usize = 1;
