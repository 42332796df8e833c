//! `lachesis-kv`: the KV front end alone, without Redis or a controller (benchmarks, the
//! conformance test). Tenants by key prefix or by port, each with a hybrid flash cache on the
//! given device or a DRAM cache.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, ValueEnum};
use lachesis_device::measured::{parse_size, MeasuredDevice, MeasuredOptions};
use lachesis_kv::{Service, ServiceConfig, DEFAULT_TENANT};
use lachesis_stages::stage::space::Devices;
use lachesis_switch::{
    CacheConfig, CacheEngine, Classifier, ClassifierKind, EnginePart, Eviction, PartHandle,
    StageConfig, Tenant, WriteMode,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SmallEngine {
    /// Kangaroo (KLog + KSet): the stage engine `hybrid`.
    Kangaroo,
    /// FairyWREN (FwLog + hot and cold FwSets), erase units of the device's reclaim unit: the
    /// stage engine `hybrid-fairywren`.
    Fairywren,
}

impl SmallEngine {
    /// The stage's engine and its small-object engine's parts.
    fn stage(self) -> (CacheEngine, &'static [EnginePart]) {
        match self {
            SmallEngine::Kangaroo => (CacheEngine::Hybrid, &[EnginePart::KLog, EnginePart::KSet]),
            SmallEngine::Fairywren => (
                CacheEngine::HybridFairywren,
                &[EnginePart::FwLog, EnginePart::FwSets, EnginePart::FwCold],
            ),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Handles {
    /// Each tenant's Kangaroo log, Kangaroo sets and large-object log write with their own
    /// placement handle (what the placement broker hands out).
    Separate,
    /// Every stream writes with handle 0 (no placement).
    Shared,
}

/// memcached-protocol front end over per-tenant hybrid flash caches (Kangaroo for objects
/// under 2 KiB, the log for larger ones, a DRAM cache in front).
#[derive(Parser, Debug)]
#[command(name = "lachesis-kv", version)]
struct Args {
    /// Address to serve on (port 0: any free port; the address is printed on stdout).
    #[arg(long, default_value = "127.0.0.1:11311")]
    listen: SocketAddr,
    /// A flash device, NAME=PATH:SIZE (a file, created sparse; SIZE like 1GiB). It is opened
    /// as a measuring device (the simulated FDP SSD's FTL beside the data), so `stats
    /// lachesis` reports its host and media bytes. Without one, every cache is DRAM only.
    #[arg(long)]
    device: Option<String>,
    /// A tenant, NAME=prefix:PFX (its keys start with PFX) or NAME=port:N (every key of a
    /// connection to port N on the listen address's host). Repeatable. None: one tenant
    /// `default` takes every key.
    #[arg(long = "tenant")]
    tenants: Vec<String>,
    /// Flash cache per tenant, MiB (needs --device; 0: DRAM only).
    #[arg(long, default_value_t = 0)]
    cache_mib: u64,
    /// DRAM per tenant, MiB: the DRAM front of its flash cache, or its whole cache without
    /// one.
    #[arg(long, default_value_t = 64)]
    dram_mib: u64,
    /// Placement handles of the tenants' engine parts.
    #[arg(long, value_enum, default_value_t = Handles::Separate)]
    handles: Handles,
    /// Share of each flash cache for the small-object engine (the rest is the log); FairyWREN
    /// takes at least its 11 erase units.
    #[arg(long, default_value_t = 0.5)]
    small_fraction: f64,
    /// The small-object engine of each tenant's flash cache.
    #[arg(long, value_enum, default_value_t = SmallEngine::Kangaroo)]
    small_engine: SmallEngine,
    /// Directory for warm restart: a clean shutdown (SIGINT, SIGTERM) leaves the caches'
    /// state there, the next start restores it.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Largest value, bytes (memcached's -I).
    #[arg(long, default_value_t = 1 << 20)]
    max_item: usize,
    /// Connections served at once; more are refused.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Unsent reply bytes a connection may have before it is closed.
    #[arg(long, default_value_t = 4 << 20)]
    output_bound: usize,
    /// Connection threads (memcached's -t); each keeps the connections it is given. 0: one
    /// per CPU.
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

enum Selector {
    Prefix(String),
    Port(u16),
}

fn parse_tenant(s: &str) -> Result<(String, Selector), String> {
    let bad = || format!("--tenant {s:?}: expected NAME=prefix:PFX or NAME=port:N");
    let (name, sel) = s.split_once('=').ok_or_else(bad)?;
    if !lachesis_switch::names::is_valid_name(name) {
        return Err(format!(
            "--tenant {s:?}: {}",
            lachesis_switch::names::name_error(name)
        ));
    }
    let sel = match sel.split_once(':').ok_or_else(bad)? {
        ("prefix", p) if !p.is_empty() && !p.contains(char::is_whitespace) => {
            Selector::Prefix(p.into())
        }
        ("port", p) => Selector::Port(p.parse().ok().filter(|&p| p > 0).ok_or_else(bad)?),
        _ => return Err(bad()),
    };
    Ok((name.to_string(), sel))
}

fn setup(args: &Args) -> Result<(Arc<Service>, Vec<SocketAddr>), String> {
    if !(0.0..1.0).contains(&args.small_fraction) {
        return Err(format!(
            "--small-fraction {} must be in [0, 1)",
            args.small_fraction
        ));
    }
    if args.max_item == 0 || args.max_connections == 0 || args.output_bound < args.max_item {
        return Err(
            "--max-item and --max-connections must be positive, --output-bound at least --max-item"
                .into(),
        );
    }
    let mut tenants = Vec::new();
    let mut ports = Vec::new();
    for t in &args.tenants {
        let (name, sel) = parse_tenant(t)?;
        let classifiers = match sel {
            Selector::Prefix(p) => vec![Classifier {
                kind: ClassifierKind::KeyPrefix,
                value: p,
            }],
            Selector::Port(p) => {
                if p == args.listen.port() || ports.iter().any(|(q, _)| *q == p) {
                    return Err(format!("--tenant {t:?}: port {p} is already in use here"));
                }
                ports.push((p, name.clone()));
                Vec::new()
            }
        };
        if tenants.iter().any(|x: &Tenant| x.name == name) {
            return Err(format!("--tenant {t:?}: tenant {name:?} is given twice"));
        }
        tenants.push(Tenant { name, classifiers });
    }
    let names: Vec<String> = if tenants.is_empty() {
        vec![DEFAULT_TENANT.to_string()]
    } else {
        tenants.iter().map(|t| t.name.clone()).collect()
    };
    let mut devices = Devices::default();
    let mut measured = Vec::new();
    if let Some(d) = &args.device {
        let bad = || format!("--device {d:?}: expected NAME=PATH:SIZE");
        let (name, rest) = d.split_once('=').ok_or_else(bad)?;
        let (path, size) = rest.rsplit_once(':').ok_or_else(bad)?;
        let size = parse_size(size).map_err(|e| format!("--device {d:?}: {e}"))?;
        let handles = match args.handles {
            Handles::Separate => (1 + 4 * names.len()).max(8),
            Handles::Shared => 8,
        };
        let options = MeasuredOptions {
            handles: u16::try_from(handles)
                .ok()
                .filter(|&h| h <= 256)
                .ok_or_else(|| {
                    format!(
                        "{} tenants need more than 256 placement handles",
                        names.len()
                    )
                })?,
            ..MeasuredOptions::default()
        };
        let dev = MeasuredDevice::open(path, size, options)
            .map_err(|e| format!("--device {d:?}: {e}"))?;
        measured.push((name.to_string(), dev.stats_reader()));
        devices = Devices::new(vec![(name.to_string(), lachesis_cache::share(dev))])?;
    } else if args.cache_mib > 0 {
        return Err("--cache-mib needs a --device".into());
    }
    let mut stages = Vec::new();
    if args.cache_mib > 0 {
        for (i, t) in names.iter().enumerate() {
            let h = |k: u16| match args.handles {
                Handles::Separate => 1 + 4 * i as u16 + k,
                Handles::Shared => 0,
            };
            let (engine, small_parts) = args.small_engine.stage();
            let mut placement = vec![PartHandle {
                part: EnginePart::Loc,
                handle: h(0),
            }];
            placement.extend(
                small_parts
                    .iter()
                    .zip(1..)
                    .map(|(&part, k)| PartHandle { part, handle: h(k) }),
            );
            stages.push(StageConfig::Cache(CacheConfig {
                name: format!("cache/{t}"),
                owner: Some(t.clone()),
                engine,
                size_bytes: args.cache_mib << 20,
                write_mode: WriteMode::Back,
                eviction: Eviction::Lru,
                // Unused by the KV front end (its DRAM front is write-back by nature); the contract's
                // smallest valid value, so the config reads back from the warm-restart record.
                max_dirty_bytes: 4096,
                device: None,
                placement,
                next: None,
                serves: None,
                exclusive: false,
            }));
        }
    }
    let mut config = ServiceConfig::new(devices);
    config.measured = measured;
    config.max_item = args.max_item;
    config.max_connections = args.max_connections;
    config.output_bound = args.output_bound;
    config.state_dir = args.state_dir.clone();
    config.default_dram_bytes = args.dram_mib << 20;
    config.layout.dram_bytes = Some(args.dram_mib << 20);
    config.layout.small_fraction = args.small_fraction;
    let service = Service::new(config)?;
    for (p, t) in &ports {
        service.bind_port(*p, t);
    }
    service.apply(tenants, Vec::new(), stages)?;
    let mut listen = vec![args.listen];
    listen.extend(
        ports
            .iter()
            .map(|(p, _)| SocketAddr::new(args.listen.ip(), *p)),
    );
    Ok((Arc::new(service), listen))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let (service, listen) = match setup(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("lachesis-kv: {e}");
            return ExitCode::from(2);
        }
    };
    let threads = match args.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    // Accepting and signals on this thread; connections on the workers.
    let (rt, workers) = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .and_then(|rt| Ok((rt, lachesis_kv::server::Workers::start(threads, "kv")?)))
    {
        Ok(x) => x,
        Err(e) => {
            eprintln!("lachesis-kv: tokio: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for addr in listen {
            let l = match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("lachesis-kv: listen {addr}: {e}");
                    return ExitCode::from(2);
                }
            };
            println!("listening on {}", l.local_addr().map_or(addr, |a| a));
            tasks.push(tokio::spawn(lachesis_kv::server::serve_listener(
                l,
                service.clone(),
                rx.clone(),
                workers.clone(),
            )));
        }
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("lachesis-kv: signals: {e}");
                    return ExitCode::FAILURE;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        let _ = tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
        match service.shutdown() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lachesis-kv: shutdown: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
