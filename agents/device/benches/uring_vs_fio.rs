//! 4 KiB random read and write IOPS of the io_uring backend against fio's io_uring engine on
//! the same file in the same run, at several queue depths. Runs alternate (ours, fio / fio,
//! ours) so drift on a shared machine hits both; medians of several runs are reported with
//! their ratio. Prints Markdown on stdout.
//!
//!   cargo bench -p lachesis-device --bench uring_vs_fio -- --file /tmp/lachesis-bench.dat

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use lachesis_device::uring::{Completion, FixedOp, UringConfig, UringDevice};
use lachesis_device::{BlockDevice, PlacementHandle};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

#[derive(Parser)]
struct Args {
    /// Test file (created and filled; O_DIRECT must work on its filesystem).
    #[arg(long, default_value = "/tmp/lachesis-device-bench.dat")]
    file: PathBuf,
    /// File size in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    runtime: u64,
    /// Measurements per configuration and engine (medians are reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Queue depths.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    qd: Vec<u32>,
    /// Patterns to run.
    #[arg(long, value_delimiter = ',', default_value = "randread,randwrite")]
    patterns: Vec<Pattern>,
    /// fio binary.
    #[arg(long, default_value = "fio")]
    fio: String,
    /// Keep the test file afterwards.
    #[arg(long)]
    keep: bool,
    #[arg(long, hide = true)]
    bench: bool,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Pattern {
    #[value(name = "randread")]
    RandRead,
    #[value(name = "randwrite")]
    RandWrite,
}

impl Pattern {
    fn fio_name(self) -> &'static str {
        match self {
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
        }
    }
}

const BS: u64 = 4096;

/// Our engine: `qd` fixed-buffer IOs kept in flight at uniformly random 4 KiB offsets.
fn ours(args: &Args, pattern: Pattern, qd: u32, seed: u64) -> Res<f64> {
    let cfg = UringConfig {
        queue_depth: qd,
        max_io_bytes: BS as u32,
        ..Default::default()
    };
    let mut dev = UringDevice::open(&args.file, cfg)?;
    let blocks = dev.geometry().capacity_bytes / BS;
    let op = match pattern {
        Pattern::RandRead => FixedOp::Read,
        Pattern::RandWrite => FixedOp::Write,
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    for i in 0..qd as usize {
        rng.fill(dev.buffer_mut(i)?);
    }
    let h = PlacementHandle::DEFAULT;
    for i in 0..qd as usize {
        dev.queue_fixed(
            op,
            i,
            rng.random_range(0..blocks) * BS,
            BS as u32,
            h,
            i as u64,
        )?;
    }
    let mut done: Vec<Completion> = Vec::with_capacity(qd as usize);
    let (mut ios, start) = (0u64, Instant::now());
    let deadline = start + Duration::from_secs(args.runtime);
    loop {
        done.clear();
        dev.wait(1, &mut done)?;
        let now = Instant::now();
        for c in &done {
            c.result.as_ref().map_err(|e| format!("IO failed: {e}"))?;
            ios += 1;
            if now < deadline {
                dev.queue_fixed(
                    op,
                    c.tag as usize,
                    rng.random_range(0..blocks) * BS,
                    BS as u32,
                    h,
                    c.tag,
                )?;
            }
        }
        if now >= deadline && dev.in_flight() == 0 {
            return Ok(ios as f64 / start.elapsed().as_secs_f64());
        }
    }
}

fn fio_args(args: &Args, pattern: Pattern, qd: u32) -> Vec<String> {
    [
        "--name=lachesis".to_string(),
        format!("--filename={}", args.file.display()),
        format!("--size={}M", args.size_mib),
        "--ioengine=io_uring".into(),
        "--direct=1".into(),
        "--bs=4k".into(),
        format!("--rw={}", pattern.fio_name()),
        format!("--iodepth={qd}"),
        "--fixedbufs=1".into(),
        "--registerfiles=1".into(),
        "--norandommap=1".into(),
        "--randrepeat=0".into(),
        "--time_based=1".into(),
        format!("--runtime={}", args.runtime),
        "--output-format=json".into(),
    ]
    .into()
}

fn fio(args: &Args, pattern: Pattern, qd: u32) -> Res<f64> {
    let out = Command::new(&args.fio)
        .args(fio_args(args, pattern, qd))
        .output()?;
    if !out.status.success() {
        return Err(format!("fio failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let key = match pattern {
        Pattern::RandRead => "read",
        Pattern::RandWrite => "write",
    };
    v["jobs"][0][key]["iops"]
        .as_f64()
        .ok_or_else(|| "no iops in fio output".into())
}

fn prepare(args: &Args) -> Res<()> {
    // Write every block so reads hit allocated extents, not holes.
    let size = args.size_mib << 20;
    let cfg = UringConfig {
        queue_depth: 8,
        max_io_bytes: 1 << 20,
        create_size: Some(size),
        ..Default::default()
    };
    let mut dev = UringDevice::open(&args.file, cfg)?;
    let mut chunk = lachesis_device::AlignedBuf::new(1 << 20)?;
    SmallRng::seed_from_u64(1).fill(&mut chunk[..]);
    let mut off = 0;
    while off < size {
        dev.write(off, &chunk, PlacementHandle::DEFAULT)?;
        off += 1 << 20;
    }
    dev.flush()?;
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Res<()> {
    let args = Args::parse();
    eprintln!("preparing {} ({} MiB)", args.file.display(), args.size_mib);
    prepare(&args)?;
    let mut rows = Vec::new();
    for &pattern in &args.patterns {
        for &qd in &args.qd {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for run in 0..args.runs {
                eprintln!(
                    "{} qd {qd} run {}/{}",
                    pattern.fio_name(),
                    run + 1,
                    args.runs
                );
                // Alternate who goes first so a slow phase of the machine is shared.
                if run % 2 == 0 {
                    a.push(ours(&args, pattern, qd, run as u64)?);
                    b.push(fio(&args, pattern, qd)?);
                } else {
                    b.push(fio(&args, pattern, qd)?);
                    a.push(ours(&args, pattern, qd, run as u64)?);
                }
            }
            let ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x / y).collect();
            rows.push((
                pattern,
                qd,
                median(a.clone()),
                median(b.clone()),
                median(ratios),
                a,
                b,
            ));
        }
    }
    println!(
        "File `{}`, {} MiB, {} s per measurement, {} runs each (medians).\n",
        args.file.display(),
        args.size_mib,
        args.runtime,
        args.runs
    );
    println!(
        "fio command: `fio {}`\n",
        fio_args(&args, Pattern::RandRead, 32).join(" ")
    );
    println!(
        "| pattern | QD | lachesis IOPS | fio IOPS | ratio of medians | median of per-run ratios |"
    );
    println!("|---|---|---|---|---|---|");
    for (p, qd, ours, theirs, r, _, _) in &rows {
        println!(
            "| {} 4 KiB | {qd} | {ours:.0} | {theirs:.0} | {:.3} | {r:.3} |",
            p.fio_name(),
            ours / theirs
        );
    }
    println!("\nPer-run IOPS (lachesis / fio):\n");
    for (p, qd, _, _, _, a, b) in &rows {
        let runs: Vec<String> = a
            .iter()
            .zip(b)
            .map(|(x, y)| format!("{x:.0}/{y:.0}"))
            .collect();
        println!("- {} QD{qd}: {}", p.fio_name(), runs.join(", "));
    }
    if !args.keep {
        std::fs::remove_file(&args.file)?;
    }
    Ok(())
}
