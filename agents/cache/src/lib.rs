//! Lachesis flash cache engines (issue 6).

pub mod engine;

pub use engine::{Engine, EngineStats};

/// Errors of the cache engines.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Device(#[from] lachesis_device::Error),
    #[error("invalid cache configuration: {0}")]
    Config(String),
}

pub type Result<T> = std::result::Result<T, Error>;
