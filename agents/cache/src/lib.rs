//! Lachesis flash cache engines (issue 6): a large-object log ([`loc`]), a set-associative
//! small-object cache ([`set_assoc`]), Kangaroo, and the per-tenant [`hybrid`] cache that puts
//! DRAM in front of a small-object engine and the log. Every engine writes through
//! [`dev::Span`]s of a shared `lachesis_device::BlockDevice` with its own placement handle.

pub mod bloom;
pub mod dev;
pub mod dram;
pub mod engine;
pub mod fairywren;
pub mod hybrid;
pub mod kangaroo;
pub mod loc;
pub mod object;
pub mod persist;
pub mod set_assoc;
pub mod workload;

pub use dev::{share, DataSim, SharedDevice, Span, SpanReads};
pub use engine::{Engine, EngineStats, LogUnits, Lookup, PartStats, PendingRead};
pub use hybrid::{Hybrid, HybridConfig};
pub use loc::{Loc, LocConfig, RegionEviction, RegionWrite};
pub use set_assoc::{SetAssoc, SetAssocConfig};

/// Errors of the cache engines.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Device(#[from] lachesis_device::Error),
    #[error("invalid cache configuration: {0}")]
    Config(String),
    /// A persisted index could not be written or was refused (`persist`); start empty.
    #[error("{0}")]
    Persist(String),
}

pub type Result<T> = std::result::Result<T, Error>;
