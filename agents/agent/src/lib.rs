//! The Lachesis per-host agent (library part; the binary is `src/main.rs`).
//!
//! Start reading at [`runner`] (the control path on the Redis bus), then [`state`] (the
//! desired-state generation state machine) and [`bus`] (keys and messages). The rule table
//! itself is the `lachesis-switch` crate.

pub mod bus;
pub mod bus_lag;
pub mod caps;
pub mod cli;
pub mod datapath;
pub mod declared_link;
pub mod detour_link;
pub mod devices;
pub mod flow_gate;
pub mod install;
pub mod kv_front;
pub mod metrics_engine;
pub mod metrics_exposition;
pub mod metrics_http;
pub mod otel;
pub mod persist;
pub mod runner;
pub mod server_level;
pub mod start;
pub mod state;
pub mod telemetry;

use crate::bus::{Device, Registration, RegistrationSchema, Timestamp};

/// The agent's version, as registered.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The registration of this host: detected capabilities plus the prepared devices, stamped
/// with the start time.
pub fn registration(host_id: &str, devices: Vec<Device>) -> Registration {
    Registration {
        schema: RegistrationSchema,
        host_id: host_id.to_string(),
        agent_version: AGENT_VERSION.to_string(),
        started_at: Timestamp::now(),
        capabilities: caps::detect(devices),
    }
}
