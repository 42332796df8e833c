//! What measuring costs: 4 KiB random write IOPS of the io_uring backend (`UringDevice`) and
//! of the measuring device (`MeasuredDevice`: the same io_uring writes plus the simulated
//! FTL's bookkeeping and GC) on the same file, through the `BlockDevice` methods the cache
//! engines use: `write` one at a time (QD 1) and `submit_batch` of `qd` writes (QD > 1).
//!
//! The measuring device is opened once and brought to steady state first (the file written
//! sequentially, then one device capacity of random writes), so its model runs garbage
//! collection during the measurements; its DLWA is printed. Runs alternate (uring, measured /
//! measured, uring) so drift on a shared machine hits both; medians of several runs are
//! reported with their ratio. Prints Markdown on stdout, progress on stderr.
//!
//!   cargo bench -p lachesis-device --bench measured_overhead -- --file /tmp/lachesis-measured-bench.dat

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use lachesis_device::measured::{MeasuredDevice, MeasuredOptions};
use lachesis_device::uring::{UringConfig, UringDevice};
use lachesis_device::{AlignedBuf, BlockDevice, IoRequest, PlacementHandle};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

#[derive(Parser)]
struct Args {
    /// Test file (created; O_DIRECT must work on its filesystem).
    #[arg(long, default_value = "/tmp/lachesis-measured-bench.dat")]
    file: PathBuf,
    /// File size in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3)]
    runtime: u64,
    /// Measurements per configuration and backend (medians are reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Queue depths (1: `write`; more: `submit_batch` of that many writes).
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    qd: Vec<u32>,
    /// Placement handles the measuring device has; writes pick one at random.
    #[arg(long, default_value_t = 8)]
    handles: u16,
    /// Keep the test file afterwards.
    #[arg(long)]
    keep: bool,
    #[arg(long, hide = true)]
    bench: bool,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const BS: u64 = 4096;

/// 4 KiB writes at uniformly random offsets for `runtime` seconds, `qd` at a time; IOPS.
fn random_writes(
    dev: &mut dyn BlockDevice,
    qd: u32,
    handles: u16,
    runtime: Duration,
    seed: u64,
) -> Res<f64> {
    let blocks = dev.geometry().capacity_bytes / BS;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut buf = AlignedBuf::new(BS as usize * qd as usize)?;
    rng.fill(&mut buf[..]);
    let (mut ios, start) = (0u64, Instant::now());
    while start.elapsed() < runtime {
        if qd == 1 {
            let h = PlacementHandle(rng.random_range(0..handles));
            dev.write(rng.random_range(0..blocks) * BS, &buf, h)?;
        } else {
            let mut reqs: Vec<IoRequest<'_>> = buf
                .chunks(BS as usize)
                .map(|b| IoRequest::Write {
                    offset: rng.random_range(0..blocks) * BS,
                    buf: b,
                    handle: PlacementHandle(rng.random_range(0..handles)),
                })
                .collect();
            dev.submit_batch(&mut reqs)?;
        }
        ios += u64::from(qd);
    }
    Ok(ios as f64 / start.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Res<()> {
    let args = Args::parse();
    let size = args.size_mib << 20;
    let runtime = Duration::from_secs(args.runtime);
    let qd_max = args.qd.iter().copied().max().unwrap_or(1).max(1);
    let mut measured = MeasuredDevice::open(
        &args.file,
        size,
        MeasuredOptions {
            handles: args.handles,
            queue_depth: qd_max,
            ..MeasuredOptions::default()
        },
    )?;
    let mut uring = UringDevice::open(
        &args.file,
        UringConfig {
            queue_depth: qd_max,
            // Like the measuring device's ring: any thread may submit.
            single_issuer: false,
            ..UringConfig::default()
        },
    )?;

    // Steady state: the whole file once (1 MiB writes), then a device capacity at random.
    eprintln!(
        "preconditioning {} ({} MiB)",
        args.file.display(),
        args.size_mib
    );
    let mut chunk = AlignedBuf::new(1 << 20)?;
    SmallRng::seed_from_u64(1).fill(&mut chunk[..]);
    let mut off = 0;
    while off + (1 << 20) <= size {
        measured.write(off, &chunk, PlacementHandle::DEFAULT)?;
        off += 1 << 20;
    }
    let mut rng = SmallRng::seed_from_u64(2);
    let blocks = size / BS;
    let mut batch = AlignedBuf::new(BS as usize * 32)?;
    rng.fill(&mut batch[..]);
    let mut written = 0;
    while written < blocks {
        let mut reqs: Vec<IoRequest<'_>> = batch
            .chunks(BS as usize)
            .map(|b| IoRequest::Write {
                offset: rng.random_range(0..blocks) * BS,
                buf: b,
                handle: PlacementHandle(rng.random_range(0..args.handles)),
            })
            .collect();
        measured.submit_batch(&mut reqs)?;
        written += 32;
    }
    let warm = measured.stats();
    eprintln!("model DLWA so far {:.2}", warm.dlwa.unwrap_or(1.0));

    let mut rows = Vec::new();
    for &qd in &args.qd {
        let (mut u, mut m) = (Vec::new(), Vec::new());
        for run in 0..args.runs {
            eprintln!("randwrite qd {qd} run {}/{}", run + 1, args.runs);
            let seed = 100 + run as u64;
            let mut one = |which: bool| -> Res<()> {
                if which {
                    m.push(random_writes(
                        &mut measured,
                        qd,
                        args.handles,
                        runtime,
                        seed,
                    )?);
                } else {
                    u.push(random_writes(&mut uring, qd, 1, runtime, seed)?);
                }
                Ok(())
            };
            let first = run % 2 == 1;
            one(first)?;
            one(!first)?;
        }
        let ratios: Vec<f64> = m.iter().zip(&u).map(|(a, b)| a / b).collect();
        rows.push((
            qd,
            median(u.clone()),
            median(m.clone()),
            median(ratios),
            u,
            m,
        ));
    }
    let end = measured.stats();

    println!("| pattern | QD | UringDevice IOPS | MeasuredDevice IOPS | ratio of medians | median of per-run ratios |");
    println!("|---|---|---|---|---|---|");
    for (qd, u, m, r, _, _) in &rows {
        println!(
            "| randwrite 4 KiB | {qd} | {u:.0} | {m:.0} | {:.3} | {r:.3} |",
            m / u
        );
    }
    println!();
    println!("Per-run IOPS (UringDevice / MeasuredDevice):");
    println!();
    for (qd, _, _, _, u, m) in &rows {
        let pairs: Vec<String> = u
            .iter()
            .zip(m)
            .map(|(a, b)| format!("{a:.0}/{b:.0}"))
            .collect();
        println!("- randwrite QD{qd}: {}", pairs.join(", "));
    }
    println!();
    println!(
        "Model: {} reclaim units of {} KiB, {:.2}% overprovisioning, {:.1} MiB of metadata; \
         DLWA over the measured runs {:.2} ({} GC victims).",
        end.reclaim_units,
        end.reclaim_unit_bytes >> 10,
        end.overprovisioning * 100.0,
        end.model_metadata_bytes as f64 / (1 << 20) as f64,
        end.dlwa_since(&warm).unwrap_or(1.0),
        end.gc_victims - warm.gc_victims,
    );
    drop(measured);
    drop(uring);
    if !args.keep {
        std::fs::remove_file(&args.file)?;
    }
    Ok(())
}
