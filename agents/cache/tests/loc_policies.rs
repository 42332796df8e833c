//! The log's eviction policies: reinsertion keeps objects read since they were written, LRU
//! keeps regions being read, FIFO evicts in write order regardless.

mod common;

use common::*;
use lachesis_cache::{Engine, Loc, LocConfig, RegionEviction};
use lachesis_device::PlacementHandle;

/// A log of four 64 KiB regions with ~1 KB objects (about 64 per region).
fn log(eviction: RegionEviction, reinsert_hits: u8) -> (Loc, impl Sized) {
    let (d, dev) = device(64, 0.25);
    let mut c = LocConfig::new(span(&dev, 0, 4 * 65536), PlacementHandle(0));
    c.eviction = eviction;
    c.reinsert_hits = reinsert_hits;
    (Loc::new(c).unwrap(), d)
}

fn fill(log: &mut Loc, from: u32, n: u32) {
    for k in from..from + n {
        assert!(log.set(&key(k), &value(k, 0, 1000)).unwrap());
    }
}

#[test]
fn reinsertion_keeps_hot_objects_across_eviction() {
    for (threshold, survives) in [(2u8, true), (0, false)] {
        let (mut log, _d) = log(RegionEviction::Fifo, threshold);
        fill(&mut log, 0, 64); // region 0
        for _ in 0..3 {
            assert!(log.get(&key(5)).unwrap().is_some());
        }
        assert!(log.get(&key(6)).unwrap().is_some()); // one hit: below the threshold
        fill(&mut log, 100, 64 * 4); // wraps the log: region 0 is evicted
        assert_eq!(log.get(&key(6)).unwrap(), None, "threshold {threshold}");
        assert_eq!(
            log.get(&key(5)).unwrap().is_some(),
            survives,
            "threshold {threshold}: hot object"
        );
        if survives {
            assert_eq!(log.get(&key(5)).unwrap(), Some(value(5, 0, 1000)));
        }
    }
}

#[test]
fn lru_keeps_the_region_being_read() {
    for (eviction, survives) in [(RegionEviction::Lru, true), (RegionEviction::Fifo, false)] {
        let (mut log, _d) = log(eviction, 0);
        fill(&mut log, 0, 64 * 3 + 10); // regions 0-2 sealed, 3 open
        let mut hot = 0;
        // Keep reading region 0 while the log wraps once more.
        for k in 1000..1000 + 64 * 2 {
            fill(&mut log, k, 1);
            if log.get(&key(3)).unwrap().is_some() {
                hot += 1;
            }
        }
        assert_eq!(
            hot == 64 * 2,
            survives,
            "{eviction:?}: region 0 hit {hot} times"
        );
        assert!(log.stats().evictions > 0);
    }
}
