//! The key-value front end of a Lachesis agent: the memcached protocol (text and meta
//! commands) in front of per-tenant flash caches.
//!
//! Start with [`service::Service`] (tenants, rules, caches: what the agent applies), then
//! [`server`] (connections), [`exec`] (one command), [`store`] (memcached's semantics over a
//! cache) and [`protocol`] (the parser).

pub mod cache;
pub mod exec;
pub mod item;
pub mod persist;
pub mod protocol;
pub mod server;
pub mod service;
pub mod stats;
pub mod store;
pub mod tenant;
pub mod upstream;

pub use service::{KvObserver, KvOp, Service, ServiceConfig, DEFAULT_TENANT};
pub use stats::KvStats;
