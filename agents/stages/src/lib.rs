//! The stages a data path runs IO through, shared by its front ends (the FUSE switch in
//! `lachesis-fs`, the memcached front end in `lachesis-kv`): cache stages over the engines
//! of `lachesis-cache`, log and rate-limit stages, the flash device space they are cut from
//! (`stage::space`), the in-place resizes every reconciler makes (`stage::resizes`), and the
//! remote endpoint protocol (`remote`: the client routes use, the forwarding server with its
//! server-level caches).
//!
//! Start with [`stage::Stage`] and [`stage::space::Devices`].

pub mod private;
pub mod qos;
pub mod rangemap;
pub mod remote;
pub mod stage;
