//! Errors. Every "this host cannot do eBPF metrics" case has its own
//! variant naming the missing feature, so the agent can log it and carry on
//! without eBPF metrics.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The crate was compiled without the BPF object (no BTF, bpftool or
    /// clang on the build host); the reason is the build script's.
    #[error("eBPF metrics were not built into this binary: {0}")]
    NotBuilt(&'static str),

    #[error("kernel BTF is unavailable ({path} missing: kernel built without CONFIG_DEBUG_INFO_BTF); eBPF metrics need it for CO-RE and BTF tracepoints")]
    NoBtf { path: PathBuf },

    #[error("kernel has no tracepoint {tracepoint} (needed by {probe}); eBPF metrics need it")]
    MissingTracepoint {
        probe: &'static str,
        tracepoint: String,
    },

    #[error(
        "not permitted to load BPF programs (run as root, or with CAP_BPF and CAP_PERFMON): {0}"
    )]
    NotPermitted(String),

    #[error("loading the BPF programs failed: {message}")]
    Load { message: String },

    #[error("attaching {probe} to tracepoint {tracepoint} failed: {source}")]
    Attach {
        probe: &'static str,
        tracepoint: String,
        #[source]
        source: libbpf_rs::Error,
    },

    #[error("BPF map {map}: {op} failed: {source}")]
    Map {
        map: &'static str,
        op: &'static str,
        #[source]
        source: libbpf_rs::Error,
    },

    #[error("pinning maps under {path}: {message}")]
    Pin { path: PathBuf, message: String },

    #[error(
        "no pinned Lachesis maps under {path} (is the agent running with pinning on?): {message}"
    )]
    NotPinned { path: PathBuf, message: String },

    #[error("tenant {tenant} is out of range: this engine has {max} tenant slots")]
    TenantOutOfRange { tenant: u32, max: u32 },

    #[error("SHARDS threshold {0} is above 2^24")]
    BadThreshold(u32),

    #[error("cgroup {path}: {message}")]
    Cgroup { path: PathBuf, message: String },

    #[error("no cgroup v2 (cgroup2) mount found in /proc/self/mountinfo")]
    NoCgroup2,

    #[error("reading ring buffer: {0}")]
    RingBuffer(#[source] libbpf_rs::Error),

    #[error("MRC estimator: {0}")]
    Mrc(#[from] lachesis_mrc::MrcError),

    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    /// True when the error means "this host (or build) cannot run eBPF
    /// metrics", as opposed to a bug or bad input: the agent should log it
    /// and continue without eBPF metrics.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            Error::NotBuilt(_)
                | Error::NoBtf { .. }
                | Error::MissingTracepoint { .. }
                | Error::NotPermitted(_)
                | Error::Load { .. }
                | Error::Attach { .. }
        )
    }
}
