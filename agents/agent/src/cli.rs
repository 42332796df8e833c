//! The agent's command line (`lachesis-agent run`): its flags, their parsers, and the checks
//! across flags that clap cannot express. `main.rs` parses and hands the result to
//! [`crate::start::run`].

use std::collections::HashSet;
use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::Args;
use lachesis_ebpf_metrics::DEFAULT_PIN_DIR;

use crate::bus::is_valid_host_id;
use crate::caps::{parse_device_spec, DeviceSpec};
use crate::datapath::MountSpec;
use crate::kv_front::KvTenantPort;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Stable host id: 1-63 characters of a-z, 0-9, '.', '_' and '-' (used in key names).
    #[arg(long, env = "LACHESIS_HOST_ID", value_parser = parse_host_id)]
    pub host_id: String,

    /// Redis URL of the bus.
    #[arg(
        long,
        env = "LACHESIS_REDIS_URL",
        default_value = "redis://127.0.0.1:6380/0",
        value_parser = parse_redis_url
    )]
    pub redis_url: String,

    /// A flash device the cache stages live on; a missing PATH is created as a sparse file of
    /// SIZE (e.g. 1GiB, 512MiB, 4096). BACKEND: `measured` (the default for a file: the data
    /// in the file, an FDP SSD's FTL simulated beside it so DLWA is measured) or `uring`
    /// (plain io_uring; the default for a block device). Repeatable.
    #[arg(long = "device", value_name = "NAME=[BACKEND:]PATH:SIZE", value_parser = parse_device_spec)]
    pub devices: Vec<DeviceSpec>,

    /// How often to refresh the heartbeat key.
    #[arg(long, value_name = "MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_interval_ms: u64,

    /// TTL of the heartbeat key; must exceed the interval.
    #[arg(long, value_name = "SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_ttl_s: u64,

    /// How often to publish per-tenant telemetry on lachesis:agent:{host}:telemetry.
    #[arg(long, env = "LACHESIS_TELEMETRY_INTERVAL_MS", value_name = "MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(100..))]
    pub telemetry_interval_ms: u64,

    /// Do not load the eBPF metrics engine (telemetry then carries device counters only).
    #[arg(long, env = "LACHESIS_NO_EBPF")]
    pub no_ebpf: bool,

    /// Mount the FUSE sSwitch over BACKING_DIR at MOUNTPOINT (both existing directories);
    /// the rules of every applied desired state are installed in it and rollouts quiesce
    /// its flows. Repeatable.
    #[arg(long = "mount", value_name = "BACKING_DIR:MOUNTPOINT")]
    pub mounts: Vec<MountSpec>,

    /// Rules may make the FUSE switch write (file endpoints, header logs, log stages) only
    /// under these existing directories (repeatable); a generation naming a target outside
    /// them is refused (nacked with the reason). Default: each mount's own BACKING_DIR. The
    /// environment's LACHESIS_ENDPOINT_ROOTS is colon-separated, as the controller's.
    #[arg(
        long = "endpoint-root",
        env = "LACHESIS_ENDPOINT_ROOTS",
        value_delimiter = ':',
        value_name = "DIR"
    )]
    pub endpoint_roots: Vec<PathBuf>,

    /// Where the agent keeps the last desired state it applied and acked, restored and
    /// installed at the next start before the controller is reached (0700; its file 0600).
    /// Default: BACKING_DIR/.lachesis-fs/agent of the first --mount; without a mount, none.
    #[arg(long, env = "LACHESIS_AGENT_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// FUSE worker threads per mount.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..64))]
    pub mount_threads: u64,

    /// How long an IO held by a controller detour waits for the controller's verdict before
    /// it fails with ETIMEDOUT.
    #[arg(long, env = "LACHESIS_DETOUR_DEADLINE_MS", value_name = "MS", default_value_t = 30000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub detour_deadline_ms: u64,

    /// Shared key for agent-to-agent forwarding (tcp:// endpoints): the mounts authenticate
    /// the agents they forward to with it, and are refused by agents without it. The same file
    /// as the remote side's `lachesis-fs serve --forward-key-file`.
    #[arg(long, env = "LACHESIS_FORWARD_KEY_FILE", value_name = "FILE")]
    pub forward_key_file: Option<PathBuf>,

    /// Answer the IO other agents' remote endpoints (tcp://THIS:PORT/dir) forward here
    /// (IP:PORT), from --serve-root, with the desired state's server-level cache stages
    /// (`serves`: two-level caches) in front; peers authenticate with --forward-key-file.
    #[arg(
        long,
        env = "LACHESIS_AGENT_SERVE_LISTEN",
        value_name = "ADDR",
        requires = "serve_root"
    )]
    pub serve_listen: Option<String>,

    /// The directory forwarded files live under (with --serve-listen).
    #[arg(
        long,
        env = "LACHESIS_AGENT_SERVE_ROOT",
        value_name = "DIR",
        requires = "serve_listen"
    )]
    pub serve_root: Option<PathBuf>,

    /// Pin the eBPF maps here (on a bpf filesystem) for `lachesis-agent top`.
    #[arg(long, env = "LACHESIS_BPF_PIN_DIR", default_value = DEFAULT_PIN_DIR)]
    pub bpf_pin_dir: PathBuf,

    /// Serve Prometheus metrics at http://ADDR/metrics (IP:PORT; port 0 picks a free one,
    /// logged). Off unless given.
    #[arg(long, env = "LACHESIS_AGENT_METRICS_LISTEN", value_name = "ADDR",
          value_parser = crate::metrics_http::parse_listen)]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// Serve the memcached protocol here (IP:PORT; port 0 picks a free one, logged): the
    /// key-value front end, its tenants (key-prefix classifiers) and cache stages from desired
    /// state, on the --device flash. Off unless given.
    #[arg(long, env = "LACHESIS_AGENT_KV_LISTEN", value_name = "ADDR",
          value_parser = crate::metrics_http::parse_listen)]
    pub kv_listen: Option<std::net::SocketAddr>,

    /// With --kv-listen: also listen on PORT (same address) for TENANT alone: every key of a
    /// connection there is TENANT's, whatever its prefix. Repeatable.
    #[arg(
        long = "kv-tenant-port",
        value_name = "TENANT=PORT",
        requires = "kv_listen"
    )]
    pub kv_tenant_ports: Vec<KvTenantPort>,

    /// Bytes per second the declared-IO dispatcher may read from the mounts' backing files
    /// for the maintenance jobs declared on the controller (with --mount).
    #[arg(long, env = "LACHESIS_AGENT_DECLARED_IO_BUDGET", value_name = "BYTES_PER_S",
          default_value_t = 64 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub declared_io_budget: u64,
}

pub fn parse_host_id(s: &str) -> Result<String, String> {
    if is_valid_host_id(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a host id: expected 1-63 characters of a-z, 0-9, '.', '_' and '-', \
             starting with a letter or digit"
        ))
    }
}

pub fn parse_redis_url(s: &str) -> Result<String, String> {
    redis::Client::open(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("{:?} is not a Redis URL: {e}", redacted(s)))
}

/// The URL with its password replaced, for messages: an enrolled agent's URL carries its
/// Redis secret, which must not end up in logs or terminals.
pub fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<unparsable URL>".to_string(),
    }
}

/// A check across flags failed: clap reports it as a usage error of `kind` (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Conflict {
    pub kind: ErrorKind,
    pub message: String,
}

fn conflict(kind: ErrorKind, message: String) -> Result<(), Conflict> {
    Err(Conflict { kind, message })
}

impl RunArgs {
    /// What clap cannot check: flags that contradict each other or name a thing twice.
    pub fn conflicts(&self) -> Result<(), Conflict> {
        if self.heartbeat_ttl_s.saturating_mul(1000) <= self.heartbeat_interval_ms {
            return conflict(
                ErrorKind::ArgumentConflict,
                format!(
                    "--heartbeat-ttl-s {} must exceed --heartbeat-interval-ms {} or the key expires \
                     between heartbeats",
                    self.heartbeat_ttl_s, self.heartbeat_interval_ms
                ),
            );
        }
        let mut names = HashSet::new();
        let mut paths = HashSet::new();
        for d in &self.devices {
            if !names.insert(d.name.as_str()) {
                return conflict(
                    ErrorKind::ArgumentConflict,
                    format!("--device name {:?} is given twice", d.name),
                );
            }
            if !paths.insert(d.path.as_path()) {
                return conflict(
                    ErrorKind::ArgumentConflict,
                    format!("--device path {} is given twice", d.path.display()),
                );
            }
        }
        let mut mountpoints = HashSet::new();
        for m in &self.mounts {
            if !mountpoints.insert(m.mountpoint.as_path()) {
                return conflict(
                    ErrorKind::ArgumentConflict,
                    format!(
                        "--mount mountpoint {} is given twice",
                        m.mountpoint.display()
                    ),
                );
            }
        }
        if let Some(r) = self.endpoint_roots.iter().find(|r| !r.is_dir()) {
            return conflict(
                ErrorKind::ValueValidation,
                format!("--endpoint-root {}: not an existing directory", r.display()),
            );
        }
        Ok(())
    }

    /// Where the agent keeps its state: --state-dir, else under the first mount's backing
    /// directory.
    pub fn state_dir(&self) -> Option<PathBuf> {
        self.state_dir.clone().or_else(|| {
            self.mounts
                .first()
                .map(|m| m.backing.join(lachesis_fs::embed::STATE_DIR).join("agent"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn redacts_the_password_of_a_redis_url() {
        let shown = redacted("redis://agent-h1:s3cret@127.0.0.1:6380/0");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("agent-h1"), "{shown}");
        assert_eq!(
            redacted("redis://127.0.0.1:6380/0"),
            "redis://127.0.0.1:6380/0"
        );
    }
}
