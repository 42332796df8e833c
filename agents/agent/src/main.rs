//! `lachesis-agent`: the per-host agent of Lachesis.
//!
//! Exit codes: 0 after SIGINT/SIGTERM, 2 for bad arguments or devices (with a message on
//! stderr), 1 if the runtime cannot start (or, for `top`, no agent's maps are pinned).

use std::collections::HashSet;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};
use lachesis_agent::bus::is_valid_host_id;
use lachesis_agent::caps::{parse_device_spec, DeviceSpec};
use lachesis_agent::datapath::{Datapath, MountSpec};
use lachesis_agent::declared_link;
use lachesis_agent::detour_link::RedisLink;
use lachesis_agent::install::plan::Layout;
use lachesis_agent::install::{Part, TwoPhase};
use lachesis_agent::kv_front::{KvFront, KvStages, KvTenantPort};
use lachesis_agent::metrics_engine::datapath_curves::DatapathCurves;
use lachesis_agent::metrics_engine::{self, EngineOptions, MetricsEngine, TelemetryConfig};
use lachesis_agent::metrics_http;
use lachesis_agent::persist::Persisted;
use lachesis_agent::runner::{Agent, Config};
use lachesis_agent::server_level::ServerLevel;
use lachesis_ebpf_metrics::{MetricsMaps, DEFAULT_PIN_DIR};
use lachesis_fs::detour::Detours;
use lachesis_fs::stage::Devices;
use lachesis_fs::IoObserver;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info, warn};

#[derive(Debug, Parser)]
#[command(name = "lachesis-agent", version, about = "Per-host agent of Lachesis")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start; boxing `run`'s arguments would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Register with the controller over Redis, apply desired state, heartbeat.
    Run(RunArgs),
    /// Live per-tenant IO view (IOPS, bandwidth, p50/p99 latency, sampling rate) from the
    /// eBPF maps a running agent pinned.
    Top(TopArgs),
}

#[derive(Debug, Args)]
struct TopArgs {
    /// Where the running agent pinned its maps (its --bpf-pin-dir).
    #[arg(long, env = "LACHESIS_BPF_PIN_DIR", default_value = DEFAULT_PIN_DIR)]
    pin_dir: PathBuf,

    /// Refresh interval.
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    interval_ms: u64,

    /// Print this many tables, then exit (default: until interrupted).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Stable host id: 1-63 characters of a-z, 0-9, '.', '_' and '-' (used in key names).
    #[arg(long, env = "LACHESIS_HOST_ID", value_parser = parse_host_id)]
    host_id: String,

    /// Redis URL of the bus.
    #[arg(
        long,
        env = "LACHESIS_REDIS_URL",
        default_value = "redis://127.0.0.1:6380/0",
        value_parser = parse_redis_url
    )]
    redis_url: String,

    /// A flash device the cache stages live on; a missing PATH is created as a sparse file of
    /// SIZE (e.g. 1GiB, 512MiB, 4096). BACKEND: `measured` (the default for a file: the data
    /// in the file, an FDP SSD's FTL simulated beside it so DLWA is measured) or `uring`
    /// (plain io_uring; the default for a block device). Repeatable.
    #[arg(long = "device", value_name = "NAME=[BACKEND:]PATH:SIZE", value_parser = parse_device_spec)]
    devices: Vec<DeviceSpec>,

    /// How often to refresh the heartbeat key.
    #[arg(long, value_name = "MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_interval_ms: u64,

    /// TTL of the heartbeat key; must exceed the interval.
    #[arg(long, value_name = "SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_ttl_s: u64,

    /// How often to publish per-tenant telemetry on lachesis:agent:{host}:telemetry.
    #[arg(long, env = "LACHESIS_TELEMETRY_INTERVAL_MS", value_name = "MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(100..))]
    telemetry_interval_ms: u64,

    /// Do not load the eBPF metrics engine (telemetry then carries device counters only).
    #[arg(long, env = "LACHESIS_NO_EBPF")]
    no_ebpf: bool,

    /// Mount the FUSE sSwitch over BACKING_DIR at MOUNTPOINT (both existing directories);
    /// the rules of every applied desired state are installed in it and rollouts quiesce
    /// its flows. Repeatable.
    #[arg(long = "mount", value_name = "BACKING_DIR:MOUNTPOINT")]
    mounts: Vec<MountSpec>,

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
    endpoint_roots: Vec<PathBuf>,

    /// Where the agent keeps the last desired state it applied and acked, restored and
    /// installed at the next start before the controller is reached (0700; its file 0600).
    /// Default: BACKING_DIR/.lachesis-fs/agent of the first --mount; without a mount, none.
    #[arg(long, env = "LACHESIS_AGENT_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// FUSE worker threads per mount.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..64))]
    mount_threads: u64,

    /// How long an IO held by a controller detour waits for the controller's verdict before
    /// it fails with ETIMEDOUT.
    #[arg(long, env = "LACHESIS_DETOUR_DEADLINE_MS", value_name = "MS", default_value_t = 30000,
          value_parser = clap::value_parser!(u64).range(1..))]
    detour_deadline_ms: u64,

    /// Shared key for agent-to-agent forwarding (tcp:// endpoints): the mounts authenticate
    /// the agents they forward to with it, and are refused by agents without it. The same file
    /// as the remote side's `lachesis-fs serve --forward-key-file`.
    #[arg(long, env = "LACHESIS_FORWARD_KEY_FILE", value_name = "FILE")]
    forward_key_file: Option<PathBuf>,

    /// Answer the IO other agents' remote endpoints (tcp://THIS:PORT/dir) forward here
    /// (IP:PORT), from --serve-root, with the desired state's server-level cache stages
    /// (`serves`: two-level caches) in front; peers authenticate with --forward-key-file.
    #[arg(
        long,
        env = "LACHESIS_AGENT_SERVE_LISTEN",
        value_name = "ADDR",
        requires = "serve_root"
    )]
    serve_listen: Option<String>,

    /// The directory forwarded files live under (with --serve-listen).
    #[arg(
        long,
        env = "LACHESIS_AGENT_SERVE_ROOT",
        value_name = "DIR",
        requires = "serve_listen"
    )]
    serve_root: Option<PathBuf>,

    /// Pin the eBPF maps here (on a bpf filesystem) for `lachesis-agent top`.
    #[arg(long, env = "LACHESIS_BPF_PIN_DIR", default_value = DEFAULT_PIN_DIR)]
    bpf_pin_dir: PathBuf,

    /// Serve Prometheus metrics at http://ADDR/metrics (IP:PORT; port 0 picks a free one,
    /// logged). Off unless given.
    #[arg(long, env = "LACHESIS_AGENT_METRICS_LISTEN", value_name = "ADDR",
          value_parser = lachesis_agent::metrics_http::parse_listen)]
    metrics_listen: Option<std::net::SocketAddr>,

    /// Serve the memcached protocol here (IP:PORT; port 0 picks a free one, logged): the
    /// key-value front end, its tenants (key-prefix classifiers) and cache stages from desired
    /// state, on the --device flash. Off unless given.
    #[arg(long, env = "LACHESIS_AGENT_KV_LISTEN", value_name = "ADDR",
          value_parser = lachesis_agent::metrics_http::parse_listen)]
    kv_listen: Option<std::net::SocketAddr>,

    /// With --kv-listen: also listen on PORT (same address) for TENANT alone: every key of a
    /// connection there is TENANT's, whatever its prefix. Repeatable.
    #[arg(
        long = "kv-tenant-port",
        value_name = "TENANT=PORT",
        requires = "kv_listen"
    )]
    kv_tenant_ports: Vec<KvTenantPort>,

    /// Bytes per second the declared-IO dispatcher may read from the mounts' backing files
    /// for the maintenance jobs declared on the controller (with --mount).
    #[arg(long, env = "LACHESIS_AGENT_DECLARED_IO_BUDGET", value_name = "BYTES_PER_S",
          default_value_t = 64 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    declared_io_budget: u64,
}

fn parse_host_id(s: &str) -> Result<String, String> {
    if is_valid_host_id(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a host id: expected 1-63 characters of a-z, 0-9, '.', '_' and '-', \
             starting with a letter or digit"
        ))
    }
}

fn parse_redis_url(s: &str) -> Result<String, String> {
    redis::Client::open(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("{:?} is not a Redis URL: {e}", redacted(s)))
}

/// The URL with its password replaced, for messages: an enrolled agent's URL carries its
/// Redis secret, which must not end up in logs or terminals.
fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<unparsable URL>".to_string(),
    }
}

fn usage_error(kind: ErrorKind, msg: String) -> ! {
    Cli::command().error(kind, msg).exit()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(args),
        Command::Top(args) => top(args),
    }
}

fn top(args: TopArgs) -> ExitCode {
    let maps = match MetricsMaps::open_pinned(&args.pin_dir) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let stdout = std::io::stdout();
    let clear = stdout.is_terminal();
    let interval = Duration::from_millis(args.interval_ms);
    match lachesis_ebpf_metrics::top::run(&maps, interval, args.count, clear, &mut stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Load the eBPF metrics engine unless turned off; a host that cannot run it gets a warning
/// naming what is missing and an agent without eBPF metrics.
fn load_metrics_engine(args: &RunArgs) -> Option<MetricsEngine> {
    if args.no_ebpf {
        info!("eBPF metrics off (--no-ebpf)");
        return None;
    }
    let opts = EngineOptions {
        pin_dir: Some(args.bpf_pin_dir.clone()),
        ..Default::default()
    };
    match MetricsEngine::load(&opts) {
        Ok(e) => {
            let pinned = e.pinned().then(|| args.bpf_pin_dir.display().to_string());
            info!(
                pins = pinned.as_deref().unwrap_or("-"),
                "eBPF metrics engine attached"
            );
            Some(e)
        }
        Err(e) if e.is_unsupported() => {
            warn!("eBPF metrics off, running without them: {e}");
            None
        }
        Err(e) => {
            error!("eBPF metrics off, running without them: {e}");
            None
        }
    }
}

fn run(args: RunArgs) -> ExitCode {
    if args.heartbeat_ttl_s.saturating_mul(1000) <= args.heartbeat_interval_ms {
        usage_error(
            ErrorKind::ArgumentConflict,
            format!(
                "--heartbeat-ttl-s {} must exceed --heartbeat-interval-ms {} or the key expires \
                 between heartbeats",
                args.heartbeat_ttl_s, args.heartbeat_interval_ms
            ),
        );
    }
    let mut names = HashSet::new();
    let mut paths = HashSet::new();
    for d in &args.devices {
        if !names.insert(d.name.as_str()) {
            usage_error(
                ErrorKind::ArgumentConflict,
                format!("--device name {:?} is given twice", d.name),
            );
        }
        if !paths.insert(d.path.as_path()) {
            usage_error(
                ErrorKind::ArgumentConflict,
                format!("--device path {} is given twice", d.path.display()),
            );
        }
    }

    let mut mountpoints = HashSet::new();
    for m in &args.mounts {
        if !mountpoints.insert(m.mountpoint.as_path()) {
            usage_error(
                ErrorKind::ArgumentConflict,
                format!(
                    "--mount mountpoint {} is given twice",
                    m.mountpoint.display()
                ),
            );
        }
    }

    if let Some(r) = args.endpoint_roots.iter().find(|r| !r.is_dir()) {
        usage_error(
            ErrorKind::ValueValidation,
            format!("--endpoint-root {}: not an existing directory", r.display()),
        );
    }
    let state_dir = args.state_dir.clone().or_else(|| {
        args.mounts
            .first()
            .map(|m| m.backing.join(lachesis_fs::embed::STATE_DIR).join("agent"))
    });

    // Dropped last, after the runtime: flushes the spans still batched.
    let _traces = match lachesis_agent::otel::init(&args.host_id) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };

    let persisted = match state_dir.as_deref().map(Persisted::open).transpose() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: --state-dir: {e}");
            return ExitCode::from(2);
        }
    };
    let devices = match lachesis_agent::devices::open_all(&args.devices) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let forward_key = match args
        .forward_key_file
        .as_deref()
        .map(lachesis_fs::remote::auth::Key::load)
        .transpose()
    {
        Ok(key) => key,
        Err(e) => {
            eprintln!("error: --forward-key-file: {e}");
            return ExitCode::from(2);
        }
    };
    let metrics_listener = match args.metrics_listen.map(metrics_http::bind).transpose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "error: --metrics-listen {}: {e}",
                args.metrics_listen.expect("bound one")
            );
            return ExitCode::from(2);
        }
    };
    let client = match redis::Client::open(args.redis_url.as_str()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: --redis-url {:?}: {e}", redacted(&args.redis_url));
            return ExitCode::from(2);
        }
    };

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        // Handlers first, so a signal during start-up also stops cleanly.
        let (mut term, mut int) = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(t), Ok(i)) => (t, i),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("error: cannot install signal handlers: {e}");
                return ExitCode::from(1);
            }
        };
        let mut registration = lachesis_agent::registration(
            &args.host_id,
            devices.iter().map(|d| d.info.clone()).collect(),
        );
        // What the controller may ship: it refuses a tenant one of these data paths would
        // see the IO of but could not classify, instead of this agent ignoring it.
        registration.capabilities.data_paths = Some(lachesis_agent::caps::data_paths(
            !args.mounts.is_empty(),
            args.kv_listen.is_some(),
        ));
        let caps = &registration.capabilities;
        info!(
            host_id = %args.host_id,
            version = %lachesis_agent::AGENT_VERSION,
            redis = %client.get_connection_info().addr(),
            cpus = caps.cpus,
            devices = caps.devices.len(),
            kernel = %caps.kernel.release,
            btf = caps.kernel.btf,
            io_uring = caps.kernel.io_uring,
            fuse = caps.kernel.fuse,
            "agent starting"
        );
        let mut cfg = Config::new(args.host_id.clone());
        cfg.heartbeat_interval = Duration::from_millis(args.heartbeat_interval_ms);
        cfg.heartbeat_ttl = Duration::from_secs(args.heartbeat_ttl_s);
        let mut telemetry_cfg = TelemetryConfig {
            host_id: args.host_id.clone(),
            interval: Duration::from_millis(args.telemetry_interval_ms),
            devices: devices.clone(),
            stages: None,
            datapath_curves: None,
            served: None,
            latest: Default::default(),
            declared: None,
            endpoints: None,
        };
        let mut agent = Agent::new(cfg, client.clone(), registration);
        if let Some(p) = persisted {
            agent = agent.with_persistence(p);
        }
        // One region allocator over the devices for both data paths' cache stages.
        let pools = match Devices::new(
            devices.iter().map(|d| (d.info.name.clone(), d.shared.clone())).collect(),
        ) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: --device: {e}");
                return ExitCode::from(2);
            }
        };
        let server_pools = pools.clone();
        let curves = Arc::new(DatapathCurves::new(
            metrics_engine::curve_sizes(),
            metrics_engine::DEFAULT_SAMPLE_KEYS,
        ));
        let kv = match args.kv_listen {
            None => None,
            Some(listen) => {
                let mut config = lachesis_kv::ServiceConfig::new(pools.clone());
                config.measured = devices
                    .iter()
                    .filter_map(|d| Some((d.info.name.clone(), d.measured()?.clone())))
                    .collect();
                config.state_dir = state_dir.as_ref().map(|d| d.join("kv"));
                if config.state_dir.is_none() {
                    warn!("KV front end without a state dir (--state-dir): its caches start cold after a restart");
                }
                match KvFront::start(listen, &args.kv_tenant_ports, config, curves.clone()) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        eprintln!("error: --kv-listen: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
        };
        let datapath = if args.mounts.is_empty() {
            None
        } else {
            let tap = curves.clone();
            let observer: IoObserver = Arc::new(move |tenant: &str, file, off, len| {
                tap.record(tenant, file, off, len)
            });
            let dp = Datapath::with_devices(
                args.mounts.clone(),
                args.mount_threads as usize,
                pools,
                Some(observer),
            );
            dp.set_forward_key(forward_key.clone());
            if let Err(e) = dp
                .set_endpoint_roots(args.endpoint_roots.clone())
                .and_then(|()| dp.clear_stale_mounts())
            {
                eprintln!("error: --mount: {e}");
                return ExitCode::from(2);
            }
            Some(dp)
        };
        let kv_stages = kv.as_ref().map(|k| KvStages::new(k.service().clone()));
        let server = match ServerLevel::start(args.serve_listen.as_deref(), args.serve_root.as_deref(), forward_key,
                                              server_pools) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        // Commit order: the KV front end, the FUSE switches, the server level (install/mod.rs).
        let mut parts: Vec<Arc<dyn Part>> = Vec::new();
        if let Some(k) = &kv_stages {
            parts.push(k.clone());
        }
        if let Some(d) = &datapath {
            parts.push(d.clone());
        }
        parts.push(server.clone());
        let layout = Layout {
            kv: kv.is_some(),
            ports: args.kv_tenant_ports.iter().map(|p| (p.port, p.tenant.clone())).collect(),
        };
        agent = agent.with_installer(TwoPhase::new(layout, parts));
        if datapath.is_some() || kv.is_some() || args.serve_listen.is_some() {
            let (fs, kvs, srv) = (datapath.clone(), kv_stages.clone(), server.clone());
            telemetry_cfg.stages = Some(Arc::new(move || {
                let mut r = fs.as_ref().map(|d| d.stage_reports()).unwrap_or_default();
                r.extend(kvs.as_ref().map(|k| k.kv_stage_reports()).unwrap_or_default());
                r.extend(srv.stage_reports());
                r
            }));
            telemetry_cfg.datapath_curves = Some(curves);
            let kvs = kv_stages.clone();
            telemetry_cfg.served = Some(Arc::new(move || kvs.as_ref().map(|k| k.kv_served()).unwrap_or_default()));
        }
        if let Some(dp) = datapath.clone() {
            telemetry_cfg.endpoints = Some(Arc::new(move || dp.endpoint_reports()));
        }
        if let Some(dp) = &datapath {
            agent = agent.with_flow_control(dp.clone());
            let deadline = Duration::from_millis(args.detour_deadline_ms);
            let generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let (mut applied, g) = (agent.subscribe(), generation.clone());
            tokio::spawn(async move {
                loop {
                    g.store(applied.borrow_and_update().generation, Ordering::Relaxed);
                    if applied.changed().await.is_err() {
                        break;
                    }
                }
            });
            let link = RedisLink::start(client.clone(), &args.host_id, deadline, generation);
            dp.set_controller(Arc::new(Detours::new(link, deadline)));
        }
        if let Some(l) = metrics_listener {
            let sources = metrics_http::Sources::new(args.host_id.clone(), telemetry_cfg.latest.clone(),
                agent.bus_progress(), agent.subscribe(), client.clone());
            if let Err(e) = metrics_http::spawn(l, Arc::new(sources)) {
                eprintln!("error: --metrics-listen: {e}");
                return ExitCode::from(2);
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        if let Some(dp) = &datapath {
            let mounts = args.mounts.iter().map(|m| (m.backing.clone(), m.mountpoint.clone())).collect();
            let budget = args.declared_io_budget;
            match declared_link::start(client.clone(), args.host_id.clone(), mounts, budget, stop.clone()) {
                Ok(p) => {
                    dp.set_declared(p.clone());
                    telemetry_cfg.declared = Some(p);
                }
                Err(e) => error!("declared IO off: cannot start its dispatcher: {e}"),
            }
        }
        let telemetry = match metrics_engine::spawn(
            load_metrics_engine(&args),
            telemetry_cfg,
            client,
            agent.subscribe(),
            Arc::clone(&stop),
        ) {
            Ok(t) => Some(t),
            Err(e) => {
                error!("telemetry off: cannot start its thread: {e}");
                None
            }
        };
        agent
            .run(async move {
                let which = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                info!(signal = %which, "shutting down");
            })
            .await;
        stop.store(true, Ordering::Relaxed);
        if let Some(dp) = datapath {
            let _ = tokio::task::spawn_blocking(move || dp.unmount()).await;
        }
        if let Some(kv) = kv {
            let _ = tokio::task::spawn_blocking(move || kv.stop()).await;
        }
        if let Some(t) = telemetry {
            // Joining detaches the BPF programs and removes the pins (the engine drops).
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        info!("stopped");
        ExitCode::SUCCESS
    })
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
