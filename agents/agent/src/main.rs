//! `lachesis-agent`: the per-host agent of Lachesis.
//!
//! Exit codes: 0 after SIGINT/SIGTERM, 2 for bad arguments or devices (with a message on
//! stderr), 1 if the runtime cannot start.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};
use lachesis_agent::bus::is_valid_host_id;
use lachesis_agent::caps::{parse_device_spec, prepare_device, DeviceSpec};
use lachesis_agent::runner::{Agent, Config};
use tokio::signal::unix::{signal, SignalKind};
use tracing::info;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(name = "lachesis-agent", version, about = "Per-host agent of Lachesis")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Register with the controller over Redis, apply desired state, heartbeat.
    Run(RunArgs),
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

    /// A flash device; a missing PATH is created as a sparse file of SIZE (e.g. 1GiB,
    /// 512MiB, 4096). Repeatable.
    #[arg(long = "device", value_name = "NAME=PATH:SIZE", value_parser = parse_device_spec)]
    devices: Vec<DeviceSpec>,

    /// How often to refresh the heartbeat key.
    #[arg(long, value_name = "MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_interval_ms: u64,

    /// TTL of the heartbeat key; must exceed the interval.
    #[arg(long, value_name = "SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_ttl_s: u64,
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
        .map_err(|e| format!("{s:?} is not a Redis URL: {e}"))
}

fn usage_error(kind: ErrorKind, msg: String) -> ! {
    Cli::command().error(kind, msg).exit()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(args),
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

    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();

    let mut devices = Vec::new();
    for spec in &args.devices {
        match prepare_device(spec) {
            Ok(d) => devices.push(d),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let client = match redis::Client::open(args.redis_url.as_str()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: --redis-url {:?}: {e}", args.redis_url);
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
        let registration = lachesis_agent::registration(&args.host_id, devices);
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
        let agent = Agent::new(cfg, client, registration);
        agent
            .run(async move {
                let which = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                info!(signal = %which, "shutting down");
            })
            .await;
        info!("stopped");
        ExitCode::SUCCESS
    })
}
