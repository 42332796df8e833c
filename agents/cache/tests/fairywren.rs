//! FairyWREN correctness on the simulated FDP SSD (data kept in memory by `DataSim`): random
//! get/set/delete against a reference map, damaged pages reading as misses, an engine rebuilt
//! on the same device starting empty, and the write-read-erase discipline (every unit the
//! engine reclaims is trimmed whole, so the device relocates nothing).

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lachesis_cache::fairywren::{FairyWren, FairyWrenConfig, Victims, HOT};
use lachesis_cache::{DataSim, Engine, Span};
use lachesis_device::{BlockDevice, PlacementHandle};

/// A simulated SSD of `mib` MiB of logical space in 64 KiB reclaim units (the engine's erase
/// units) with 25% over-provisioning, all of it the cache's span.
fn device(mib: u32) -> (Span, Arc<Mutex<DataSim>>) {
    let (sim, dev) = common::device(mib * 16 + 16, 0.25);
    let len = sim.lock().unwrap().geometry().capacity_bytes / 65536 * 65536;
    (common::span(&dev, 0, len), sim)
}

fn config(span: Span) -> FairyWrenConfig {
    FairyWrenConfig::new(
        span,
        PlacementHandle(0),
        PlacementHandle(1),
        PlacementHandle(2),
    )
}

struct Rng(lachesis_mrc::hash::SplitMix64);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(lachesis_mrc::hash::SplitMix64(seed))
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }
}

/// Random operations against a reference map: a get returns a miss or exactly the value
/// last stored, never an older or a deleted one. Returns (hits, gets).
fn model_check(fw: &mut FairyWren, seed: u64, ops: usize, keys: u64, max_len: u64) -> (u64, u64) {
    model_check_from(fw, &mut HashMap::new(), seed, ops, keys, max_len)
}

/// [`model_check`] continuing from what the engine was given before (`reference`).
fn model_check_from(
    fw: &mut FairyWren,
    reference: &mut HashMap<Vec<u8>, Vec<u8>>,
    seed: u64,
    ops: usize,
    keys: u64,
    max_len: u64,
) -> (u64, u64) {
    let mut rng = Rng::new(seed);
    let (mut hits, mut gets) = (0, 0);
    for op in 0..ops {
        let key = format!("key-{}", rng.below(keys)).into_bytes();
        match rng.below(20) {
            0..=10 => {
                let len = 1 + rng.below(max_len) as usize;
                let value: Vec<u8> = (0..len).map(|i| (op * 7 + i) as u8).collect();
                if fw.set(&key, &value).unwrap() {
                    reference.insert(key, value);
                } else {
                    reference.remove(&key);
                }
            }
            11..=18 => {
                gets += 1;
                if let Some(v) = fw.get(&key).unwrap() {
                    hits += 1;
                    assert_eq!(
                        Some(&v),
                        reference.get(&key),
                        "op {op} (seed {seed}): stale or foreign value for {}",
                        String::from_utf8_lossy(&key)
                    );
                }
            }
            _ => {
                let was = fw.delete(&key).unwrap();
                let expected = reference.remove(&key).is_some();
                assert!(
                    !was || expected,
                    "op {op}: delete found a value the model lacks"
                );
                assert_eq!(fw.get(&key).unwrap(), None, "op {op}: read after delete");
            }
        }
    }
    (hits, gets)
}

#[test]
fn matches_a_reference_map_through_log_reclaims_gc_and_resplits() {
    for seed in 1..=6 {
        let (span, sim) = device(3);
        let mut fw = FairyWren::new(config(span)).unwrap();
        let (hits, gets) = model_check(&mut fw, seed, 40_000, 3_000, 300);
        let s = fw.fairywren_stats();
        // Every mechanism ran: FwLog reclaimed units, FwSets collected garbage (packing log
        // objects on the way), hot and cold subsets were re-split.
        assert!(s.log_eu_erases > 0 && s.set_eu_erases > 0, "{s:?}");
        assert!(
            s.gc_updates > 0 && s.log_updates > 0 && s.resplits > 0,
            "{s:?}"
        );
        assert!(s.objects_packed_by_gc > 0, "{s:?}");
        assert_eq!(s.emergency_evictions, 0, "{s:?}");
        // What set rewrites took in, wrote and evicted: every packed object counted once,
        // evictions among them and at re-splits within the totals, sizes within a page.
        let c = &s.churn;
        assert_eq!(c.set_incoming_objects, s.objects_packed, "{s:?}");
        assert!(c.set_written_objects > 0, "{s:?}");
        assert!(
            c.set_evicted_incoming_objects <= c.set_incoming_objects,
            "{s:?}"
        );
        assert!(
            c.set_evicted_incoming_objects <= c.set_evicted_objects,
            "{s:?}"
        );
        assert!(c.set_evicted_incoming_bytes <= c.set_evicted_bytes, "{s:?}");
        assert!(s.resplit_evicted_objects <= c.set_evicted_objects, "{s:?}");
        assert!(c.set_evicted_objects <= fw.stats().evictions, "{s:?}");
        for (objects, bytes) in [
            (c.set_incoming_objects, c.set_incoming_bytes),
            (c.set_written_objects, c.set_written_bytes),
            (c.set_evicted_objects, c.set_evicted_bytes),
        ] {
            assert!(bytes >= objects * 11 && bytes <= objects * 4094, "{s:?}");
        }
        // Cold subsets collected are repacked with their sets' log objects; the streams'
        // counts add up to the store's.
        assert!(s.gc_cold_repacks > 0, "{s:?}");
        assert_eq!(s.hot_page_writes + s.cold_page_writes, s.set_page_writes);
        assert_eq!(s.hot_eu_erases + s.cold_eu_erases, s.set_eu_erases);
        let eu_pages = u64::from(fw.layout().eu_pages);
        assert!(
            s.hot_victim_live_pages <= s.hot_eu_erases * eu_pages,
            "{s:?}"
        );
        assert!(
            s.cold_victim_live_pages <= s.cold_eu_erases * eu_pages,
            "{s:?}"
        );
        assert!(hits > gets / 10, "seed {seed}: {hits} hits of {gets}");
        // Units are written whole and trimmed whole: the device never relocates.
        let fdp = sim.lock().unwrap().fdp_statistics();
        assert_eq!(
            fdp.media_bytes_written, fdp.host_bytes_written,
            "seed {seed}"
        );
    }
}

/// Every victim policy keeps the engine exact: FIFO+ (hot and cold units in one queue) and
/// greedy as well as the default cost-benefit.
#[test]
fn every_victim_policy_matches_the_reference_map() {
    for (seed, victims) in [(31, Victims::FifoPlus), (32, Victims::Greedy)] {
        let (span, sim) = device(3);
        let mut c = config(span);
        c.victims = victims;
        let mut fw = FairyWren::new(c).unwrap();
        model_check(&mut fw, seed, 30_000, 3_000, 300);
        let s = fw.fairywren_stats();
        assert!(
            s.set_eu_erases > 0 && s.gc_updates > 0,
            "{victims:?}: {s:?}"
        );
        assert_eq!(s.emergency_evictions, 0, "{victims:?}: {s:?}");
        let fdp = sim.lock().unwrap().fdp_statistics();
        assert_eq!(fdp.media_bytes_written, fdp.host_bytes_written);
    }
}

#[test]
fn sets_with_a_three_page_cold_subset_match_the_reference_map() {
    for seed in 21..=23 {
        let (span, sim) = device(3);
        let mut cfg = config(span);
        cfg.cold_pages = 3;
        cfg.cold_every = 3;
        let mut fw = FairyWren::new(cfg).unwrap();
        let (hits, gets) = model_check(&mut fw, seed, 40_000, 3_000, 300);
        let s = fw.fairywren_stats();
        assert!(
            s.resplits > 0 && s.gc_updates > 0 && s.set_eu_erases > 0,
            "{s:?}"
        );
        assert_eq!(s.emergency_evictions, 0, "{s:?}");
        assert!(hits > gets / 10, "seed {seed}: {hits} hits of {gets}");
        // Objects read since they were written went to cold pages.
        let cold = (0..3_000)
            .filter(|k| {
                (1..=3).any(|p| fw.subset_offset(format!("key-{k}").as_bytes(), p).is_some())
            })
            .count();
        assert!(cold > 0);
        let fdp = sim.lock().unwrap().fdp_statistics();
        assert_eq!(fdp.media_bytes_written, fdp.host_bytes_written);
    }
}

#[test]
fn tiny_objects_many_keys_and_a_whole_log_pack() {
    let (span, _sim) = device(4);
    let mut fw = FairyWren::new(config(span)).unwrap();
    let mut reference = HashMap::new();
    model_check_from(&mut fw, &mut reference, 11, 60_000, 20_000, 40);
    let before = fw.stats().objects;
    fw.pack_log().unwrap();
    assert_eq!(fw.log_objects(), 0);
    assert!(fw.stats().objects <= before);
    model_check_from(&mut fw, &mut reference, 12, 5_000, 20_000, 40);
}

/// Every subset page is written FAR first, as RRIParoo writes a set: the DRAM hit bits cover
/// a page's first positions, so on a page of more objects than hit bits (tiny objects) the
/// ones left untracked are the nearest to NEAR, in cold pages as in hot ones.
#[test]
fn subset_pages_are_written_far_first() {
    let (span, sim) = device(3);
    let mut cfg = config(span);
    cfg.cold_every = 2;
    let mut fw = FairyWren::new(cfg).unwrap();
    let mut reference = HashMap::new();
    model_check_from(&mut fw, &mut reference, 5, 100_000, 60_000, 60);
    let s = fw.fairywren_stats();
    assert!(s.resplits > 0, "{s:?}");
    // The sets are full: rewrites evict, some of what came in among it.
    assert!(s.churn.set_evicted_incoming_objects > 0, "{s:?}");
    assert!(s.churn.set_evicted_objects <= fw.stats().evictions, "{s:?}");
    let (mut pages, mut unsorted, mut mixed) = (0, 0, 0);
    let mut seen = std::collections::HashSet::new();
    for k in 0..60_000 {
        let key = format!("key-{k}").into_bytes();
        for sub in [HOT, 1] {
            let Some(off) = fw.subset_offset(&key, sub) else {
                continue;
            };
            if !seen.insert(off) {
                continue;
            }
            let mut page = vec![0u8; 4096];
            sim.lock().unwrap().read(off, &mut page).unwrap();
            let n = u16::from_le_bytes([page[0], page[1]]) as usize;
            let rrip = &page[2..2 + n];
            pages += 1;
            unsorted += usize::from(rrip.windows(2).any(|w| w[0] < w[1]));
            mixed += usize::from(rrip.iter().any(|&r| r != rrip[0]));
        }
    }
    assert!(
        pages > 100 && mixed > 0,
        "{pages} pages, {mixed} of mixed predictions"
    );
    assert_eq!(unsorted, 0, "{unsorted} of {pages} pages not FAR first");
}

#[test]
fn overwrites_and_deletes_of_packed_keys_never_resurface() {
    let (span, _sim) = device(3);
    let mut cfg = config(span);
    cfg.admit_probability = 1.0;
    let mut fw = FairyWren::new(cfg).unwrap();
    for k in 0..400u32 {
        assert!(fw.set(format!("k{k}").as_bytes(), &[1; 50]).unwrap());
    }
    fw.pack_log().unwrap();
    // Every key is now in its set; newer copies go to FwLog and shadow them.
    for k in 0..400u32 {
        fw.set(format!("k{k}").as_bytes(), &[2; 50]).unwrap();
    }
    for k in (0..400u32).step_by(2) {
        assert!(fw.delete(format!("k{k}").as_bytes()).unwrap());
    }
    fw.pack_log().unwrap();
    for k in 0..400u32 {
        let got = fw.get(format!("k{k}").as_bytes()).unwrap();
        if k % 2 == 0 {
            assert_eq!(got, None, "k{k} deleted");
        } else if let Some(v) = got {
            assert_eq!(v, vec![2; 50], "k{k} stale");
        }
    }
}

#[test]
fn damaged_subsets_and_log_pages_read_as_misses() {
    let (span, sim) = device(3);
    let mut cfg = config(span);
    cfg.admit_probability = 1.0;
    let mut fw = FairyWren::new(cfg).unwrap();
    let keys: Vec<Vec<u8>> = (0..300).map(|k| format!("dmg-{k}").into_bytes()).collect();
    for k in &keys {
        fw.set(k, &[7; 100]).unwrap();
    }
    fw.pack_log().unwrap();
    // Flip a byte of the hot subset holding each of a few keys.
    let mut damaged = Vec::new();
    for k in keys.iter().take(20) {
        if let Some(off) = fw.subset_offset(k, HOT) {
            let mut d = sim.lock().unwrap();
            let mut page = vec![0u8; 4096];
            d.read(off, &mut page).unwrap();
            page[4000] ^= 0xff;
            page[200] ^= 0xff;
            d.write(off, &page, PlacementHandle(1)).unwrap();
            damaged.push(k.clone());
        }
    }
    assert!(!damaged.is_empty());
    for k in &keys {
        if let Some(v) = fw.get(k).unwrap() {
            assert_eq!(v, vec![7; 100]);
        }
    }
    assert!(fw.stats().corrupt_reads > 0);
    // FwLog pages on flash: write enough to flush segments, then damage the whole log area.
    for k in &keys {
        fw.set(k, &[8; 100]).unwrap();
    }
    let log_bytes = u64::from(fw.layout().log_eus) * fw.layout().eu_bytes();
    {
        let mut d = sim.lock().unwrap();
        let junk = vec![0x5a; 4096];
        for off in (0..log_bytes).step_by(4096) {
            let mut page = vec![0u8; 4096];
            d.read(off, &mut page).unwrap();
            if page.iter().any(|&b| b != 0) {
                d.write(off, &junk, PlacementHandle(0)).unwrap();
            }
        }
    }
    for k in &keys {
        if let Some(v) = fw.get(k).unwrap() {
            assert_eq!(
                v,
                vec![8; 100],
                "a damaged log page let an older copy through"
            );
        }
    }
    // And the engine keeps working through reclaims of damaged units (other keys).
    let mut reference = HashMap::new();
    let (hits, _) = model_check_from(&mut fw, &mut reference, 5, 20_000, 2_000, 200);
    assert!(hits > 0);
}

#[test]
fn an_engine_rebuilt_on_the_same_device_starts_empty() {
    let (span, _sim) = device(3);
    let mut fw = FairyWren::new(config(span.clone())).unwrap();
    model_check(&mut fw, 3, 10_000, 1_000, 200);
    fw.pack_log().unwrap();
    assert!(fw.stats().objects > 0);
    drop(fw);
    // A restart without the DRAM state: nothing from before may be read back.
    let mut again = FairyWren::new(config(span)).unwrap();
    for k in 0..1_000 {
        assert_eq!(again.get(format!("key-{k}").as_bytes()).unwrap(), None);
    }
    assert_eq!(again.stats().objects, 0);
    model_check(&mut again, 4, 10_000, 1_000, 200);
}

#[test]
fn bad_configurations_are_refused_with_the_field() {
    let (span, _sim) = device(3);
    let mut c = config(span.clone());
    c.op = 0.9;
    let e = FairyWren::new(c).err().unwrap().to_string();
    assert!(e.contains("op 0.9"), "{e}");
    let mut c = config(span.clone());
    c.eu_bytes = 5000;
    assert!(FairyWren::new(c)
        .err()
        .unwrap()
        .to_string()
        .contains("erase unit"));
    let small = Span {
        len: 8 * 65536,
        ..span
    };
    let e = FairyWren::new(config(small)).err().unwrap().to_string();
    assert!(e.contains("erase units"), "{e}");
}

#[test]
fn a_deleted_key_is_not_found_through_a_live_entry_of_the_same_page_and_tag() {
    let (span, _sim) = device(3);
    let mut cfg = config(span);
    cfg.admit_probability = 1.0;
    let mut fw = FairyWren::new(cfg).unwrap();
    // Two keys of one set whose 64-bit hashes share the 9 low bits FwLog's index keeps.
    let sets = u128::from(fw.layout().sets);
    let place = |k: &[u8]| {
        let h = lachesis_cache::object::key_hash(k);
        (((u128::from(h) * sets) >> 64) as u32, h & 511)
    };
    let mut seen = HashMap::new();
    let (a, b) = (0..)
        .map(|i| format!("twin-{i}").into_bytes())
        .find_map(|k| seen.insert(place(&k), k.clone()).map(|other| (other, k)))
        .unwrap();
    fw.set(&a, b"old value of a").unwrap();
    fw.set(&b, b"value of b").unwrap();
    // Fill other sets until the segment holding both is on flash (before any unit is reclaimed).
    let mut i = 0;
    while fw.fairywren_stats().log_segment_writes == 0 {
        let k = format!("filler-{i}").into_bytes();
        if place(&k).0 != place(&a).0 {
            fw.set(&k, &[0; 100]).unwrap();
        }
        i += 1;
    }
    assert_eq!(fw.fairywren_stats().log_eu_erases, 0);
    assert!(fw.delete(&a).unwrap());
    // a's dead copy is still in the page b's entry names, under the same tag.
    assert_eq!(fw.get(&a).unwrap(), None);
    assert_eq!(fw.get(&b).unwrap().as_deref(), Some(&b"value of b"[..]));
}
