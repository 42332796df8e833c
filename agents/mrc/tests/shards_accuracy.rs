//! SHARDS against the exact curve on the real traces.
//!
//! Curves are compared over 24 cache sizes spread linearly over each trace's
//! working set (distinct objects), the way SHARDS' published errors are
//! measured (fixed-width histogram buckets up to the working set). The log
//! grid (working set / 1000 to working set) is printed too: it weighs tiny
//! caches, below ~1/R objects, where a rate-R sample has no resolution.
//!
//! Each run prints its MAE; `cargo test --release -- --nocapture` shows them.

mod common;

use common::Trace;
use lachesis_mrc::curve::{sizes_over, Spacing};
use lachesis_mrc::{
    Adjustment, Curve, ExactLru, MrcEstimator, ShardsFixedRate, ShardsFixedSize, Unit,
};

/// MAE of each correction, in the order of `ADJ`.
struct Maes {
    fixed_rate: [f64; 3],
    fixed_size: [f64; 3],
}

/// The default (regression) correction, the paper's SHARDS_adj, none.
const ADJ: [Adjustment; 3] = [Adjustment::Regression, Adjustment::Shards, Adjustment::None];
const DEFAULT: usize = 0;
const NONE: usize = 2;

fn measure(t: &Trace, rate: f64, spacing: Spacing) -> Maes {
    let sizes = sizes_over(common::unique(&t.requests), 24, spacing);
    assert!(sizes.len() >= 20);
    let s = || sizes.clone();
    let mut exact = ExactLru::new(Unit::Objects, s()).unwrap();
    let mut fr: Vec<ShardsFixedRate> = ADJ
        .iter()
        .map(|&a| {
            ShardsFixedRate::new(Unit::Objects, s(), rate, true)
                .unwrap()
                .with_adjustment(a)
        })
        .collect();
    let mut fs: Vec<ShardsFixedSize> = ADJ
        .iter()
        .map(|&a| {
            ShardsFixedSize::new(Unit::Objects, s(), 8192, true)
                .unwrap()
                .with_adjustment(a)
        })
        .collect();
    for r in &t.requests {
        exact.record(r.key, r.size, r.op);
        fr.iter_mut().for_each(|e| e.record(r.key, r.size, r.op));
        fs.iter_mut().for_each(|e| e.record(r.key, r.size, r.op));
    }
    let e = exact.curve();
    let mae = |c: Curve| c.mae(&e).unwrap();
    let m = Maes {
        fixed_rate: [0, 1, 2].map(|i| mae(fr[i].curve())),
        fixed_size: [0, 1, 2].map(|i| mae(fs[i].curve())),
    };
    println!(
        "{:<12} {:?} grid, R={rate}: fixed-rate adj {:.4} (SHARDS_adj {:.4}, no adj {:.4}); \
         fixed-size Smax=8192 adj {:.4} (SHARDS_adj {:.4}, no adj {:.4})",
        t.name,
        spacing,
        m.fixed_rate[0],
        m.fixed_rate[1],
        m.fixed_rate[2],
        m.fixed_size[0],
        m.fixed_size[1],
        m.fixed_size[2]
    );
    m
}

/// The targets: fixed-rate adjusted MAE <= 0.01, fixed-size
/// S_max = 8192 adjusted <= 0.015.
fn assert_targets(m: &Maes) {
    assert!(
        m.fixed_rate[DEFAULT] <= 0.01,
        "fixed-rate adj {}",
        m.fixed_rate[DEFAULT]
    );
    assert!(
        m.fixed_size[DEFAULT] <= 0.015,
        "fixed-size adj {}",
        m.fixed_size[DEFAULT]
    );
}

#[test]
fn oltp_shards_within_targets() {
    let m = measure(common::oltp(), 0.01, Spacing::Linear);
    assert_targets(&m);
    // The adjustment is what makes R = 0.01 usable here.
    assert!(m.fixed_rate[NONE] > 2.0 * m.fixed_rate[DEFAULT]);
    measure(common::oltp(), 0.01, Spacing::Log);
}

#[test]
fn p3_shards_within_targets() {
    let m = measure(common::p3(), 0.01, Spacing::Linear);
    assert_targets(&m);
    // Unadjusted is not worse on P3: its sample's surplus of references is
    // misses as much as hits, which the regression correction sees (the
    // paper's SHARDS_adj, all hits, is printed beside it).
    assert!(m.fixed_rate[NONE] <= 0.01, "{}", m.fixed_rate[NONE]);
    measure(common::p3(), 0.01, Spacing::Log);
}

#[test]
fn cloudphysics_shards_within_targets() {
    // 114 K references: R = 0.1, as the issue sets it.
    let m = measure(common::cloudphysics(), 0.1, Spacing::Linear);
    assert_targets(&m);
    assert!(m.fixed_rate[NONE] > 2.0 * m.fixed_rate[DEFAULT]);
    assert!(m.fixed_size[NONE] > 2.0 * m.fixed_size[DEFAULT]);
    measure(common::cloudphysics(), 0.1, Spacing::Log);
}

#[test]
fn fixed_size_stays_within_smax_keys() {
    let t = common::p3();
    // The grid of the accuracy tests: the default correction keeps counts
    // per sampled key and size, which is most of the memory.
    let sizes = sizes_over(common::unique(&t.requests), 24, Spacing::Linear);
    let mut fs = ShardsFixedSize::new(Unit::Objects, sizes, 8192, true).unwrap();
    for r in &t.requests {
        fs.record(r.key, r.size, r.op);
    }
    assert!(fs.sampled_keys() <= 8192);
    // 762,543 distinct pages into 8,192 keys: the rate fell to about 1%.
    assert!(fs.rate() < 0.02 && fs.rate() > 0.005, "{}", fs.rate());
    println!("fixed-size footprint {} bytes", fs.footprint_bytes());
    // The issue: under 2 MB.
    assert!(fs.footprint_bytes() < 2_000_000, "{}", fs.footprint_bytes());
}
