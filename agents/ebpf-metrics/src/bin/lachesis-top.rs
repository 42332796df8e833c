//! Live per-tenant IO view.
//!
//! With a running agent (maps pinned under /sys/fs/bpf/lachesis) it reads
//! the agent's maps. Standalone, `--cgroup NAME=PATH` loads the programs
//! itself and maps each cgroup to a tenant, so it can be used without an
//! agent.

use clap::Parser;
use lachesis_ebpf_metrics::{
    cgroup_dir, cgroup_id, threshold_for_rate, top, EbpfMetrics, Layer, LoadOptions, MetricsMaps,
    Op,
};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    about = "Per-tenant IOPS, bandwidth, latency and SHARDS sampling rate from Lachesis's eBPF maps"
)]
struct Args {
    /// Directory of the agent's pinned maps.
    #[arg(long, default_value = lachesis_ebpf_metrics::DEFAULT_PIN_DIR)]
    pin_dir: PathBuf,
    /// Standalone: load the programs and watch these cgroups as tenants (`NAME=PATH`, PATH
    /// a cgroup v2 path as /proc/PID/cgroup shows it, `/system.slice/nginx.service`, as a
    /// tenant's cgroup classifier; not a host path).
    #[arg(long = "cgroup", value_name = "NAME=PATH")]
    cgroups: Vec<String>,
    /// Standalone: SHARDS sampling rate for the tenants.
    #[arg(long, default_value_t = 0.01)]
    rate: f64,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Stop after this many refreshes (default: run until killed).
    #[arg(long)]
    count: Option<u64>,
    /// Standalone: no live view; say `ready` on stderr once attached, count until stdin is
    /// closed, then print every tenant's counters per layer and op as JSON. Scripts (the guest
    /// suite) bracket a workload with it, so what is counted does not depend on timing.
    #[arg(long, requires = "cgroups")]
    json_until_eof: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lachesis-top: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if !(args.interval > 0.0 && args.interval.is_finite()) {
        return Err(format!(
            "--interval must be a positive number of seconds, got {}",
            args.interval
        )
        .into());
    }
    let interval = Duration::from_secs_f64(args.interval);
    let clear = std::io::stdout().is_terminal();
    let mut out = std::io::stdout().lock();
    if args.cgroups.is_empty() {
        let maps = MetricsMaps::open_pinned(&args.pin_dir)?;
        top::run(&maps, interval, args.count, clear, &mut out)?;
        return Ok(());
    }
    let engine = EbpfMetrics::load(&LoadOptions::default())?;
    for reason in engine.degraded() {
        eprintln!("lachesis-top: warning: {reason}");
    }
    let threshold = threshold_for_rate(args.rate);
    for (tenant, spec) in args.cgroups.iter().enumerate() {
        let (name, path) = spec
            .split_once('=')
            .ok_or_else(|| format!("--cgroup wants NAME=PATH, got {spec:?}"))?;
        let tenant = u32::try_from(tenant)?;
        let id = cgroup_id(&cgroup_dir(path)?)?;
        engine.set_tenant(tenant, name, threshold)?;
        engine.map_cgroup(id, tenant)?;
    }
    if args.json_until_eof {
        eprintln!("ready");
        std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink())?;
        let mut all = serde_json::Map::new();
        for (tenant, spec) in args.cgroups.iter().enumerate() {
            let name = spec.split_once('=').map_or(spec.as_str(), |(n, _)| n);
            let stats = engine.tenant_stats(u32::try_from(tenant)?)?;
            let mut layers = serde_json::Map::new();
            for layer in Layer::ALL {
                let mut ops = serde_json::Map::new();
                for op in Op::ALL {
                    let s = stats.get(layer, op);
                    ops.insert(
                        format!("{op:?}").to_lowercase(),
                        serde_json::json!({"ops": s.ops, "bytes": s.bytes, "latency_samples": s.latency.count()}),
                    );
                }
                layers.insert(layer.name().into(), ops.into());
            }
            all.insert(name.into(), layers.into());
        }
        println!("{}", serde_json::Value::Object(all));
        return Ok(());
    }
    top::run(&engine, interval, args.count, clear, &mut out)?;
    Ok(())
}
