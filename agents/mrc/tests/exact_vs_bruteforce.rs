//! The exact LRU curve must equal a brute-force simulation of an LRU cache
//! at every size, counting objects and counting bytes.

mod common;

use lachesis_mrc::exact::ExactLru;
use lachesis_mrc::{MrcEstimator, Op, Unit};
use std::collections::HashMap;

/// An LRU cache as a Vec, most recent first: evict from the back until the
/// content fits. Deliberately naive and independent of the crate.
fn brute_force_misses(trace: &[(u64, u32)], capacity: u64, unit: Unit) -> u64 {
    let weight = |s: u32| match unit {
        Unit::Objects => 1u64,
        Unit::Bytes => s as u64,
    };
    let mut cache: Vec<(u64, u32)> = Vec::new();
    let mut misses = 0;
    for &(k, s) in trace {
        match cache.iter().position(|&(x, _)| x == k) {
            Some(p) => {
                let e = cache.remove(p);
                cache.insert(0, e);
            }
            None => {
                misses += 1;
                cache.insert(0, (k, s));
                while cache.iter().map(|&(_, s)| weight(s)).sum::<u64>() > capacity {
                    cache.pop();
                }
            }
        }
    }
    misses
}

/// The first 6,000 references of the CloudPhysics trace, each key keeping
/// the size it first appeared with (a byte-LRU cache with sizes that change
/// under a key is not a stack algorithm, so no exact curve exists for it).
fn small_trace() -> Vec<(u64, u32)> {
    let mut first_size = HashMap::new();
    common::cloudphysics().requests[..6000]
        .iter()
        .map(|r| (r.key, *first_size.entry(r.key).or_insert(r.size.max(1))))
        .collect()
}

fn check(unit: Unit, sizes: Vec<u64>) {
    let trace = small_trace();
    // Precision 24: every distance here has its own histogram bucket.
    let mut exact = ExactLru::with_precision(unit, sizes.clone(), 24).unwrap();
    for &(k, s) in &trace {
        exact.record(k, s, Op::Read);
    }
    let curve = exact.curve();
    for (i, &c) in sizes.iter().enumerate() {
        let misses = brute_force_misses(&trace, c, unit);
        let expect = misses as f64 / trace.len() as f64;
        assert!(
            (curve.miss_ratio[i] - expect).abs() < 1e-12,
            "{unit:?} size {c}: exact {} brute force {expect}",
            curve.miss_ratio[i]
        );
    }
}

#[test]
fn exact_matches_brute_force_by_objects() {
    let unique = common::unique(&common::cloudphysics().requests[..6000]);
    let mut sizes: Vec<u64> = (1..=40).collect();
    sizes.extend((1..=30).map(|i| i * unique / 30));
    sizes.sort_unstable();
    sizes.dedup();
    check(Unit::Objects, sizes);
}

#[test]
fn exact_matches_brute_force_by_bytes() {
    let trace = small_trace();
    let mut seen = HashMap::new();
    for &(k, s) in &trace {
        seen.insert(k, s as u64);
    }
    let total: u64 = seen.values().sum();
    let mut sizes: Vec<u64> = vec![1, 511, 512, 513, 4096, 8191, 8192, 65_536];
    sizes.extend((1..=30).map(|i| i * total / 30));
    sizes.sort_unstable();
    sizes.dedup();
    check(Unit::Bytes, sizes);
}
