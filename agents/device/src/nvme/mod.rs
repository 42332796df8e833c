//! NVMe: command encoding, FDP log pages, and the passthrough backend on `/dev/ngXnY`.

pub mod cmd;
pub mod identify;
pub mod logpage;
pub mod passthru;

pub use passthru::{NvmeConfig, NvmePassthru};
