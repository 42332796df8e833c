//! Lachesis's eBPF metrics engine.
//!
//! BPF programs (`ebpf/lachesis.bpf.c`, attached to BTF tracepoints only)
//! count every tenant's IO in the kernel, at the syscall, io_uring, block
//! (bio) and device (request) layers, and sample 4 KiB block addresses by
//! hash (SHARDS spatial sampling) into a ring buffer. A tenant is a set of
//! cgroup v2 ids; IO is charged to the submitting task's cgroup, except
//! writeback, which is charged to whoever dirtied the file.
//!
//! Start with [`EbpfMetrics::load`]; map tenants with
//! [`MetricsMaps::set_cgroup_tenant`] (and [`cgroup_dir`]/[`cgroup_id`] to
//! turn a classifier's cgroup path into an id); read counters with
//! [`MetricsMaps::tenant_stats`]; drain samples with [`SampleReader`] into
//! [`ShardsSinks`] for per-tenant miss-ratio curves; show it all with
//! [`top::run`].

mod error;
mod layout;
mod loader;
mod maps;

pub mod counters;
pub mod histogram;
pub mod samples;
pub mod tenants;
pub mod top;

#[cfg(not(lachesis_no_bpf))]
#[allow(
    clippy::all,
    dead_code,
    unused_imports,
    non_camel_case_types,
    non_upper_case_globals,
    missing_docs
)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/lachesis.skel.rs"));
}

pub use counters::{Layer, Op, OpStats, TenantStats};
pub use error::{Error, Result};
pub use histogram::LatencyHistogram;
pub use loader::{EbpfMetrics, Layers, LoadOptions, ProbeStatus, DEFAULT_PIN_DIR, VMLINUX_BTF};
pub use maps::MetricsMaps;
pub use samples::{shards_key, Sample, SampleReader, SampleSink, ShardsSinks, Sizing};
pub use tenants::{
    cgroup2_mount, cgroup_dir, cgroup_dir_in, cgroup_id, rate_of_threshold, threshold_for_rate,
    TenantConfig, TenantId, SHARDS_P,
};
