//! Benchmarks and IO drivers for the eBPF metrics engine.
//!
//! * `fio`: fio 4 KiB O_DIRECT random reads (psync and io_uring) with the
//!   programs attached vs detached, alternating, medians of several rounds;
//!   events reaching user space per IO. `bench/ebpf/run.sh` runs it.
//! * `syscalls`: cost per syscall of the raw_syscalls hook, for a non-IO
//!   syscall (getppid) outside any tenant and a cached 4 KiB pread inside one.
//! * `io`: a tight O_DIRECT pread/pwrite loop (or io_uring) in a cgroup,
//!   over an ARC trace, random distinct blocks or a sequential range. The
//!   integration tests drive it as their known IO: it reads its inputs and
//!   opens its file *before* joining the cgroup, so the tenant's IO is
//!   exactly the loop.
//! * `spin`: a getppid loop (used by `syscalls`).

use clap::{Parser, Subcommand};
use lachesis_device::AlignedBuf;
use lachesis_ebpf_metrics::{
    cgroup2_mount, cgroup_id, threshold_for_rate, EbpfMetrics, Layer, Layers, LoadOptions, Op,
    Sample, SampleReader,
};
use lachesis_mrc::hash::SplitMix64;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Parser)]
#[command(about = "Benchmarks and IO drivers for Lachesis's eBPF metrics")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Tight IO loop in a cgroup.
    Io(IoArgs),
    /// fio with the programs attached vs detached.
    Fio(FioArgs),
    /// Per-syscall cost of the syscall hook.
    Syscalls(SyscallArgs),
    /// getppid() in a loop; prints ns per call.
    Spin {
        #[arg(long, default_value_t = 2_000_000)]
        n: u64,
    },
}

#[derive(Parser, Clone)]
struct IoArgs {
    /// File (or block device) to read or write.
    #[arg(long)]
    file: PathBuf,
    /// cgroup v2 directory to join before the IO loop.
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// Replay an ARC trace (zstd or plain): one IO per 512-byte-block
    /// reference, at offset block * bs.
    #[arg(long)]
    arc: Option<PathBuf>,
    /// This many distinct random blocks of the file, in random order.
    #[arg(long)]
    random: Option<u64>,
    /// This many sequential blocks from offset 0 (default when neither
    /// --arc nor --random is given).
    #[arg(long, default_value_t = 1024)]
    seq: u64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// IO size and block granule in bytes.
    #[arg(long, default_value_t = 4096)]
    bs: usize,
    /// Write instead of read.
    #[arg(long)]
    write: bool,
    /// Buffered IO instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
    /// psync (pread/pwrite loop) or uring (io_uring, --qd in flight).
    #[arg(long, default_value = "psync")]
    engine: String,
    #[arg(long, default_value_t = 8)]
    qd: u32,
}

#[derive(Parser)]
struct FioArgs {
    /// Directory for the test file (on the disk to measure).
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    /// Test file size in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// Seconds per fio run.
    #[arg(long, default_value_t = 6)]
    runtime: u64,
    /// Rounds; each runs every engine attached and detached, in
    /// alternating order.
    #[arg(long, default_value_t = 9)]
    rounds: u32,
    /// SHARDS sampling rate for the benchmark tenant.
    #[arg(long, default_value_t = 0.01)]
    rate: f64,
    /// io_uring queue depth.
    #[arg(long, default_value_t = 16)]
    iodepth: u32,
    #[arg(long, value_delimiter = ',', default_value = "psync,io_uring")]
    engines: Vec<String>,
    /// Also write the raw runs as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Attach the block layer (and SHARDS) only: no syscall, io_uring or
    /// device-layer programs.
    #[arg(long)]
    block_only: bool,
    /// Syscall layer through the raw_syscalls hook instead of the IO
    /// syscalls' own tracepoints (LoadOptions::raw_syscalls).
    #[arg(long)]
    raw_syscalls: bool,
}

#[derive(Parser)]
struct SyscallArgs {
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    #[arg(long, default_value_t = 2_000_000)]
    n: u64,
    /// Syscall layer through the raw_syscalls hook (LoadOptions::raw_syscalls).
    #[arg(long)]
    raw_syscalls: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Io(a) => io_cmd(&a),
        Cmd::Fio(a) => fio_cmd(&a),
        Cmd::Syscalls(a) => syscalls_cmd(&a),
        Cmd::Spin { n } => {
            println!("{:.1}", spin(n));
            Ok(())
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lachesis-ebpf-bench: {e}");
            ExitCode::from(2)
        }
    }
}

// ---------------------------------------------------------------- io

/// Block numbers of an ARC trace, one per 512-byte-block reference.
pub fn arc_blocks(path: &Path) -> BoxResult<Vec<u64>> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "zst") {
        Box::new(BufReader::new(zstd::Decoder::new(f)?))
    } else {
        Box::new(BufReader::new(f))
    };
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line?;
        let mut it = line.split_ascii_whitespace();
        let (Some(start), Some(n)) = (it.next(), it.next()) else {
            continue;
        };
        let bad = |what: &str| format!("{}:{}: bad {what}", path.display(), i + 1);
        let start: u64 = start.parse().map_err(|_| bad("start block"))?;
        let n: u64 = n.parse().map_err(|_| bad("block count"))?;
        if n > 1 << 20 {
            return Err(bad("block count (too large)").into());
        }
        out.extend(start..start + n);
    }
    Ok(out)
}

fn join_cgroup(dir: &Path) -> BoxResult<()> {
    let procs = dir.join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string())
        .map_err(|e| format!("joining {}: {e}", procs.display()))?;
    Ok(())
}

fn io_cmd(a: &IoArgs) -> BoxResult<()> {
    let bs = a.bs;
    if bs == 0 || bs % 512 != 0 {
        return Err(format!("--bs {bs} must be a positive multiple of 512").into());
    }
    // Inputs first: none of this is the tenant's IO.
    let mut opts = OpenOptions::new();
    opts.read(true).write(a.write);
    if !a.buffered {
        opts.custom_flags(libc::O_DIRECT);
    }
    let file = opts
        .open(&a.file)
        .map_err(|e| format!("{}: {e}", a.file.display()))?;
    let file_blocks = file.metadata()?.len() / bs as u64;
    let blocks: Vec<u64> = if let Some(trace) = &a.arc {
        arc_blocks(trace)?
    } else if let Some(n) = a.random {
        if n > file_blocks {
            return Err(format!("--random {n} exceeds the file's {file_blocks} blocks").into());
        }
        let mut perm: Vec<u64> = (0..file_blocks).collect();
        let mut rng = SplitMix64(a.seed);
        for i in 0..n as usize {
            let j = i + (rng.next_u64() % (file_blocks - i as u64)) as usize;
            perm.swap(i, j);
        }
        perm.truncate(n as usize);
        perm
    } else {
        (0..a.seq.min(file_blocks)).collect()
    };
    if let Some(max) = blocks.iter().max() {
        if *max >= file_blocks {
            return Err(format!(
                "block {max} is beyond the file's {file_blocks} blocks of {bs} bytes"
            )
            .into());
        }
    }
    if let Some(cg) = &a.cgroup {
        join_cgroup(cg)?;
    }
    let t0 = Instant::now();
    let ios = match a.engine.as_str() {
        "psync" => io_psync(&file, &blocks, bs, a.write)?,
        "uring" => io_uring_loop(&a.file, &blocks, bs, a.write, a.qd, !a.buffered)?,
        other => return Err(format!("--engine {other}: want psync or uring").into()),
    };
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"ios": ios, "bytes": ios * bs as u64, "secs": secs, "iops": ios as f64 / secs})
    );
    Ok(())
}

fn io_psync(file: &File, blocks: &[u64], bs: usize, write: bool) -> BoxResult<u64> {
    let mut buf = AlignedBuf::new(bs)?;
    let b = &mut buf[..];
    for &blk in blocks {
        let off = blk * bs as u64;
        let n = if write {
            file.write_at(b, off)?
        } else {
            file.read_at(b, off)?
        };
        if n != bs {
            return Err(format!("short IO at offset {off}: {n} of {bs} bytes").into());
        }
    }
    Ok(blocks.len() as u64)
}

/// `blocks` through the device crate's io_uring backend: registered buffers, `qd` in flight.
fn io_uring_loop(
    path: &Path,
    blocks: &[u64],
    bs: usize,
    write: bool,
    qd: u32,
    direct: bool,
) -> BoxResult<u64> {
    use lachesis_device::uring::{Completion, FixedOp, UringConfig, UringDevice};
    use lachesis_device::PlacementHandle;
    if bs % 4096 != 0 {
        return Err(format!("--engine uring: --bs {bs} must be a multiple of 4096").into());
    }
    let qd = qd.clamp(1, 256);
    let config = UringConfig {
        queue_depth: qd,
        max_io_bytes: bs as u32,
        direct,
        block_size: Some(bs as u32),
        ..Default::default()
    };
    let mut dev = UringDevice::open(path, config)?;
    let op = if write { FixedOp::Write } else { FixedOp::Read };
    let mut free: Vec<usize> = (0..qd as usize).collect();
    let mut done_ios = Vec::with_capacity(qd as usize);
    let (mut next, mut done) = (0usize, 0u64);
    while done < blocks.len() as u64 {
        while next < blocks.len() {
            let Some(buf) = free.pop() else { break };
            let off = blocks[next] * bs as u64;
            dev.queue_fixed(
                op,
                buf,
                off,
                bs as u32,
                PlacementHandle::DEFAULT,
                buf as u64,
            )?;
            next += 1;
        }
        done_ios.clear();
        dev.wait(1, &mut done_ios)?;
        for Completion { tag, result } in done_ios.drain(..) {
            result?;
            free.push(tag as usize);
            done += 1;
        }
    }
    Ok(done)
}

fn spin(n: u64) -> f64 {
    let t0 = Instant::now();
    for _ in 0..n {
        // SAFETY: getppid has no preconditions.
        unsafe { libc::getppid() };
    }
    t0.elapsed().as_nanos() as f64 / n.max(1) as f64
}

// ---------------------------------------------------------------- shared

struct BenchCgroup(PathBuf);

impl BenchCgroup {
    fn new(tag: &str) -> BoxResult<Self> {
        let dir = cgroup2_mount()?.join(format!("lachesis-bench-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("creating cgroup {}: {e}", dir.display()))?;
        Ok(BenchCgroup(dir))
    }
}

impl Drop for BenchCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Create `path` of `mib` MiB with O_DIRECT writes (allocated, not sparse:
/// reads of holes or unwritten extents never reach the disk).
fn make_file(path: &Path, mib: u64) -> BoxResult<()> {
    if path
        .metadata()
        .map(|m| m.len() == mib << 20)
        .unwrap_or(false)
    {
        return Ok(());
    }
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let mut buf = AlignedBuf::new(1 << 20)?;
    let mut rng = SplitMix64(7);
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(rng.next_u64() ^ i as u64).to_le_bytes());
    }
    for i in 0..mib {
        f.write_all_at(&buf, i << 20)?;
    }
    f.sync_all()?;
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Loaded programs, one tenant, and a thread counting samples.
struct Attached {
    metrics: Arc<EbpfMetrics>,
    samples: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Attached {
    fn new(cgroup: &Path, rate: f64, layers: Layers, raw_syscalls: bool) -> BoxResult<Self> {
        let metrics = Arc::new(EbpfMetrics::load(&LoadOptions {
            layers,
            raw_syscalls,
            ..Default::default()
        })?);
        metrics.set_tenant(0, "bench", threshold_for_rate(rate))?;
        metrics.map_cgroup(cgroup_id(cgroup)?, 0)?;
        let mut reader = SampleReader::new(&metrics)?;
        let samples = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (Arc::clone(&samples), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let mut count = |_: &Sample| {
                s2.fetch_add(1, Ordering::Relaxed);
            };
            while !stop2.load(Ordering::Relaxed) {
                let _ = reader.poll(Duration::from_millis(100), &mut count);
            }
            let _ = reader.drain(&mut count);
        });
        Ok(Attached {
            metrics,
            samples,
            stop,
            thread: Some(thread),
        })
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.samples.load(Ordering::Relaxed)
    }
}

// ---------------------------------------------------------------- fio

struct FioRun {
    engine: String,
    attached: bool,
    round: u32,
    iops: f64,
    ios: u64,
    cpu_us_per_io: f64,
    app_ops: u64,
    blocks: u64,
    samples: u64,
}

/// IOPS, IOs, and fio's own CPU time (user + system) per IO in µs.
fn run_fio(a: &FioArgs, file: &Path, cgroup: &Path, engine: &str) -> BoxResult<(f64, u64, f64)> {
    let fio = format!(
        "exec fio --name=bench --filename={} --rw=randread --bs=4k --direct=1 --ioengine={engine} --iodepth={} \
         --runtime={} --time_based --norandommap --randrepeat=0 --output-format=json",
        file.display(),
        if engine == "psync" { 1 } else { a.iodepth },
        a.runtime
    );
    let script = format!("echo $$ > {}/cgroup.procs && {fio}", cgroup.display());
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("fio failed ({}); is fio installed?", out.status).into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let json_start = text.find('{').ok_or("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::from_str(&text[json_start..])?;
    let read = &v["jobs"][0]["read"];
    let iops = read["iops"].as_f64().ok_or("no read.iops in fio output")?;
    let ios = read["total_ios"].as_u64().unwrap_or(0);
    let job = &v["jobs"][0];
    let cpu_pct =
        job["usr_cpu"].as_f64().unwrap_or(f64::NAN) + job["sys_cpu"].as_f64().unwrap_or(f64::NAN);
    let runtime_s = job["job_runtime"].as_f64().unwrap_or(f64::NAN) / 1000.0;
    let cpu_us_per_io = cpu_pct / 100.0 * runtime_s * 1e6 / ios.max(1) as f64;
    Ok((iops, ios, cpu_us_per_io))
}

fn layers(a: &FioArgs) -> Layers {
    if a.block_only {
        Layers::BLOCK_ONLY
    } else {
        Layers::default()
    }
}

fn fio_cmd(a: &FioArgs) -> BoxResult<()> {
    let file = a
        .dir
        .join(format!("lachesis-ebpf-bench-{}.img", std::process::id()));
    eprintln!("preparing {} ({} MiB)", file.display(), a.size_mib);
    make_file(&file, a.size_mib)?;
    let cg = BenchCgroup::new("fio")?;
    let mut runs = Vec::new();
    let result = (|| -> BoxResult<()> {
        for round in 0..a.rounds {
            for engine in &a.engines {
                let order = if round % 2 == 0 {
                    [false, true]
                } else {
                    [true, false]
                };
                for attached in order {
                    let att = if attached {
                        Some(Attached::new(&cg.0, a.rate, layers(a), a.raw_syscalls)?)
                    } else {
                        None
                    };
                    let (iops, ios, cpu_us_per_io) = run_fio(a, &file, &cg.0, engine)?;
                    let (mut app_ops, mut blocks, mut samples) = (0, 0, 0);
                    if let Some(att) = att {
                        let st = att.metrics.tenant_stats(0)?;
                        app_ops = st.application(Op::Read).ops;
                        if a.block_only {
                            app_ops = st.get(Layer::Block, Op::Read).ops;
                        }
                        blocks = st.blocks;
                        samples = att.finish();
                    }
                    eprintln!(
                        "round {round} {engine:>8} {:>8}: {iops:>9.0} IOPS, fio CPU {cpu_us_per_io:.2} us/IO{}",
                        if attached { "attached" } else { "detached" },
                        if attached { format!(", {samples} samples / {app_ops} IOs") } else { String::new() }
                    );
                    runs.push(FioRun {
                        engine: engine.clone(),
                        attached,
                        round,
                        iops,
                        ios,
                        cpu_us_per_io,
                        app_ops,
                        blocks,
                        samples,
                    });
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&file);
        return Err(e);
    }

    println!(
        "| engine | detached IOPS (median) | attached IOPS (median) | ratio of medians | median of paired ratios \
         | fio CPU µs/IO detached | attached | samples per fio IO | R | IOs counted / fio IOs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for engine in &a.engines {
        let pick = |att: bool| -> Vec<&FioRun> {
            runs.iter()
                .filter(|r| &r.engine == engine && r.attached == att)
                .collect()
        };
        let (det, att) = (pick(false), pick(true));
        let med = |v: &[&FioRun], f: fn(&FioRun) -> f64| {
            median(&mut v.iter().map(|r| f(r)).collect::<Vec<_>>())
        };
        let mut paired: Vec<f64> = att
            .iter()
            .filter_map(|x| {
                det.iter()
                    .find(|y| y.round == x.round)
                    .map(|y| x.iops / y.iops)
            })
            .collect();
        let samples: u64 = att.iter().map(|r| r.samples).sum();
        let ops: u64 = att.iter().map(|r| r.app_ops).sum();
        let fio_ios: u64 = att.iter().map(|r| r.ios).sum();
        let (md, mt) = (med(&det, |r| r.iops), med(&att, |r| r.iops));
        println!(
            "| {engine} | {md:.0} | {mt:.0} | {:.3} | {:.3} | {:.2} | {:.2} | {:.5} | {:.5} | {:.4} |",
            mt / md,
            median(&mut paired),
            med(&det, |r| r.cpu_us_per_io),
            med(&att, |r| r.cpu_us_per_io),
            samples as f64 / fio_ios.max(1) as f64,
            lachesis_ebpf_metrics::rate_of_threshold(threshold_for_rate(a.rate)),
            ops as f64 / fio_ios.max(1) as f64,
        );
    }
    println!();
    for engine in &a.engines {
        program_costs(a, &file, &cg.0, engine)?;
    }
    if let Some(path) = &a.json {
        let v: Vec<serde_json::Value> = runs
            .iter()
            .map(|r| {
                serde_json::json!({"engine": r.engine, "attached": r.attached, "round": r.round, "iops": r.iops,
                    "fio_ios": r.ios, "fio_cpu_us_per_io": r.cpu_us_per_io, "counted_ios": r.app_ops,
                    "blocks": r.blocks, "samples": r.samples})
            })
            .collect();
        std::fs::File::create(path)?.write_all(serde_json::to_string_pretty(&v)?.as_bytes())?;
    }
    let _ = std::fs::remove_file(&file);
    Ok(())
}

/// Our programs currently loaded: id -> (name, run_cnt, run_time_ns, recursion_misses).
fn lx_programs() -> BTreeMap<u32, (String, u64, u64, u64)> {
    libbpf_rs::query::ProgInfoIter::default()
        .filter(|p| p.name.to_string_lossy().starts_with("lx_"))
        .map(|p| {
            (
                p.id,
                (
                    p.name.to_string_lossy().into_owned(),
                    p.run_cnt,
                    p.run_time_ns,
                    p.recursion_misses,
                ),
            )
        })
        .collect()
}

/// One attached fio run with the kernel's BPF run-time statistics on:
/// what each program costs per run and per IO. Deterministic where IOPS
/// are not: it does not depend on what else uses the shared disk.
fn program_costs(a: &FioArgs, file: &Path, cgroup: &Path, engine: &str) -> BoxResult<()> {
    let before: std::collections::BTreeSet<u32> = lx_programs().into_keys().collect();
    let att = Attached::new(cgroup, a.rate, layers(a), a.raw_syscalls)?;
    // Ours: what appeared with this load. Taken now, not after the run, so
    // lx_ programs another process loads meanwhile (the kernel tests, a
    // second bench) are not counted as ours.
    let mine: std::collections::BTreeSet<u32> = lx_programs()
        .into_keys()
        .filter(|id| !before.contains(id))
        .collect();
    // SAFETY: plain syscall wrapper; the returned fd keeps stats on until
    // closed.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
    };
    if fd < 0 {
        return Err(format!(
            "bpf_enable_stats failed: {}",
            std::io::Error::last_os_error()
        )
        .into());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let stats_fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let (iops, ios, _) = run_fio(a, file, cgroup, engine)?;
    let progs: Vec<_> = lx_programs()
        .into_iter()
        .filter(|(id, _)| mine.contains(id))
        .collect();
    drop(stats_fd);
    att.finish();
    println!("Per-program cost, {engine}, one attached run with BPF statistics on ({iops:.0} IOPS, {ios} IOs):");
    println!();
    println!("| program | runs per IO | ns per run | ns per IO | recursion misses |");
    println!("|---|---:|---:|---:|---:|");
    let mut total = 0.0;
    for (_, (name, cnt, ns, misses)) in &progs {
        if *cnt == 0 {
            continue;
        }
        let per_io = *ns as f64 / ios.max(1) as f64;
        total += per_io;
        println!(
            "| {name} | {:.2} | {:.0} | {per_io:.0} | {misses} |",
            *cnt as f64 / ios.max(1) as f64,
            *ns as f64 / *cnt as f64
        );
    }
    println!("| **total** | | | **{total:.0}** | |");
    println!();
    Ok(())
}

// ---------------------------------------------------------------- syscalls

fn self_exe() -> BoxResult<PathBuf> {
    Ok(std::env::current_exe()?)
}

fn child_json(args: &[String]) -> BoxResult<serde_json::Value> {
    let out = Command::new(self_exe()?)
        .args(args)
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("child {args:?} failed: {}", out.status).into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn syscalls_cmd(a: &SyscallArgs) -> BoxResult<()> {
    let file = a
        .dir
        .join(format!("lachesis-ebpf-bench-{}.small", std::process::id()));
    std::fs::write(&file, vec![7u8; 1 << 20])?;
    let cg = BenchCgroup::new("sys")?;
    let reads = 1_000_000u64;
    let mut spin_ns = [Vec::new(), Vec::new()];
    let mut pread_ns = [Vec::new(), Vec::new()];
    // The same reads from outside every tenant: what the syscall layer
    // costs the rest of the host's IO syscalls.
    let mut other_ns = [Vec::new(), Vec::new()];
    let result = (|| -> BoxResult<()> {
        for round in 0..a.rounds {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for attached in order {
                let att = if attached {
                    Some(Attached::new(
                        &cg.0,
                        0.01,
                        Layers::default(),
                        a.raw_syscalls,
                    )?)
                } else {
                    None
                };
                let spin = child_json(&["spin".into(), "--n".into(), a.n.to_string()])?;
                // Buffered reads of the file, in the bench's cgroup or not.
                let buffered_io = |in_cgroup: bool, extra: &[&str]| {
                    let mut args: Vec<String> =
                        vec!["io".into(), "--file".into(), file.display().to_string()];
                    if in_cgroup {
                        args.extend(["--cgroup".into(), cg.0.display().to_string()]);
                    }
                    args.push("--buffered".into());
                    args.extend(extra.iter().map(|s| s.to_string()));
                    child_json(&args)
                };
                let reads = reads.to_string();
                // The 256-read warm-up pulls the file into the page cache;
                // the second run is the measurement.
                let io = buffered_io(true, &["--random", "256", "--seq", "0"])
                    .and_then(|_| buffered_io(true, &["--seq", &reads]))?;
                let other = buffered_io(false, &["--seq", &reads])?;
                if let Some(att) = att {
                    att.finish();
                }
                let i = attached as usize;
                let per_io = |v: &serde_json::Value| {
                    v["secs"].as_f64().unwrap_or(f64::NAN) * 1e9
                        / v["ios"].as_f64().unwrap_or(f64::NAN)
                };
                other_ns[i].push(per_io(&other));
                spin_ns[i].push(spin.as_f64().unwrap_or(f64::NAN));
                let secs = io["secs"].as_f64().unwrap_or(f64::NAN);
                let ios = io["ios"].as_f64().unwrap_or(f64::NAN);
                pread_ns[i].push(secs * 1e9 / ios);
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&file);
    result?;
    let [mut sd, mut sa] = spin_ns;
    let [mut pd, mut pa] = pread_ns;
    let [mut od, mut oa] = other_ns;
    let (sd, sa, pd, pa) = (
        median(&mut sd),
        median(&mut sa),
        median(&mut pd),
        median(&mut pa),
    );
    let (od, oa) = (median(&mut od), median(&mut oa));
    println!("| syscall | detached ns/call (median) | attached ns/call (median) | added ns |");
    println!("|---|---:|---:|---:|");
    println!(
        "| getppid, no tenant | {sd:.1} | {sa:.1} | {:.1} |",
        sa - sd
    );
    println!(
        "| 4 KiB pread (page-cache hit), tenant | {pd:.1} | {pa:.1} | {:.1} |",
        pa - pd
    );
    println!(
        "| 4 KiB pread (page-cache hit), no tenant | {od:.1} | {oa:.1} | {:.1} |",
        oa - od
    );
    Ok(())
}
