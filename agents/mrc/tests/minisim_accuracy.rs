//! Miniature simulation against the full simulation of the same policy, at
//! the SHARDS test rates (R = 0.01 on the ARC traces, 0.1 on CloudPhysics),
//! over 20 sizes spread linearly over the working set. Also LRU minisim
//! against the exact LRU curve, which checks the simulator and the stack
//! against each other.

mod common;

use common::Trace;
use lachesis_mrc::curve::{sizes_over, Spacing};
use lachesis_mrc::estimator::Mean;
use lachesis_mrc::{ExactLru, MiniSim, MrcEstimator, PolicyKind, Unit};

const POLICIES: [PolicyKind; 3] = [PolicyKind::Fifo, PolicyKind::Rrip, PolicyKind::S3Fifo];

/// Independent samples averaged by [`mean_of_samples`].
const SAMPLES: u64 = 4;

/// (policy, MAE of adjusted minisim, MAE without adjustment, MAE of the
/// mean of [`SAMPLES`] adjusted samples) per policy. 20 sizes, and one
/// thread per policy: the full simulations of P3 are most of this crate's
/// test time.
fn measure(t: &Trace, rate: f64) -> Vec<(PolicyKind, f64, f64, f64)> {
    let sizes = sizes_over(common::unique(&t.requests), 20, Spacing::Linear);
    assert_eq!(sizes.len(), 20);
    std::thread::scope(|scope| {
        let handles: Vec<_> = POLICIES
            .iter()
            .map(|&p| {
                let sizes = sizes.clone();
                scope.spawn(move || {
                    let mut full = MiniSim::full(p, Unit::Objects, sizes.clone()).unwrap();
                    let mut mini =
                        MiniSim::new(p, Unit::Objects, sizes.clone(), rate, true).unwrap();
                    let mut raw =
                        MiniSim::new(p, Unit::Objects, sizes.clone(), rate, false).unwrap();
                    let mut mean = Mean::new(
                        (0..SAMPLES)
                            .map(|salt| {
                                MiniSim::new(p, Unit::Objects, sizes.clone(), rate, true)
                                    .unwrap()
                                    .with_salt(salt)
                            })
                            .collect(),
                    );
                    for r in &t.requests {
                        full.record(r.key, r.size, r.op);
                        mini.record(r.key, r.size, r.op);
                        raw.record(r.key, r.size, r.op);
                        mean.record(r.key, r.size, r.op);
                    }
                    let f = full.curve();
                    let (a, b) = (mini.curve().mae(&f).unwrap(), raw.curve().mae(&f).unwrap());
                    let m = mean.curve().mae(&f).unwrap();
                    println!(
                        "{:<12} R={rate} {:<7} minisim adj {a:.4} (no adj {b:.4}, mean of {SAMPLES} samples {m:.4})",
                        t.name,
                        p.name()
                    );
                    (p, a, b, m)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("simulation thread"))
            .collect()
    })
}

/// FIFO and S3-FIFO at R = 0.01 on the ARC traces (the full simulations are
/// libCacheSim's curves, see `s3fifo_variant.rs`): one sample, divided by its
/// rate measured on keys, within 0.005; the mean of four within 0.003.
fn check_arc(t: &Trace) {
    for (p, adj, _, mean) in measure(t, 0.01) {
        assert!(adj <= 0.02, "{p:?} {adj}");
        if p != PolicyKind::Rrip {
            assert!(adj <= 0.005, "{p:?} one sample {adj}");
            assert!(mean <= 0.003, "{p:?} mean of {SAMPLES} samples {mean}");
        }
    }
}

#[test]
fn oltp_minisim_tracks_full_simulation() {
    check_arc(common::oltp());
}

#[test]
fn p3_minisim_tracks_full_simulation() {
    check_arc(common::p3());
}

#[test]
fn cloudphysics_minisim_tracks_full_simulation() {
    for (p, adj, raw, _) in measure(common::cloudphysics(), 0.1) {
        assert!(adj <= 0.02, "{p:?} {adj}");
        assert!(raw > 2.0 * adj, "{p:?}: the adjustment should matter here");
    }
}

#[test]
fn full_lru_simulation_equals_exact_curve() {
    let t = common::oltp();
    let sizes = sizes_over(common::unique(&t.requests), 24, Spacing::Log);
    let mut exact = ExactLru::new(Unit::Objects, sizes.clone()).unwrap();
    let mut full = MiniSim::full(PolicyKind::Lru, Unit::Objects, sizes).unwrap();
    for r in &t.requests {
        exact.record(r.key, r.size, r.op);
        full.record(r.key, r.size, r.op);
    }
    let (e, f) = (exact.curve(), full.curve());
    for i in 0..e.sizes.len() {
        assert!(
            (e.miss_ratio[i] - f.miss_ratio[i]).abs() < 1e-12,
            "size {}",
            e.sizes[i]
        );
    }
}
