//! What `lachesis-agent run` starts, in order: tracing, the saved state, the devices, the
//! bus client, then on the runtime the agent with its data path's parts (KV front end, FUSE
//! switches, server level, installed by `install::TwoPhase`), the detour link, the metrics
//! endpoint, the declared-IO dispatcher and telemetry; and what it stops on SIGINT/SIGTERM.
//! `main.rs` only parses the command line and turns a [`StartError`] into an exit code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lachesis_fs::detour::Detours;
use lachesis_fs::stage::Devices;
use lachesis_fs::IoObserver;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info, warn};

use crate::cli::{redacted, RunArgs};
use crate::datapath::Datapath;
use crate::declared_link;
use crate::detour_link::RedisLink;
use crate::install::plan::Layout;
use crate::install::{Part, TwoPhase};
use crate::kv_front::{KvFront, KvStages};
use crate::metrics_engine::datapath_curves::DatapathCurves;
use crate::metrics_engine::{self, EngineOptions, MetricsEngine, TelemetryConfig};
use crate::metrics_http;
use crate::persist::Persisted;
use crate::runner::{Agent, Config};
use crate::server_level::ServerLevel;

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Bad flags, devices, mounts or files they name (exit 2), the flag first.
    #[error("{0}")]
    Setup(String),
    /// The process cannot run (its async runtime, signal handlers): exit 1.
    #[error("{0}")]
    Process(String),
}

impl StartError {
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Setup(_) => 2,
            StartError::Process(_) => 1,
        }
    }
}

/// Runs the agent until SIGINT or SIGTERM (`args` passed [`RunArgs::conflicts`]).
pub fn run(args: RunArgs) -> Result<(), StartError> {
    let state_dir = args.state_dir();

    // Dropped last, after the runtime: flushes the spans still batched.
    let _traces = match crate::otel::init(&args.host_id) {
        Ok(g) => g,
        Err(e) => {
            return Err(StartError::Setup(e.to_string()));
        }
    };

    let persisted = match state_dir.as_deref().map(Persisted::open).transpose() {
        Ok(p) => p,
        Err(e) => {
            return Err(StartError::Setup(format!("--state-dir: {e}")));
        }
    };
    let devices = match crate::devices::open_all(&args.devices) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            return Err(StartError::Setup(e.to_string()));
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
            return Err(StartError::Setup(format!("--forward-key-file: {e}")));
        }
    };
    let metrics_listener = match args.metrics_listen.map(metrics_http::bind).transpose() {
        Ok(l) => l,
        Err(e) => {
            return Err(StartError::Setup(format!(
                "--metrics-listen {}: {e}",
                args.metrics_listen.expect("bound one")
            )));
        }
    };
    let client = match redis::Client::open(args.redis_url.as_str()) {
        Ok(c) => c,
        Err(e) => {
            return Err(StartError::Setup(format!(
                "--redis-url {:?}: {e}",
                redacted(&args.redis_url)
            )));
        }
    };

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            return Err(StartError::Process(format!(
                "cannot start the async runtime: {e}"
            )));
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
                return Err(StartError::Process(format!("cannot install signal handlers: {e}")));
            }
        };
        let mut registration = crate::registration(
            &args.host_id,
            devices.iter().map(|d| d.info.clone()).collect(),
        );
        // What the controller may ship: it refuses a tenant one of these data paths would
        // see the IO of but could not classify, instead of this agent ignoring it.
        registration.capabilities.data_paths = Some(crate::caps::data_paths(
            !args.mounts.is_empty(),
            args.kv_listen.is_some(),
        ));
        let caps = &registration.capabilities;
        info!(
            host_id = %args.host_id,
            version = %crate::AGENT_VERSION,
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
                return Err(StartError::Setup(format!("--device: {e}")));
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
                        return Err(StartError::Setup(format!("--kv-listen: {e}")));
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
                return Err(StartError::Setup(format!("--mount: {e}")));
            }
            Some(dp)
        };
        let kv_stages = kv.as_ref().map(|k| KvStages::new(k.service().clone()));
        let server = match ServerLevel::start(args.serve_listen.as_deref(), args.serve_root.as_deref(), forward_key,
                                              server_pools) {
            Ok(s) => s,
            Err(e) => {
                return Err(StartError::Setup(e.to_string()));
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
                return Err(StartError::Setup(format!("--metrics-listen: {e}")));
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
        Ok(())
    })
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
