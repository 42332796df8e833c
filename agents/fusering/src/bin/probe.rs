//! `fusering-probe`: mounts the probe file system (one file, `data`, no IO behind it) over
//! FUSE with the chosen transport, prints `ready` once mounted, and on SIGINT or SIGTERM
//! prints what each transport carried as one JSON object and unmounts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use clap::{Parser, ValueEnum};
use lachesis_fusering::probe::ProbeFs;
use lachesis_fusering::{Session, SessionConfig, Transport};

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    /// Worker threads reading /dev/fuse.
    Dev,
    /// A queue per CPU over io_uring (needs /sys/module/fuse/parameters/enable_uring = Y).
    Uring,
}

#[derive(Parser)]
#[command(about = "Measure the FUSE transport: one file, no IO behind it")]
struct Args {
    #[arg(long)]
    mountpoint: PathBuf,
    #[arg(long, value_enum, default_value = "uring")]
    transport: Mode,
    /// /dev/fuse worker threads (dev).
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Entries per queue (uring).
    #[arg(long, default_value_t = 8)]
    depth: u16,
    /// Bytes of the file `data`.
    #[arg(long, default_value_t = 1 << 30)]
    size: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.threads == 0 || args.depth == 0 {
        eprintln!("fusering-probe: --threads and --depth must be at least 1");
        return ExitCode::from(2);
    }
    // Block the signals before any thread starts, so that only sigwait below sees them.
    // SAFETY: a sigset built with the libc calls and read by them.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let transport = match args.transport {
        Mode::Dev => Transport::Dev {
            threads: args.threads,
        },
        Mode::Uring => Transport::Uring {
            depth: args.depth,
            threads: 1,
        },
    };
    let cfg = SessionConfig {
        transport,
        name: "fusering-probe".into(),
        ..Default::default()
    };
    let session = match Session::start(&args.mountpoint, cfg, Arc::new(ProbeFs { size: args.size }))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "fusering-probe: mounting {}: {e}",
                args.mountpoint.display()
            );
            return ExitCode::FAILURE;
        }
    };
    println!("ready");
    let mut sig = 0;
    // SAFETY: waits on the set built above.
    unsafe { libc::sigwait(&set, &mut sig) };
    let c = session.counters();
    println!(
        "{{\"dev_requests\": {}, \"ring_requests\": {}, \"ring_entries\": {}, \"uring_offered\": {}, \"ring_error\": {}}}",
        c.dev_requests.load(Ordering::Relaxed),
        c.ring_requests.load(Ordering::Relaxed),
        c.ring_entries.load(Ordering::Relaxed),
        c.uring_offered.load(Ordering::Relaxed),
        c.ring_error().map_or("null".into(), |e| format!("{e:?}")),
    );
    drop(session);
    ExitCode::SUCCESS
}
