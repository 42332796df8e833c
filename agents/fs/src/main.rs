//! `lachesis-fs mount`: runs the FUSE sSwitch on its own until SIGINT/SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::{Parser, Subcommand};
use lachesis_fs::classify::{load_tenants, Classifier, TenantSpec};
use lachesis_fs::fuse::SwitchFs;
use lachesis_fs::remote::auth::Key;
use lachesis_fs::stage::Devices;
use lachesis_fs::{config, Switch, SwitchOptions};

#[derive(Parser)]
#[command(name = "lachesis-fs", about = "FUSE sSwitch of the Lachesis data path")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mount a namespace over a backing directory, routing its IO by the rules file.
    Mount(MountArgs),
    /// Answer IO forwarded by other agents' remote endpoints (tcp://HOST:PORT/dir) from DIR.
    Serve {
        /// Address to listen on, e.g. 0.0.0.0:7070.
        #[arg(long)]
        listen: String,
        /// Directory the forwarded files live under.
        #[arg(long)]
        root: PathBuf,
        /// Accept only peers that prove they hold the shared key in this file (HMAC-SHA256
        /// challenge-response, both ways); without it anyone may connect.
        #[arg(long)]
        forward_key_file: Option<PathBuf>,
        /// Test and benchmark hook: while FILE holds a number N, every request waits N
        /// microseconds before it is answered (an endpoint made slow on demand).
        #[arg(long, value_name = "FILE")]
        test_delay_file: Option<PathBuf>,
        /// Answer at most N requests a second (all connections together; probes and
        /// metadata count): requests over it queue in arrival order (lachesis-stages serve/limit.rs).
        #[arg(long, value_name = "N")]
        max_iops: Option<u64>,
        /// Read and write at most N data bytes a second (all connections together);
        /// requests over it queue in arrival order.
        #[arg(long, value_name = "N")]
        max_bytes_per_s: Option<u64>,
        #[command(flatten)]
        level: lachesis_fs::serve::level::ServeLevelArgs,
    },
}

#[derive(clap::Args)]
struct MountArgs {
    /// Directory holding the namespace's files.
    #[arg(long)]
    backing: PathBuf,
    #[arg(long)]
    mountpoint: PathBuf,
    /// JSON array of rules in the bus `rule` shape, or {"rules": [...], "stages": [...]}
    /// with the stages (desired-state `stages` shape) the rules name; re-read when it changes.
    #[arg(long)]
    rules: PathBuf,
    /// A device flash cache stages may live on (repeatable; the first is the default):
    /// NAME=PATH:SIZE (io_uring on a file or block device; a missing file is created
    /// sparse), NAME=measured:PATH:SIZE[:KEY=VALUE,...] (data in the file, the simulated
    /// FDP SSD's FTL beside it, see lachesis_device::measured) or NAME=nvme:/dev/ngXnY (an
    /// NVMe namespace with FDP through io_uring passthrough).
    #[arg(long = "device", value_name = "NAME=SPEC")]
    devices: Vec<String>,
    /// Rules may make the switch write (file endpoints, header logs, log stages) only under
    /// these directories (repeatable) [default: anywhere: this file's operator wrote the rules].
    #[arg(long = "endpoint-root", value_name = "DIR")]
    endpoint_roots: Vec<PathBuf>,
    /// A tenant: NAME=path:/PREFIX (files under PREFIX in the namespace, component-wise),
    /// NAME=uid:N or NAME=cgroup:/PATH (repeatable). Several match: the longest path prefix,
    /// else the longest cgroup, else the uid; the first given on a tie.
    #[arg(long = "tenant")]
    tenants: Vec<TenantSpec>,
    /// More tenants, one NAME=path:/PREFIX, NAME=uid:N or NAME=cgroup:/PATH a line (after
    /// the --tenant ones); re-read when it changes
    /// (new opens are classified by the new tenants, open files keep theirs).
    #[arg(long)]
    tenants_file: Option<PathBuf>,
    /// Where delegate journals of stage-only routes live [default: BACKING/.lachesis-fs,
    /// hidden from the namespace].
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Written every 250 ms with stage counters (hit ratios) and flow states, numbered
    /// (`snapshot`), so a reader can wait for one taken after a given moment.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// Never use kernel passthrough (every IO through user space).
    #[arg(long)]
    no_passthrough: bool,
    /// FUSE worker threads.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// How the kernel's FUSE requests arrive: `uring` (FUSE over io_uring, per-CPU queues;
    /// Linux 6.14+ with /sys/module/fuse/parameters/enable_uring = Y), `dev` (threads reading
    /// /dev/fuse), or `auto` (uring when the kernel has it on, else dev).
    #[arg(long, default_value = "auto", value_parser = lachesis_fs::fuse::FuseTransport::parse)]
    fuse_transport: lachesis_fs::fuse::FuseTransport,
    /// A request to a remote endpoint (tcp://) unanswered this long fails with EIO.
    #[arg(long, default_value_t = 5000)]
    remote_timeout_ms: u64,
    /// Authenticate to remote endpoints' agents with the shared key in this file (the
    /// same file as their `serve --forward-key-file`).
    #[arg(long)]
    forward_key_file: Option<PathBuf>,
    /// Write-back cache data older than this is written on in the background, without
    /// a sync (like the kernel's vm.dirty_expire_centisecs).
    #[arg(long, default_value_t = 30_000)]
    dirty_expire_ms: u64,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn usage_error(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("lachesis-fs: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().cmd {
        Cmd::Serve {
            listen,
            root,
            forward_key_file,
            test_delay_file,
            max_iops,
            max_bytes_per_s,
            level,
        } => {
            if let Some(f) = test_delay_file {
                lachesis_fs::serve::server::test_delay::set_file(f);
            }
            let limit = match lachesis_fs::serve::limit::Limits::new(max_iops, max_bytes_per_s) {
                Ok(l) => l.map(|l| Arc::new(lachesis_fs::serve::limit::RateLimit::new(l))),
                Err(e) => return usage_error(e),
            };
            serve(&listen, &root, forward_key_file.as_deref(), &level, limit)
        }
        Cmd::Mount(args) => mount(args),
    }
}

/// `lachesis-fs mount`: runs until SIGINT/SIGTERM, reloading the rules and tenants files
/// when they change.
fn mount(args: MountArgs) -> ExitCode {
    let MountArgs {
        backing,
        mountpoint,
        rules,
        tenants,
        tenants_file,
        state_dir,
        stats,
        no_passthrough,
        threads,
        fuse_transport,
        remote_timeout_ms,
        forward_key_file,
        dirty_expire_ms,
        devices,
        endpoint_roots,
    } = args;
    let key = match forward_key_file.as_deref().map(Key::load).transpose() {
        Ok(k) => k,
        Err(e) => return usage_error(format!("--forward-key-file: {e}")),
    };
    if remote_timeout_ms == 0 {
        return usage_error("--remote-timeout-ms must be at least 1");
    }
    if dirty_expire_ms == 0 {
        return usage_error("--dirty-expire-ms must be at least 1");
    }
    if !backing.is_dir() {
        return usage_error(format!("--backing {}: not a directory", backing.display()));
    }
    // A dead mount a killed `lachesis-fs mount` left is detached; a live one is refused.
    if let Err(e) = lachesis_fs::stale_mount::clear(&mountpoint) {
        return usage_error(format!("--mountpoint: {e}"));
    }
    if !mountpoint.is_dir() {
        return usage_error(format!(
            "--mountpoint {}: not a directory",
            mountpoint.display()
        ));
    }
    if threads == 0 {
        return usage_error("--threads must be at least 1");
    }
    let transport = match fuse_transport.resolve(threads) {
        Ok(t) => t,
        Err(e) => return usage_error(format!("--fuse-transport {e}")),
    };
    // The flags' tenants, then the file's.
    let all_tenants = |file: &Option<PathBuf>| -> Result<Vec<TenantSpec>, String> {
        let mut t = tenants.clone();
        if let Some(f) = file {
            t.extend(load_tenants(f)?);
        }
        Ok(t)
    };
    let classifier = match all_tenants(&tenants_file) {
        Ok(t) => Classifier::new(t),
        Err(e) => return usage_error(format!("--tenants-file: {e}")),
    };
    let devices = match open_devices(&devices) {
        Ok(d) => d,
        Err(e) => return usage_error(format!("--device {e}")),
    };
    let file = match config::load(&rules) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    let (state_dir, hidden) = match state_dir {
        Some(d) => (d, None),
        None => (
            backing.join(".lachesis-fs"),
            Some(".lachesis-fs".to_string()),
        ),
    };
    let roots = if endpoint_roots.is_empty() {
        lachesis_fs::confine::Roots::anywhere()
    } else {
        match lachesis_fs::confine::Roots::under(&endpoint_roots) {
            Ok(r) => r,
            Err(e) => return usage_error(format!("--{e}")),
        }
    };
    let switch = match Switch::new(SwitchOptions {
        state_dir,
        rules: file.rules,
        stages: file.stages,
        devices,
        roots,
        remote: lachesis_fs::route::RemoteOptions {
            timeout: Duration::from_millis(remote_timeout_ms),
            key,
        },
    }) {
        Ok(s) => Arc::new(s),
        Err(e) => return usage_error(e),
    };
    let fs = match SwitchFs::new(
        &backing,
        switch.clone(),
        classifier.clone(),
        !no_passthrough,
        hidden,
    ) {
        Ok(f) => f.with_dirty_expire(Duration::from_millis(dirty_expire_ms)),
        Err(e) => return usage_error(format!("--backing {}: {e}", backing.display())),
    };
    let session = match lachesis_fusering::Session::start(
        &mountpoint,
        lachesis_fs::fuse::mount_config(transport),
        Arc::new(lachesis_fusering::Dispatcher::new(fs)),
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lachesis-fs: mounting {}: {e}", mountpoint.display());
            return ExitCode::from(1);
        }
    };
    if let Err(e) = lachesis_fs::fuse::check_transport(fuse_transport, &session) {
        eprintln!("lachesis-fs: --fuse-transport {e}");
        return ExitCode::from(1);
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let mtime = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut seen: Option<SystemTime> = mtime(&rules);
    let mut seen_tenants = tenants_file.as_ref().and_then(mtime);
    let mut snapshot: u64 = 0;
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(250));
        let now = mtime(&rules);
        if now != seen {
            seen = now;
            match config::load(&rules).and_then(|f| Ok(switch.set_rules(f.rules, &f.stages)?)) {
                Ok(()) => tracing::info!("rules reloaded from {}", rules.display()),
                Err(e) => tracing::error!("keeping the old rules: {e}"),
            }
        }
        if let Some(f) = &tenants_file {
            let now = mtime(f);
            if now != seen_tenants {
                seen_tenants = now;
                match all_tenants(&tenants_file) {
                    Ok(t) => {
                        tracing::info!(tenants = t.len(), "tenants reloaded from {}", f.display());
                        classifier.replace(&Classifier::new(t));
                    }
                    Err(e) => tracing::error!("keeping the old tenants: {e}"),
                }
            }
        }
        if let Some(p) = &stats {
            let tmp = p.with_extension("tmp");
            // Taken, written and renamed in turn: a reader that sees snapshot n knows that
            // n + 1 was not renamed yet when it looked, so n + 2 is taken after it looked.
            let mut stats = switch.stats();
            stats["snapshot"] = snapshot.into();
            stats["fuse"] = fuse_stats(&session);
            snapshot += 1;
            let body = serde_json::to_vec_pretty(&stats).unwrap_or_default();
            if std::fs::write(&tmp, body)
                .and_then(|_| std::fs::rename(&tmp, p))
                .is_err()
            {
                tracing::warn!("cannot write stats to {}", p.display());
            }
        }
    }
    match session.umount_and_join() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lachesis-fs: unmounting {}: {e}", mountpoint.display());
            ExitCode::from(1)
        }
    }
}

/// Which way FUSE requests came, for the stats file: the transport and each path's count.
fn fuse_stats(session: &lachesis_fusering::Session) -> serde_json::Value {
    let c = session.counters();
    serde_json::json!({
        "transport": session.transport_name(),
        "dev_requests": c.dev_requests.load(Ordering::Relaxed),
        "ring_requests": c.ring_requests.load(Ordering::Relaxed),
        "ring_error": c.ring_error(),
    })
}

/// Opens every `--device NAME=SPEC` (see `MountArgs::devices`).
fn open_devices(specs: &[String]) -> Result<Devices, String> {
    use lachesis_device::measured::{parse_size, MeasuredSpec};
    use lachesis_device::uring::{UringConfig, UringDevice};
    let mut list = Vec::new();
    for s in specs {
        let (name, spec) = s.split_once('=').ok_or_else(|| {
            format!(
                "{s:?}: expected NAME=PATH:SIZE, NAME=measured:PATH:SIZE or NAME=nvme:/dev/ngXnY"
            )
        })?;
        let err = |e: lachesis_device::Error| format!("{name}: {e}");
        let dev = if let Some(path) = spec.strip_prefix("nvme:") {
            // An NVMe namespace's generic device through io_uring passthrough, writes placed
            // with FDP (required: a cache stage's handles must mean something).
            lachesis_cache::share(
                lachesis_device::nvme::NvmePassthru::open(
                    path,
                    lachesis_device::nvme::NvmeConfig::default(),
                )
                .map_err(err)?,
            )
        } else if spec.starts_with("measured:") {
            lachesis_cache::share(
                MeasuredSpec::parse(spec)
                    .and_then(|m| m.open())
                    .map_err(err)?,
            )
        } else {
            let (path, size) = spec
                .rsplit_once(':')
                .ok_or_else(|| format!("{s:?}: expected NAME=PATH:SIZE"))?;
            let size = parse_size(size).map_err(err)?;
            lachesis_cache::share(
                UringDevice::open(
                    path,
                    UringConfig {
                        create_size: Some(size),
                        // Stages take turns on the device under its lock: any thread submits.
                        single_issuer: false,
                        ..Default::default()
                    },
                )
                .map_err(err)?,
            )
        };
        list.push((name.to_string(), dev));
    }
    Ok(Devices::new(list)?)
}

/// `lachesis-fs serve`: runs until killed.
fn serve(
    listen: &str,
    root: &std::path::Path,
    key_file: Option<&std::path::Path>,
    level: &lachesis_fs::serve::level::ServeLevelArgs,
    limit: Option<Arc<lachesis_fs::serve::limit::RateLimit>>,
) -> ExitCode {
    use lachesis_fs::serve::server;
    let key = match key_file.map(Key::load).transpose() {
        Ok(k) => k,
        Err(e) => return usage_error(format!("--forward-key-file: {e}")),
    };
    let store: Arc<dyn server::Store> = match server::DirStore::new(root) {
        Ok(s) => Arc::new(s),
        Err(e) => return usage_error(format!("--root: {e}")),
    };
    // The server level (two-level caches) in front of the store, when asked for.
    let store = match open_devices(&level.devices)
        .map_err(|e| format!("--device {e}"))
        .and_then(|d| level.build(store, d))
    {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    let listener = match std::net::TcpListener::bind(listen) {
        Ok(l) => l,
        Err(e) => return usage_error(format!("--listen {listen}: {e}")),
    };
    tracing::info!(
        authenticated = key.is_some(),
        "serving {} on {listen}",
        root.display()
    );
    match server::serve_limited(listener, store, key, limit) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lachesis-fs: serving on {listen}: {e}");
            ExitCode::from(1)
        }
    }
}
