//! Issue 34, item 1: every tenant's online curve, small or large, within MAE 0.02 of the exact
//! LRU curve of the IO it did.
//!
//! The online curves are the agent's own builders as the agent makes them: the data path's
//! ([`DatapathCurves`], what the switch's tap feeds: SHARDS with an exact head) and the eBPF
//! path's estimator (fixed-size SHARDS over 4 KiB blocks without the adjustment,
//! `ebpf-metrics`' `Sizing::FixedSize`; its kernel-side filter only drops what the estimator
//! would drop too). The data path is held to the target at every size; the eBPF path only
//! where it is exact (see `check`). Both at the agent's
//! `S_max` and on its grid of cache sizes, each read back the way the controller reads it: the
//! telemetry curve (sizes in bytes, the flat tail cut), linear between points. The exact curve
//! is `lachesis_mrc::ExactLru` over the same references.
//!
//! MAE is taken over the grid points from 1 MiB up to twice the working set: past it both
//! curves are flat at the cold-miss ratio, and counting the grid's points up to 1 TiB would
//! hide any error under a pile of exact zeros.
//!
//! Traces are generated (zipf of several skews over the working set, loops, and a mix with
//! scans), several sizes from 1,000 to 10 M blocks, several seeds: the builders are not tuned
//! to the shared traces. The 10 M case is `#[ignore]`d in debug builds only by its cost; run
//! with `cargo test -p lachesis-agent --release --test curve_accuracy -- --nocapture`.

use lachesis_agent::metrics_engine::datapath_curves::DatapathCurves;
use lachesis_agent::metrics_engine::{curve_sizes, tenant_curve, BLOCK_BYTES, DEFAULT_SAMPLE_KEYS};
use lachesis_agent::telemetry::TelemetryCurve;
use lachesis_mrc::hash::SplitMix64;
use lachesis_mrc::{ExactLru, MrcEstimator, Op, ShardsFixedSize, Unit};

/// The target.
const MAE_TARGET: f64 = 0.02;

/// What a generated tenant does.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// Zipf of skew `alpha` over the working set (every block touched once first).
    Zipf(f64),
    /// The working set read in order, over and over.
    Loop,
    /// Zipf 0.9 over a tenth of the set, interleaved with a sequential scan of the rest.
    ZipfAndScan,
}

/// Uniform in [0, 1).
fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A zipf rank in 1..=n by inverting the continuous CDF (x^(1-a) on [1, n+1)); exact enough
/// for a test workload, and O(1) per draw at any n.
fn zipf(rng: &mut SplitMix64, n: u64, alpha: f64) -> u64 {
    let u = uniform(rng);
    let x = if (alpha - 1.0).abs() < 1e-9 {
        ((n as f64 + 1.0).ln() * u).exp()
    } else {
        let e = 1.0 - alpha;
        (((n as f64 + 1.0).powf(e) - 1.0) * u + 1.0).powf(1.0 / e)
    };
    (x.floor() as u64).clamp(1, n)
}

/// Blocks of a tenant's file in reference order: `blocks` distinct blocks, `passes` times as
/// many references in all. A rank is scattered over the file so hot blocks are not adjacent.
fn trace(shape: Shape, blocks: u64, passes: u64, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64(seed);
    let scatter = |r: u64| lachesis_mrc::hash::mix64(r ^ seed) % (blocks * 64);
    let mut out: Vec<u64> = (0..blocks).map(scatter).collect();
    let total = blocks * passes;
    match shape {
        Shape::Zipf(alpha) => {
            while (out.len() as u64) < total {
                out.push(scatter(zipf(&mut rng, blocks, alpha) - 1));
            }
        }
        Shape::Loop => {
            while (out.len() as u64) < total {
                let next = out.len() as u64 % blocks;
                out.push(scatter(next));
            }
        }
        Shape::ZipfAndScan => {
            let hot = (blocks / 10).max(1);
            let mut scan = hot;
            while (out.len() as u64) < total {
                if rng.next_u64().is_multiple_of(4) {
                    out.push(scatter(scan));
                    scan = if scan + 1 == blocks { hot } else { scan + 1 };
                } else {
                    out.push(scatter(zipf(&mut rng, hot, 0.9) - 1));
                }
            }
        }
    }
    out
}

/// A telemetry curve read as the controller reads it: linear between its points, flat after
/// the last (the cut tail), at a size in blocks.
fn read(c: &TelemetryCurve, blocks: u64) -> f64 {
    let bytes = (blocks * BLOCK_BYTES) as f64;
    let (s, m) = (&c.sizes, &c.miss_ratios);
    match s.iter().position(|&x| x as f64 >= bytes) {
        None => *m.last().unwrap(),
        Some(0) => m[0],
        Some(i) => {
            let (x0, x1) = (s[i - 1] as f64, s[i] as f64);
            m[i - 1] + (m[i] - m[i - 1]) * (bytes - x0) / (x1 - x0)
        }
    }
}

/// MAE of each online builder against the exact curve: (data path, eBPF path).
fn maes(shape: Shape, blocks: u64, passes: u64, seed: u64) -> (f64, f64) {
    let refs = trace(shape, blocks, passes, seed);
    let grid = curve_sizes();
    let mut exact = ExactLru::new(Unit::Objects, grid.clone()).unwrap();
    let datapath = DatapathCurves::new(grid.clone(), DEFAULT_SAMPLE_KEYS);
    let mut ebpf =
        ShardsFixedSize::new(Unit::Objects, grid.clone(), DEFAULT_SAMPLE_KEYS, false).unwrap();
    for &b in &refs {
        // The tap keys (file, block); the kernel keys the block's device address. One file
        // here, so block b of file 1 and address b are the same key to each.
        exact.record(b, 4096, Op::Read);
        datapath.record("t", 1, b * BLOCK_BYTES, BLOCK_BYTES);
        ebpf.record(b, 4096, Op::Read);
    }
    let exact = exact.curve();
    let online = datapath.curve("t", 0).expect("references recorded");
    assert_eq!(online.references, refs.len() as u64);
    let e = ebpf.curve();
    let ebpf = tenant_curve(&e.sizes, &e.miss_ratio, refs.len() as u64).unwrap();
    let points: Vec<usize> = (0..grid.len()).filter(|&i| grid[i] <= 2 * blocks).collect();
    assert!(!points.is_empty());
    let mae = |c: &TelemetryCurve| {
        points
            .iter()
            .map(|&i| (read(c, grid[i]) - exact.miss_ratio[i]).abs())
            .sum::<f64>()
            / points.len() as f64
    };
    let footprint = datapath.footprint_bytes("t").unwrap();
    // Bounded: the head and the sample, whatever the working set.
    assert!(footprint < 12 << 20, "{footprint} bytes");
    let m = (mae(&online), mae(&ebpf));
    println!(
        "{shape:?} {blocks} blocks x{passes} seed {seed}: MAE data path {:.4}, eBPF {:.4} ({} points), \
         data path estimator {footprint} bytes",
        m.0,
        m.1,
        points.len()
    );
    m
}

fn check(shape: Shape, blocks: u64, passes: u64, seeds: &[u64]) {
    for &seed in seeds {
        let (datapath, ebpf) = maes(shape, blocks, passes, seed);
        assert!(
            datapath <= MAE_TARGET,
            "{shape:?} {blocks} blocks seed {seed}: data path MAE {datapath}"
        );
        // The eBPF path sees only the kernel's sample, so it cannot keep an exact head: it is
        // exact while the set fits S_max, and beyond it prints what it gets (issue 34 leaves
        // it at SHARDS alone; the data path is what the demo's and the e2e tests' tenants use).
        if blocks as usize <= DEFAULT_SAMPLE_KEYS {
            assert!(
                ebpf <= 1e-4,
                "{shape:?} {blocks} blocks seed {seed}: eBPF MAE {ebpf}"
            );
        }
    }
}

#[test]
fn small_tenants_get_their_exact_curve() {
    // Below S_max every block is in the sample: the rate stays 1 and the curve is exact.
    for shape in [Shape::Zipf(0.8), Shape::Loop, Shape::ZipfAndScan] {
        check(shape, 1_000, 20, &[1, 2, 3]);
        check(shape, 1_656, 20, &[4]);
    }
}

#[test]
fn mid_sized_tenants_within_target() {
    for shape in [
        Shape::Zipf(0.6),
        Shape::Zipf(1.0),
        Shape::Loop,
        Shape::ZipfAndScan,
    ] {
        check(shape, 10_000, 10, &[5, 6]);
        check(shape, 100_000, 5, &[7, 8]);
    }
}

#[test]
fn a_million_blocks_within_target() {
    for shape in [Shape::Zipf(0.8), Shape::Zipf(1.2), Shape::ZipfAndScan] {
        check(shape, 1_000_000, 3, &[9, 10]);
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "30 M exact stack distances: run with --release"
)]
fn ten_million_blocks_within_target() {
    for shape in [Shape::Zipf(0.9), Shape::ZipfAndScan] {
        check(shape, 10_000_000, 3, &[11]);
    }
}
