//! Speed of the data-less simulated SSD: page writes per second in steady state (after a
//! fill and a warm-up), for a sequential log, uniform random overwrites and the two-stream
//! mix. Reports host page writes/s and media page writes/s (host + GC relocations): GC work is
//! the simulator's cost, so both matter. Median of several runs.
//!
//!   cargo bench -p lachesis-device --bench sim_speed -- --runs 5

use std::time::Instant;

use clap::Parser;
use lachesis_device::nvme::logpage::RuhType;
use lachesis_device::sim::workload::{Mix, Region, Segregation, Stream, TwoStreams};
use lachesis_device::sim::{SimConfig, SimSsd};
use lachesis_device::PlacementHandle;

#[derive(Parser)]
struct Args {
    /// Runs per workload (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Reclaim units (of 256 pages) in the device.
    #[arg(long, default_value_t = 4096)]
    rus: u32,
    /// Measured host page writes per run, in device capacities.
    #[arg(long, default_value_t = 4)]
    capacities: u64,
    #[arg(long, hide = true)]
    bench: bool,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One stream over the whole device on the default handle.
fn one_stream(d: &SimSsd, stream: fn(Region) -> Stream) -> Res<Mix> {
    let whole = Region {
        start: 0,
        pages: d.logical_pages(),
    };
    Ok(Mix::new(vec![(1.0, stream(whole))], 1)?)
}

fn log_stream(region: Region) -> Stream {
    Stream::Log {
        region,
        handle: PlacementHandle(0),
        trim_pages: None,
        cursor: 0,
    }
}

fn random_stream(region: Region) -> Stream {
    Stream::Random {
        region,
        handle: PlacementHandle(0),
    }
}

fn main() -> Res<()> {
    let args = Args::parse();
    println!(
        "Data-less simulator, {} reclaim units × 256 pages of 4 KiB, {} device capacities measured after fill + 1 capacity of warm-up, median of {} runs.\n",
        args.rus, args.capacities, args.runs
    );
    println!("| workload | OP | DLWA | host page writes/s | media page writes/s |\n|---|---|---|---|---|");
    type MakeMix = fn(&SimSsd) -> Res<Mix>;
    let cases: [(&str, f64, MakeMix); 4] = [
        ("sequential log", 0.07, |d| one_stream(d, log_stream)),
        ("uniform random", 0.28, |d| one_stream(d, random_stream)),
        ("uniform random", 0.07, |d| one_stream(d, random_stream)),
        ("4% random + 96% log, 50/50, two handles", 0.10, |d| {
            Ok(TwoStreams {
                random_space: 0.04,
                random_writes: 0.5,
                segregation: Segregation::TwoHandles,
            }
            .mix(d, 1)?)
        }),
    ];
    for (name, op, make) in cases {
        let (mut host, mut media, mut dlwa) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let mut dev = SimSsd::new(SimConfig {
                pages_per_erase_block: 64,
                erase_blocks_per_ru: 4,
                rus_per_group: args.rus,
                overprovisioning: op,
                handles: vec![RuhType::InitiallyIsolated; 2],
                ..Default::default()
            })?;
            let mut mix = make(&dev)?;
            let n = dev.logical_pages();
            mix.fill(&mut dev)?;
            mix.run(&mut dev, n, |_| {})?;
            let before = dev.stats();
            let t = Instant::now();
            mix.run(&mut dev, args.capacities * n, |_| {})?;
            let secs = t.elapsed().as_secs_f64();
            let after = dev.stats();
            let h = (after.host_pages_written - before.host_pages_written) as f64;
            let m = (after.media_pages_written() - before.media_pages_written()) as f64;
            host.push(h / secs);
            media.push(m / secs);
            dlwa.push(m / h);
        }
        println!(
            "| {name} | {:.0}% | {:.2} | {:.2} M | {:.2} M |",
            op * 100.0,
            median(dlwa),
            median(host) / 1e6,
            median(media) / 1e6
        );
    }
    Ok(())
}
