//! Miss-ratio curves (MRCs) for Lachesis.
//!
//! The controller sizes every tenant's cache partition from these curves, so
//! they have to be right and cheap. The crate has three kinds of estimator
//! behind one streaming trait ([`MrcEstimator`]): exact LRU stack distances
//! ([`ExactLru`]), spatially hashed sampling ([`ShardsFixedRate`],
//! [`ShardsFixedSize`]) and cache simulation, sampled or not ([`MiniSim`]),
//! for the policies our flash caches run. [`Windowed`] decays any of them
//! per window so a workload change shows up within one reaction interval.
//! [`trace`] streams the trace formats we test against, [`plot`] draws curves.

pub mod curve;
pub mod decay;
pub mod distinct;
pub mod error;
pub mod estimator;
pub mod exact;
pub mod hash;
pub mod head;
pub mod histogram;
pub mod minisim;
pub mod plot;
pub mod policies;
pub mod regression;
pub mod shards;
pub mod stack;
pub mod trace;

pub use curve::{Curve, Spacing, Unit};
pub use decay::Windowed;
pub use error::{MrcError, TraceError};
pub use estimator::{MrcEstimator, Op};
pub use exact::ExactLru;
pub use head::ShardsWithHead;
pub use minisim::MiniSim;
pub use policies::PolicyKind;
pub use shards::{Adjustment, ShardsFixedRate, ShardsFixedSize};
