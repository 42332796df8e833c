//! `lachesis-agent`: the per-host agent of Lachesis. Parses the command line and hands it to
//! the library: `run` is `lachesis_agent::start`, `top` the eBPF maps' live view.
//!
//! Exit codes: 0 after SIGINT/SIGTERM, 2 for bad arguments or devices (with a message on
//! stderr), 1 if the runtime cannot start (or, for `top`, no agent's maps are pinned).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};
use lachesis_agent::cli::RunArgs;
use lachesis_ebpf_metrics::{MetricsMaps, DEFAULT_PIN_DIR};

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

fn run(args: RunArgs) -> ExitCode {
    if let Err(c) = args.conflicts() {
        usage_error(c.kind, c.message);
    }
    match lachesis_agent::start::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
