//! The stages a data path runs IO through, shared by its front ends (the FUSE switch in
//! `lachesis-fs`, the memcached front end in `lachesis-kv`): cache stages over the engines
//! of `lachesis-cache`, log and rate-limit stages, the flash device space they are cut from
//! (`stage::space`), the in-place resizes every reconciler makes (`stage::resizes`), the
//! data path's IO scheduler (`qos`), the remote endpoint protocol and the client routes use
//! (`remote`), and the forwarding server with its server-level caches (`serve`).
//!
//! Folders import downwards only (`tests/module_layers.rs`): `serve` → `stage` → `remote`,
//! `qos`.
//!
//! Start with [`stage::Stage`] and [`stage::space::Devices`].

use std::sync::Arc;
use std::time::Instant;

/// Where a stage or the scheduler reads the time: `Instant::now` in the product; tests
/// inject a clock they move, so ages expire when the test says and not after a sleep.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

pub mod private;
pub mod qos;
pub mod rangemap;
pub mod remote;
pub mod serve;
pub mod stage;
