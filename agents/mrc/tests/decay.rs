//! A workload change shows up in the decayed curve after one window.

use lachesis_mrc::{Curve, ExactLru, MrcEstimator, Op, ShardsFixedRate, Unit, Windowed};

/// Phase one loops over 1,000 keys (fits a 2,000-object cache); phase two
/// loops over 20,000 others (does not).
fn phases(window: u64, estimator: impl MrcEstimator) -> (Curve, Curve) {
    let mut w = Windowed::new(estimator, window, lachesis_mrc::decay::DEFAULT_DECAY);
    let feed = |w: &mut Windowed<_>, key: u64| {
        if w.record(key, 4096, Op::Read) {
            w.start_window();
        }
    };
    for i in 0..10 * window {
        feed(&mut w, i % 1000);
    }
    let before = w.curve();
    for i in 0..window {
        feed(&mut w, 1_000_000 + i % 20_000);
    }
    (before, w.curve())
}

#[test]
fn decayed_curve_follows_a_workload_change_within_one_window() {
    let window = 100_000;
    let sizes = vec![2000, 30_000];
    for (name, (before, after)) in [
        (
            "exact",
            phases(window, ExactLru::new(Unit::Objects, sizes.clone()).unwrap()),
        ),
        (
            "shards",
            phases(
                window,
                ShardsFixedRate::new(Unit::Objects, sizes.clone(), 0.1, true).unwrap(),
            ),
        ),
    ] {
        assert!(before.miss_ratio[0] < 0.02, "{name} {before:?}");
        // A whole-history curve would say ~0.09 (1 window in 11 misses);
        // the decayed one is dominated by the new window (>= 75% weight).
        assert!(after.miss_ratio[0] > 0.7, "{name} {after:?}");
        // A cache that holds the new loop still hits it after one pass.
        assert!(after.miss_ratio[1] < 0.25, "{name} {after:?}");
    }
}
