//! Declarative maintenance IO (DINGOS, McAllister's thesis, chapter 6) on the agent.
//!
//! Maintenance work (scrub, backup, rebuild, migration) declares what it must read (file
//! ranges on this host) and by when; the [`planner::Planner`] counts the foreground reads
//! that pass through the FUSE switch for it, and the [`dispatcher`] reads the rest from the
//! backing files under the agent's rate budget, paced to the deadline. The jobs arrive in
//! the `declared-io` bus message ([`message`]); progress leaves in telemetry.

pub mod coverage;
pub mod dispatcher;
pub mod message;
pub mod planner;

pub use message::{DeclaredIo, JobReport, JobSpec, JobState, Pace};
pub use planner::{Admit, Mount, Planner, Work};
