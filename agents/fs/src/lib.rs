//! Lachesis FUSE sSwitch data path.
//!
//! Start with [`switch::Switch`]: it classifies nothing itself but takes a tenant and an IO, matches
//! the rule table, runs the IO through the route's waypoint stages to its endpoint(s) and records
//! delegates. [`fuse::SwitchFs`] is the FUSE front end that feeds it; [`classify`] maps a
//! requesting process to a tenant.

pub mod blocklock;
pub mod classify;
pub mod config;
pub mod confine;
pub mod delegate;
pub mod detour;
pub mod embed;
pub mod fuse;
pub mod header_log;
pub mod longpath;
pub mod route;
pub mod stale_mount;
pub mod switch;

// The stages, their device space and the remote protocol live in `lachesis-stages`, shared
// with the KV front end; re-exported so `lachesis_fs::stage` and `lachesis_fs::remote` still name them.
pub use lachesis_stages::{private, qos, rangemap, remote, serve, stage};

pub use switch::{IoObserver, ReadWatch, Switch, SwitchOptions};
