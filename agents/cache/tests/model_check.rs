//! Randomized get/set/delete against a reference map, for the log, the set-associative cache
//! and the hybrid cache: a get may miss (the cache evicts) but must never return anything
//! other than the last value set, and never a value after a delete. Small devices make region
//! and bucket eviction, and resizing, happen within a few hundred operations.

mod common;

use std::collections::HashMap;

use common::*;
use lachesis_cache::{Engine, RegionEviction};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Get(u32),
    Set(u32, usize),
    Delete(u32),
    /// Hybrid only: resize to this many 64 KiB units of flash and DRAM of this many KiB.
    Resize(u64, usize),
}

fn ops(keys: u32, max_len: usize, resize: bool) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..keys).prop_map(Op::Get),
        4 => (0..keys, 1..max_len).prop_map(|(k, l)| Op::Set(k, l)),
        1 => (0..keys).prop_map(Op::Delete),
        (if resize { 1 } else { 0 }) => (8u64..48, 0usize..32).prop_map(|(f, d)| Op::Resize(f, d)),
    ];
    proptest::collection::vec(op, 1..600)
}

/// `check` for an engine driven through the `Engine` trait; `resize` gets the engine too.
fn check_engine<E: Engine>(
    ops: &[Op],
    e: &mut E,
    mut resize: impl FnMut(&mut E, u64),
) -> Result<u64, TestCaseError> {
    let e = std::cell::RefCell::new(e);
    check(
        ops,
        |k| e.borrow_mut().get(k).unwrap(),
        |k, v| e.borrow_mut().set(k, v).unwrap(),
        |k| e.borrow_mut().delete(k).unwrap(),
        |bytes, _| resize(&mut **e.borrow_mut(), bytes),
    )
}

/// Runs `ops` against `get/set/delete/resize` closures and the model; returns the hits.
fn check(
    ops: &[Op],
    mut get: impl FnMut(&[u8]) -> Option<Vec<u8>>,
    mut set: impl FnMut(&[u8], &[u8]) -> bool,
    mut delete: impl FnMut(&[u8]) -> bool,
    mut resize: impl FnMut(u64, usize),
) -> Result<u64, TestCaseError> {
    let mut model: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut version = 0u32;
    let mut hits = 0;
    for op in ops {
        match *op {
            Op::Get(k) => {
                let got = get(&key(k));
                if let Some(v) = &got {
                    hits += 1;
                    prop_assert_eq!(
                        Some(v),
                        model.get(&k),
                        "key {} read a stale or foreign value",
                        k
                    );
                }
            }
            Op::Set(k, len) => {
                version += 1;
                let v = value(k, version, len);
                if set(&key(k), &v) {
                    model.insert(k, v);
                } else {
                    model.remove(&k);
                }
            }
            Op::Delete(k) => {
                let was = delete(&key(k));
                let expected = model.remove(&k).is_some();
                // Present in the model but evicted already is fine; the reverse is not.
                prop_assert!(
                    !was || expected,
                    "delete of {} found a value the model lacks",
                    k
                );
            }
            Op::Resize(units, dram_kib) => resize(units * 65536, dram_kib * 1024),
        }
    }
    Ok(hits)
}

/// The log as a stage drives it with `defer_seals`: every other full region is written by
/// the owner right after the set that filled it, the others are left to the next seal or
/// resize to write.
struct Owner {
    log: lachesis_cache::Loc,
    sets: u64,
}

impl Engine for Owner {
    fn get(&mut self, key: &[u8]) -> lachesis_cache::Result<Option<Vec<u8>>> {
        self.log.get(key)
    }
    fn set(&mut self, key: &[u8], value: &[u8]) -> lachesis_cache::Result<bool> {
        let stored = self.log.set(key, value)?;
        self.sets += 1;
        if self.sets.is_multiple_of(2) {
            if let Some(w) = self.log.take_write() {
                w.write();
                self.log.wrote(&w)?;
            }
        }
        Ok(stored)
    }
    fn delete(&mut self, key: &[u8]) -> lachesis_cache::Result<bool> {
        self.log.delete(key)
    }
    fn stats(&self) -> lachesis_cache::EngineStats {
        self.log.stats()
    }
    fn dram_bytes(&self) -> usize {
        self.log.dram_bytes()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn loc_with_deferred_seals_matches_the_model(ops in ops(300, 6000, true)) {
        let (_d, dev) = device(64, 0.25);
        let mut c = lachesis_cache::LocConfig::new(span(&dev, 0, 8 * 65536), lachesis_device::PlacementHandle(0));
        c.defer_seals = true;
        c.eviction = RegionEviction::Lru;
        let mut e = Owner { log: lachesis_cache::Loc::new(c).unwrap(), sets: 0 };
        check_engine(&ops, &mut e, |e, bytes| e.log.resize((bytes / 2).clamp(2 * 65536, 8 * 65536)).unwrap())?;
    }

    #[test]
    fn loc_fifo_matches_the_model(ops in ops(300, 6000, false)) {
        let (_d, dev) = device(64, 0.25);
        let mut e = loc(&dev, 4 * 65536, RegionEviction::Fifo);
        check_engine(&ops, &mut e, |_, _| {})?;
    }

    #[test]
    fn loc_lru_matches_the_model(ops in ops(300, 6000, false)) {
        let (_d, dev) = device(64, 0.25);
        let mut e = loc(&dev, 4 * 65536, RegionEviction::Lru);
        check_engine(&ops, &mut e, |e, bytes| e.resize(bytes.clamp(2 * 65536, 4 * 65536)).unwrap())?;
    }

    #[test]
    fn loc_resizing_matches_the_model(ops in ops(300, 3000, true)) {
        let (_d, dev) = device(64, 0.25);
        let mut e = loc(&dev, 16 * 65536, RegionEviction::Fifo);
        check_engine(&ops, &mut e, |e, bytes| e.resize((bytes / 3).clamp(2 * 65536, 16 * 65536)).unwrap())?;
    }

    #[test]
    fn set_assoc_matches_the_model(ops in ops(400, 1500, false)) {
        let (_d, dev) = device(64, 0.25);
        // 8 buckets: objects of up to 1.5 KiB evict each other constantly.
        let mut e = set_assoc(&dev, 8 * 4096);
        check_engine(&ops, &mut e, |_, _| {})?;
    }

    #[test]
    fn hybrid_matches_the_model_across_resizing(ops in ops(300, 5000, true)) {
        let (_d, dev) = device(64, 0.25);
        let h = hybrid(&dev, 48 * 65536, 24 * 65536, 16 << 10);
        check(&ops,
            |k| h.get(k).unwrap(),
            |k, v| h.set(k, v).unwrap(),
            |k| h.delete(k).unwrap(),
            |bytes, dram| h.resize(bytes, dram).unwrap())?;
    }
}

/// The checks above allow misses; this one makes sure the engines do hit, so a cache that
/// never stores anything cannot pass.
#[test]
fn engines_hit_what_fits() {
    let (_d, dev) = device(64, 0.25);
    let mut engines: Vec<(&str, Box<dyn Engine>)> = vec![
        ("loc", Box::new(loc(&dev, 8 * 65536, RegionEviction::Fifo))),
        ("set-assoc", Box::new(set_assoc(&dev, 64 * 4096))),
    ];
    for (name, e) in &mut engines {
        for k in 0..50 {
            assert!(e.set(&key(k), &value(k, 1, 200)).unwrap());
        }
        for k in 0..50 {
            assert_eq!(
                e.get(&key(k)).unwrap(),
                Some(value(k, 1, 200)),
                "{name} key {k}"
            );
        }
        let s = e.stats();
        assert_eq!((s.hits, s.objects), (50, 50), "{name}");
        assert!(e.delete(&key(3)).unwrap());
        assert_eq!(e.get(&key(3)).unwrap(), None, "{name}");
        assert!(e.dram_bytes() > 0);
    }
    let h = hybrid(&dev, 48 * 65536, 24 * 65536, 0);
    for k in 0..50 {
        assert!(h.set(&key(k), &value(k, 1, 100 + 60 * k as usize)).unwrap());
    }
    for k in 0..50 {
        assert_eq!(
            h.get(&key(k)).unwrap(),
            Some(value(k, 1, 100 + 60 * k as usize)),
            "hybrid {k}"
        );
    }
    let (small, large) = h.engine_stats();
    assert!(
        small.objects > 0 && large.objects > 0,
        "both engines used: {small:?} {large:?}"
    );
}
