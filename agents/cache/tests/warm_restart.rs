//! Warm restart (`lachesis_cache::persist`): every engine saves its index, a fresh engine on
//! the same device restores it and reads what was there; a restored engine never returns a
//! value other than the last one set before the save, also when device bytes were flipped
//! after the save; a damaged, truncated, foreign or misfitting index is refused saying why;
//! and a cold start on a used device (a crash: no index) reads as empty, never as an older
//! value. On the simulated SSD with data (`DataSim`) and on a real file through io_uring.

mod common;

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::FileExt;

use common::*;
use lachesis_cache::fairywren::{FairyWren, FairyWrenConfig};
use lachesis_cache::hybrid::SmallFactory;
use lachesis_cache::kangaroo::{Kangaroo, KangarooConfig};
use lachesis_cache::persist::IndexFile;
use lachesis_cache::{
    dev, share, Engine, Hybrid, HybridConfig, Loc, LocConfig, RegionEviction, SetAssoc,
    SetAssocConfig, SharedDevice, Span,
};
use lachesis_device::uring::{UringConfig, UringDevice};
use lachesis_device::{FdpMode, PlacementHandle};
use proptest::prelude::*;

type Restored = lachesis_cache::Result<Box<dyn Engine>>;

/// An engine under test on a device: built empty, or restored from a saved index.
#[derive(Clone, Copy)]
struct Subject {
    name: &'static str,
    /// Bytes of the device (from offset 0) the engine owns.
    span: u64,
    build: fn(&SharedDevice) -> Box<dyn Engine>,
    restore: fn(&SharedDevice, &mut dyn Read) -> Restored,
}

const KIB64: u64 = 65536;

fn loc_config(dev: &SharedDevice, eviction: RegionEviction) -> LocConfig {
    let mut c = LocConfig::new(span(dev, 0, 4 * KIB64), PlacementHandle(0));
    c.eviction = eviction;
    c
}

fn sa_config(dev: &SharedDevice) -> SetAssocConfig {
    // 8 buckets: objects evict each other constantly.
    SetAssocConfig::new(span(dev, 0, 8 * 4096), PlacementHandle(1))
}

fn kangaroo_config(span: Span, admit: f64) -> KangarooConfig {
    let mut c = KangarooConfig::new(span, PlacementHandle(1), PlacementHandle(2)).fit_partitions();
    c.admit_probability = admit;
    c
}

fn kangaroo_factory(admit: f64) -> SmallFactory {
    Box::new(move |span: Span| {
        Ok(Box::new(Kangaroo::new(kangaroo_config(span, admit))?) as Box<dyn Engine>)
    })
}

/// FairyWREN in erase units of the device's 64 KiB reclaim units.
fn fairywren_config(span: Span) -> FairyWrenConfig {
    FairyWrenConfig::new(
        span,
        PlacementHandle(1),
        PlacementHandle(2),
        PlacementHandle(3),
    )
}

/// FairyWREN as a hybrid's small-object engine: built over a span the hybrid deallocated.
fn fairywren_factory() -> SmallFactory {
    Box::new(|span: Span| Ok(Box::new(FairyWren::open(fairywren_config(span))?) as Box<dyn Engine>))
}

/// A hybrid over 48 units of 64 KiB whose small-object engine is FairyWREN: a quarter of
/// the flash, 12 whole erase units.
fn fairywren_hybrid_config(dev: &SharedDevice) -> HybridConfig {
    HybridConfig {
        small_align: KIB64,
        ..hybrid_config(dev, 48 * KIB64, fairywren_factory())
    }
}

fn hybrid_config(dev: &SharedDevice, flash: u64, small: SmallFactory) -> HybridConfig {
    HybridConfig {
        span: span(dev, 0, 48 * KIB64),
        flash_bytes: flash,
        dram_bytes: 16 << 10,
        small_fraction: 0.25,
        small_align: 0,
        small_threshold: 2048,
        shards: 4,
        loc: LocConfig::new(span(dev, 0, 48 * KIB64), PlacementHandle(0)),
        small,
    }
}

const SUBJECTS: &[Subject] = &[
    Subject {
        name: "loc fifo",
        span: 4 * KIB64,
        build: |d| Box::new(Loc::new(loc_config(d, RegionEviction::Fifo)).unwrap()),
        restore: |d, r| {
            Ok(Box::new(Loc::restore(
                loc_config(d, RegionEviction::Fifo),
                r,
            )?))
        },
    },
    Subject {
        name: "loc lru",
        span: 4 * KIB64,
        build: |d| Box::new(Loc::new(loc_config(d, RegionEviction::Lru)).unwrap()),
        restore: |d, r| {
            Ok(Box::new(Loc::restore(
                loc_config(d, RegionEviction::Lru),
                r,
            )?))
        },
    },
    Subject {
        name: "set-assoc",
        span: 8 * 4096,
        build: |d| Box::new(SetAssoc::new(sa_config(d)).unwrap()),
        restore: |d, r| Ok(Box::new(SetAssoc::restore(sa_config(d), r)?)),
    },
    Subject {
        name: "kangaroo",
        span: 16 * KIB64,
        build: |d| Box::new(Kangaroo::new(kangaroo_config(span(d, 0, 16 * KIB64), 0.9)).unwrap()),
        restore: |d, r| {
            Ok(Box::new(Kangaroo::restore(
                kangaroo_config(span(d, 0, 16 * KIB64), 0.9),
                r,
            )?))
        },
    },
    Subject {
        name: "fairywren",
        span: 16 * KIB64,
        build: |d| Box::new(FairyWren::new(fairywren_config(span(d, 0, 16 * KIB64))).unwrap()),
        restore: |d, r| {
            Ok(Box::new(FairyWren::restore(
                fairywren_config(span(d, 0, 16 * KIB64)),
                r,
            )?))
        },
    },
    Subject {
        name: "hybrid, set-assoc small",
        span: 48 * KIB64,
        build: |d| {
            Box::new(Hybrid::new(hybrid_config(d, 24 * KIB64, set_assoc_factory())).unwrap())
        },
        restore: |d, r| {
            Ok(Box::new(Hybrid::restore(
                hybrid_config(d, 24 * KIB64, set_assoc_factory()),
                r,
            )?))
        },
    },
    Subject {
        name: "hybrid, kangaroo small",
        span: 48 * KIB64,
        build: |d| {
            Box::new(Hybrid::new(hybrid_config(d, 24 * KIB64, kangaroo_factory(0.9))).unwrap())
        },
        restore: |d, r| {
            Ok(Box::new(Hybrid::restore(
                hybrid_config(d, 24 * KIB64, kangaroo_factory(0.9)),
                r,
            )?))
        },
    },
    Subject {
        name: "hybrid, fairywren small",
        span: 48 * KIB64,
        build: |d| Box::new(Hybrid::new(fairywren_hybrid_config(d)).unwrap()),
        restore: |d, r| Ok(Box::new(Hybrid::restore(fairywren_hybrid_config(d), r)?)),
    },
];

/// The first subjects are engines on their own, the rest hybrids.
const STANDALONE: usize = 5;

#[derive(Clone, Debug)]
enum Op {
    Get(u32),
    Set(u32, usize),
    Delete(u32),
}

fn ops(keys: u32, max_len: usize, n: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0..keys).prop_map(Op::Get),
        5 => (0..keys, 1..max_len).prop_map(|(k, l)| Op::Set(k, l)),
        1 => (0..keys).prop_map(Op::Delete),
    ];
    proptest::collection::vec(op, 1..n)
}

/// The values the engine may hold: the last one set per key, never an older one.
#[derive(Default)]
struct Reference {
    values: HashMap<u32, Vec<u8>>,
    version: u32,
}

impl Reference {
    fn apply(&mut self, e: &mut dyn Engine, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Get(k) => {
                self.check(e, k)?;
            }
            Op::Set(k, len) => {
                self.version += 1;
                let v = value(k, self.version, len);
                if e.set(&key(k), &v).unwrap() {
                    self.values.insert(k, v);
                } else {
                    self.values.remove(&k);
                }
            }
            Op::Delete(k) => {
                let was = e.delete(&key(k)).unwrap();
                let expected = self.values.remove(&k).is_some();
                prop_assert!(!was || expected, "delete of {} found a deleted value", k);
            }
        }
        Ok(())
    }

    /// A get misses or returns exactly the last value set.
    fn check(&self, e: &mut dyn Engine, k: u32) -> Result<bool, TestCaseError> {
        let got = e.get(&key(k)).unwrap();
        if let Some(v) = &got {
            prop_assert_eq!(
                Some(v),
                self.values.get(&k),
                "key {} read a stale or foreign value",
                k
            );
        }
        Ok(got.is_some())
    }
}

fn save(e: &dyn Engine) -> Vec<u8> {
    let mut out = Vec::new();
    e.save(&mut out).unwrap();
    out
}

/// Flips bytes of the device in place (positions within `len`), as damage after a save.
fn flip(dev: &SharedDevice, len: u64, flips: &[(u64, u8)]) {
    let mut d = dev::lock(dev);
    for &(at, mask) in flips {
        let at = at % len;
        let block = at / 4096 * 4096;
        let mut buf = vec![0; 4096];
        d.read(block, &mut buf).unwrap();
        buf[(at - block) as usize] ^= mask;
        d.write(block, &buf, PlacementHandle(3)).unwrap();
    }
}

/// Random operations, a save, optional damage to the device, a restore into a fresh engine,
/// then every key and more random operations against the reference.
fn save_restore_model(
    s: Subject,
    before: &[Op],
    flips: &[(u64, u8)],
    after: &[Op],
) -> Result<(), TestCaseError> {
    let (_d, dev) = device(64, 0.25);
    let mut reference = Reference::default();
    let mut e = (s.build)(&dev);
    for op in before {
        reference.apply(e.as_mut(), op)?;
    }
    let index = save(e.as_ref());
    drop(e);
    flip(&dev, s.span, flips);
    let mut e = (s.restore)(&dev, &mut &index[..]).unwrap();
    for k in 0..300 {
        reference.check(e.as_mut(), k)?;
    }
    for op in after {
        reference.apply(e.as_mut(), op)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn restored_engines_match_the_model(
        which in 0..SUBJECTS.len(),
        before in ops(300, 3000, 500),
        after in ops(300, 3000, 200),
    ) {
        save_restore_model(SUBJECTS[which], &before, &[], &after)?;
    }

    #[test]
    fn device_bytes_flipped_after_the_save_never_read_wrong(
        which in 0..SUBJECTS.len(),
        before in ops(300, 3000, 500),
        flips in proptest::collection::vec((any::<u64>(), 1u8..=255), 1..24),
        after in ops(300, 3000, 100),
    ) {
        save_restore_model(SUBJECTS[which], &before, &flips, &after)?;
    }
}

/// Fills an engine with `n` keys of the given sizes; returns what each key reads.
fn fill(e: &mut dyn Engine, n: u32, size: impl Fn(u32) -> usize) -> Vec<Option<Vec<u8>>> {
    for k in 0..n {
        e.set(&key(k), &value(k, 1, size(k))).unwrap();
    }
    (0..n).map(|k| e.get(&key(k)).unwrap()).collect()
}

/// The restored engine reads exactly what the saved one did: the cache comes back warm.
#[test]
fn standalone_engines_come_back_exactly_as_saved() {
    for s in &SUBJECTS[..STANDALONE] {
        let (_d, dev) = device(64, 0.25);
        let mut e = (s.build)(&dev);
        let small = s.name.starts_with("set")
            || s.name.starts_with("kangaroo")
            || s.name.starts_with("fairywren");
        let before = fill(e.as_mut(), 400, |k| {
            if small {
                100 + k as usize % 200
            } else {
                700
            }
        });
        let stored = before.iter().flatten().count();
        assert!(stored >= 50, "{}: only {stored} objects stored", s.name);
        let objects = e.stats().objects;
        let index = save(e.as_ref());
        drop(e);
        let mut e = (s.restore)(&dev, &mut &index[..]).unwrap();
        assert_eq!(e.stats().objects, objects, "{}: object count", s.name);
        let after: Vec<_> = (0..400).map(|k| e.get(&key(k)).unwrap()).collect();
        assert!(
            before == after,
            "{}: the restored cache reads differently",
            s.name
        );
        assert_eq!(e.stats().hits as usize, stored, "{}", s.name);
    }
}

/// A hybrid partition flushes its DRAM (dirty objects included) to flash on save and comes
/// back warm; a restore at another flash size resizes after restoring.
#[test]
fn hybrid_flushes_dram_and_comes_back_warm() {
    let size = |k: u32| if k.is_multiple_of(2) { 150 } else { 3000 };
    for (name, resize_to) in [("same size", 24 * KIB64), ("grown", 40 * KIB64)] {
        let (_d, dev) = device(64, 0.25);
        let mut cfg = hybrid_config(&dev, 24 * KIB64, kangaroo_factory(1.0));
        cfg.dram_bytes = 1 << 20;
        let h = Hybrid::new(cfg).unwrap();
        // Everything is in DRAM only, dirty, until the save.
        for k in 0..120 {
            assert!(h.set(&key(k), &value(k, 1, size(k))).unwrap());
        }
        let before: Vec<_> = (0..120).map(|k| h.get(&key(k)).unwrap()).collect();
        assert!(before.iter().all(Option::is_some), "all fit the partition");
        let mut index = Vec::new();
        h.save(&mut index).unwrap();
        drop(h);
        let mut cfg = hybrid_config(&dev, resize_to, kangaroo_factory(1.0));
        cfg.dram_bytes = 0;
        let h = Hybrid::restore(cfg, &mut &index[..]).unwrap();
        assert_eq!(h.size().0, resize_to, "{name}");
        let mut hits = 0;
        for (k, b) in before.iter().enumerate() {
            match h.get(&key(k as u32)).unwrap() {
                Some(v) => {
                    assert_eq!(Some(&v), b.as_ref(), "{name}: key {k}");
                    hits += 1;
                }
                None => assert!(k % 2 == 0, "{name}: large object {k} lost"),
            }
        }
        // Kangaroo's flushes may drop a small object below its threshold; the rest come back.
        // A grown partition rebuilds its small-object engine (empty), keeping the log.
        let least = if resize_to == 24 * KIB64 { 108 } else { 60 };
        assert!(hits >= least, "{name}: {hits} of 120 came back");
    }
}

/// An index restored into another shape, or damaged, truncated or of another engine, is
/// refused with the reason; the caller then starts empty and the engine works.
#[test]
fn a_misfitting_or_damaged_index_is_refused_saying_why() {
    let (_d, dev) = device(64, 0.25);
    let mut loc = Loc::new(loc_config(&dev, RegionEviction::Fifo)).unwrap();
    fill(&mut loc, 50, |_| 500);
    let index = save(&loc);
    let err = |r: lachesis_cache::Result<Loc>| r.err().expect("refused").to_string();

    let mut bigger = loc_config(&dev, RegionEviction::Fifo);
    bigger.span.len = 8 * KIB64;
    assert!(err(Loc::restore(bigger, &mut &index[..])).contains("span length was 262144"));
    let mut moved = loc_config(&dev, RegionEviction::Fifo);
    moved.span.offset = 8 * KIB64;
    assert!(err(Loc::restore(moved, &mut &index[..])).contains("span offset"));
    let mut regions = loc_config(&dev, RegionEviction::Fifo);
    regions.region_bytes = 2 * KIB64;
    assert!(err(Loc::restore(regions, &mut &index[..])).contains("region bytes"));
    let cfg = || loc_config(&dev, RegionEviction::Fifo);
    let e = err(Loc::restore(cfg(), &mut &index[..index.len() / 2]));
    assert!(e.contains("truncated"), "{e}");
    let mut damaged = index.clone();
    damaged[index.len() / 2] ^= 4;
    assert!(err(Loc::restore(cfg(), &mut &damaged[..])).contains("checksum"));
    let other = save(&SetAssoc::new(sa_config(&dev)).unwrap());
    let e = err(Loc::restore(cfg(), &mut &other[..]));
    assert!(e.contains("holds a set-associative cache index"), "{e}");
    assert!(err(Loc::restore(cfg(), &mut &b"not an index at all"[..])).contains("magic"));
    // A policy that does not move data is the new configuration's: FIFO saved, LRU restored.
    Loc::restore(loc_config(&dev, RegionEviction::Lru), &mut &index[..]).unwrap();

    let kg_cfg = |len| kangaroo_config(span(&dev, 0, len), 0.9);
    let mut kg = Kangaroo::new(kg_cfg(16 * KIB64)).unwrap();
    fill(&mut kg, 50, |_| 100);
    let kindex = save(&kg);
    let e = Kangaroo::restore(kg_cfg(32 * KIB64), &mut &kindex[..])
        .err()
        .unwrap()
        .to_string();
    assert!(e.starts_with("Kangaroo index refused: span length"), "{e}");

    // A used engine does not take an index: its flash no longer matches its own DRAM state.
    let e = Engine::load(&mut loc, &mut &index[..])
        .unwrap_err()
        .to_string();
    assert!(e.contains("served requests"), "{e}");

    let hcfg = || hybrid_config(&dev, 24 * KIB64, set_assoc_factory());
    let mut hc = hcfg();
    hc.small_threshold = 1024;
    let h = Hybrid::new(hcfg()).unwrap();
    let mut hindex = Vec::new();
    h.save(&mut hindex).unwrap();
    let e = Hybrid::restore(hc, &mut &hindex[..])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("small-object threshold was 2048"), "{e}");

    // Refused, the caller starts empty on the same device; nothing old comes back.
    let mut fresh = Loc::new(cfg()).unwrap();
    assert_eq!(fresh.get(&key(1)).unwrap(), None);
    assert!(fresh.set(&key(1), &value(1, 9, 500)).unwrap());
    assert_eq!(fresh.get(&key(1)).unwrap(), Some(value(1, 9, 500)));
}

/// A crash (no saved index): the next start on the used device is empty, and rewriting the
/// same buckets and sets does not bring objects of the earlier life back. (Kangaroo's KSet
/// held an older copy of a key whose newer copy was only in KLog's DRAM.)
#[test]
fn a_cold_start_after_a_crash_never_serves_old_objects() {
    for s in &SUBJECTS[..STANDALONE] {
        let (_d, dev) = device(64, 0.25);
        let mut e = (s.build)(&dev);
        for round in 1..=3 {
            for k in 0..300 {
                e.set(&key(k), &value(k, round, 120)).unwrap();
            }
        }
        drop(e); // the crash: nothing saved
        let mut e = (s.build)(&dev);
        for k in 0..300 {
            assert_eq!(
                e.get(&key(k)).unwrap(),
                None,
                "{}: key {k} survived a cold start",
                s.name
            );
        }
        // New keys into the same buckets and sets.
        for k in 1000..1600 {
            e.set(&key(k), &value(k, 1, 120)).unwrap();
        }
        for k in 0..300 {
            assert_eq!(
                e.get(&key(k)).unwrap(),
                None,
                "{}: key {k} came back",
                s.name
            );
        }
        assert!(e.stats().objects <= 600, "{}: {:?}", s.name, e.stats());
    }
}

const MIB: u64 = 1 << 20;

fn open_file(path: &std::path::Path) -> SharedDevice {
    share(
        UringDevice::open(
            path,
            UringConfig {
                create_size: Some(32 * MIB),
                fdp: FdpMode::Fallback { handles: 3 },
                ..UringConfig::default()
            },
        )
        .unwrap(),
    )
}

fn file_loc(dev: &SharedDevice) -> LocConfig {
    let mut c = LocConfig::new(span(dev, 0, 8 * MIB), PlacementHandle(0));
    c.region_bytes = MIB;
    c
}

fn file_kangaroo(dev: &SharedDevice) -> KangarooConfig {
    kangaroo_config(span(dev, 8 * MIB, 8 * MIB), 1.0)
}

fn file_hybrid(dev: &SharedDevice) -> HybridConfig {
    let mut c = hybrid_config(dev, 16 * MIB, kangaroo_factory(1.0));
    c.span = span(dev, 16 * MIB, 16 * MIB);
    c.loc = LocConfig::new(c.span.clone(), PlacementHandle(0));
    c.loc.region_bytes = MIB;
    c.dram_bytes = 256 << 10;
    c
}

/// On a real file through io_uring: the log, Kangaroo and a hybrid partition save their
/// indexes through `IndexFile`, the device is closed and opened again, and they come back
/// warm; bytes flipped in the file meanwhile read as misses; the index is used once, so the
/// start after that (as after a crash) is cold.
#[test]
fn warm_restart_on_a_file_through_io_uring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.dat");
    let files = ["loc", "kangaroo", "hybrid"].map(|n| IndexFile::new(dir.path().join(n)));
    let large = |k: u32| value(k, 1, 5000);
    let small = |k: u32| value(k, 1, 200);
    let (mut kg_before, mut h_before) = (0, 0);
    {
        let dev = open_file(&path);
        let mut log = Loc::new(file_loc(&dev)).unwrap();
        let mut kg = Kangaroo::new(file_kangaroo(&dev)).unwrap();
        let h = Hybrid::new(file_hybrid(&dev)).unwrap();
        for k in 0..1200 {
            assert!(log.set(&key(k), &large(k)).unwrap());
            assert!(kg.set(&key(k), &small(k)).unwrap());
            let v = if k % 2 == 0 { small(k) } else { large(k) };
            assert!(h.set(&key(k), &v).unwrap());
        }
        for k in 0..1200 {
            kg_before += usize::from(kg.get(&key(k)).unwrap().is_some());
            h_before += usize::from(h.get(&key(k)).unwrap().is_some());
        }
        files[0].save(|w| log.save(w)).unwrap();
        files[1].save(|w| kg.save(w)).unwrap();
        files[2].save(|w| h.save(w)).unwrap();
    }
    // Damage the first log region in the file while the cache is down.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    for at in (0..MIB).step_by(512) {
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, at + 100).unwrap();
        file.write_all_at(&[b[0] ^ 0xff], at + 100).unwrap();
    }
    file.sync_all().unwrap();

    let dev = open_file(&path);
    let take = |f: &IndexFile| f.take().unwrap().expect("saved at shutdown");
    let mut log = Loc::restore(file_loc(&dev), &mut &take(&files[0])[..]).unwrap();
    let mut kg = Kangaroo::restore(file_kangaroo(&dev), &mut &take(&files[1])[..]).unwrap();
    let h = Hybrid::restore(file_hybrid(&dev), &mut &take(&files[2])[..]).unwrap();
    let (mut log_hits, mut kg_hits, mut h_hits) = (0, 0, 0);
    for k in 0..1200 {
        if let Some(v) = log.get(&key(k)).unwrap() {
            assert_eq!(v, large(k), "log key {k}");
            log_hits += 1;
        }
        if let Some(v) = kg.get(&key(k)).unwrap() {
            assert_eq!(v, small(k), "kangaroo key {k}");
            kg_hits += 1;
        }
        if let Some(v) = h.get(&key(k)).unwrap() {
            assert_eq!(
                v,
                if k % 2 == 0 { small(k) } else { large(k) },
                "hybrid key {k}"
            );
            h_hits += 1;
        }
    }
    // The log's 8 regions of 1 MiB hold the last ~1,450 objects: all 1,200, but the ~200
    // of the damaged first region miss and are counted.
    assert!((900..1050).contains(&log_hits), "{log_hits} log hits");
    assert!(log.stats().corrupt_reads >= 150, "{:?}", log.stats());
    assert!(
        kg_before >= 300,
        "{kg_before} Kangaroo hits before the restart"
    );
    assert_eq!(kg_hits, kg_before, "Kangaroo comes back as it was");
    // The hybrid's save writes its DRAM's objects into Kangaroo, whose flushes may drop a few.
    assert!(
        h_hits * 10 >= h_before * 9,
        "{h_hits} hybrid hits, {h_before} before"
    );
    // Used once: a crash from here on finds no index and starts cold.
    assert!(files.iter().all(|f| f.take().unwrap().is_none()));
}

/// FairyWREN after FwLog has reclaimed units and FwSets has collected garbage: the restored
/// engine reads exactly what the saved one did and keeps working; a damaged or truncated
/// index is refused, and the cold engine built instead reads nothing of the earlier life.
#[test]
fn fairywren_comes_back_warm_after_reclaims_and_a_bad_index_starts_empty() {
    let (_d, dev) = device(64, 0.25);
    let cfg = || fairywren_config(span(&dev, 0, 16 * KIB64));
    let mut fw = FairyWren::new(cfg()).unwrap();
    for round in 1..=12 {
        for k in 0..2000 {
            fw.set(&key(k), &value(k, round, 100 + k as usize % 200))
                .unwrap();
        }
    }
    let f = fw.fairywren_stats();
    assert!(
        f.log_eu_erases > 0 && f.set_eu_erases > 0,
        "the run reclaims FwLog and FwSets units: {f:?}"
    );
    let before: Vec<_> = (0..2000).map(|k| fw.get(&key(k)).unwrap()).collect();
    let stored = before.iter().flatten().count();
    assert!(stored >= 500, "{stored} of 2000 objects stored");
    let objects = fw.stats().objects;
    let index = save(&fw);
    drop(fw);

    let mut warm = FairyWren::restore(cfg(), &mut &index[..]).unwrap();
    assert_eq!(warm.stats().objects, objects);
    let after: Vec<_> = (0..2000).map(|k| warm.get(&key(k)).unwrap()).collect();
    assert!(before == after, "the restored FairyWREN reads differently");
    // It goes on as an engine: new versions replace the restored ones.
    for k in 0..2000 {
        warm.set(&key(k), &value(k, 99, 150)).unwrap();
    }
    for k in 0..2000 {
        if let Some(v) = warm.get(&key(k)).unwrap() {
            assert_eq!(v, value(k, 99, 150), "key {k} read an older value");
        }
    }
    drop(warm);

    let err = |r: lachesis_cache::Result<FairyWren>| r.err().expect("refused").to_string();
    let mut damaged = index.clone();
    damaged[index.len() / 2] ^= 0x10;
    assert!(err(FairyWren::restore(cfg(), &mut &damaged[..])).contains("checksum"));
    let e = err(FairyWren::restore(cfg(), &mut &index[..index.len() - 100]));
    assert!(e.contains("FairyWREN index refused: truncated"), "{e}");
    let e = err(FairyWren::restore(
        fairywren_config(span(&dev, 0, 32 * KIB64)),
        &mut &index[..],
    ));
    assert!(e.contains("span length was 1048576"), "{e}");
    // Another victim policy would take the restored units in another order: refused by name.
    let mut greedy = cfg();
    greedy.victims = lachesis_cache::fairywren::Victims::Greedy;
    let e = err(FairyWren::restore(greedy, &mut &index[..]));
    assert!(e.contains("FwSets victim policy"), "{e}");
    // Refused, the caller builds the engine cold: nothing of the saved life is read back.
    let mut cold = FairyWren::new(cfg()).unwrap();
    assert!((0..2000).all(|k| cold.get(&key(k)).unwrap().is_none()));
    assert_eq!(cold.stats().objects, 0);
}
