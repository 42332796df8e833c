//! The forwarding server of `lachesis-fs serve` and of the agent's `--serve`: it answers the
//! frames of `crate::remote` from a directory ([`server`]), under a rate limit ([`limit`]),
//! through server-level cache stages when it is the second level of two-level caches
//! ([`level`] builds them from flags, [`cached_store`] runs them).

pub mod cached_store;
pub mod level;
pub mod limit;
pub mod server;
