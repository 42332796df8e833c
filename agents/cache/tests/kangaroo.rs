//! Kangaroo correctness on the simulated FDP SSD (data kept in memory by `DataSim`):
//! a randomized get/set/delete model check against a reference map, and damaged pages
//! reading as misses.

use std::collections::HashMap;

use lachesis_cache::kangaroo::{FlushMode, Kangaroo, KangarooConfig, KangarooStats};
use lachesis_cache::{dev, share, DataSim, Engine, Span};
use lachesis_device::sim::SimConfig;
use lachesis_device::PlacementHandle;

/// A simulated SSD of about `mib` MiB of logical space: 64 KiB reclaim units, 7%
/// overprovisioning but at least the spare units the simulator needs for its 8 handles.
pub fn span(mib: u32) -> Span {
    let logical = mib * 16;
    let spare = (logical * 7).div_ceil(100).max(16);
    let sim = DataSim::new(SimConfig {
        pages_per_erase_block: 16,
        erase_blocks_per_ru: 1,
        rus_per_group: logical + spare,
        overprovisioning: f64::from(spare) / f64::from(logical),
        ..SimConfig::default()
    })
    .unwrap();
    let len = lachesis_device::BlockDevice::geometry(&sim).capacity_bytes / 4096 * 4096;
    assert!(len >= u64::from(mib) << 19, "{len}");
    Span {
        device: share(sim),
        offset: 0,
        len,
    }
}

fn config(span: Span) -> KangarooConfig {
    KangarooConfig::new(span, PlacementHandle(1), PlacementHandle(2))
}

/// Reproducible randomness without pulling the engine's generator into the test.
struct Rng(lachesis_mrc::hash::SplitMix64);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(lachesis_mrc::hash::SplitMix64(seed))
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }
}

/// Random operations against a reference map: a get returns either a miss or exactly the
/// value last stored, never an older one or a deleted one.
fn model_check(mut cfg: KangarooConfig, seed: u64, ops: usize, keys: u64) -> (KangarooStats, u64) {
    let mode = cfg.flush;
    cfg.seed = seed;
    let mut kg = Kangaroo::new(cfg).unwrap();
    let mut reference: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut rng = Rng::new(seed);
    let (mut hits, mut gets) = (0u64, 0u64);
    for op in 0..ops {
        let key = format!("key-{}", rng.below(keys)).into_bytes();
        match rng.below(10) {
            0..=5 => {
                let len = 1 + rng.below(600) as usize;
                let value: Vec<u8> = (0..len).map(|i| (op + i) as u8).collect();
                if kg.set(&key, &value).unwrap() {
                    reference.insert(key, value);
                } else {
                    reference.remove(&key);
                }
            }
            6..=8 => {
                gets += 1;
                let got = kg.get(&key).unwrap();
                if let Some(v) = &got {
                    hits += 1;
                    assert_eq!(
                        Some(v),
                        reference.get(&key),
                        "op {op} ({mode:?}, seed {seed}): stale or foreign value for {}",
                        String::from_utf8_lossy(&key)
                    );
                }
            }
            _ => {
                let was = kg.delete(&key).unwrap();
                let expected = reference.remove(&key).is_some();
                // A cache may have dropped the key already, but cannot hold one it was not given.
                assert!(
                    !was || expected,
                    "op {op}: deleted a key that was never stored"
                );
                assert_eq!(
                    kg.get(&key).unwrap(),
                    None,
                    "op {op}: deleted key still readable"
                );
            }
        }
    }
    // Every key the cache still returns has its latest value.
    for (k, v) in &reference {
        if let Some(got) = kg.get(k).unwrap() {
            assert_eq!(&got, v);
        }
    }
    let ks = kg.kangaroo_stats();
    let st = kg.stats();
    println!(
        "{mode:?} seed {seed}: hit ratio {:.3}, {ks:?}, evictions {}",
        hits as f64 / gets as f64,
        st.evictions
    );
    assert!(
        hits > gets / 20,
        "too few hits ({hits}/{gets}) for the check to mean anything"
    );
    assert!(
        ks.segment_flushes + ks.whole_log_flushes > 10,
        "KLog never flushed: {ks:?}"
    );
    assert!(ks.kset_set_writes > 1_000, "{ks:?}");
    assert_eq!(st.corrupt_reads, 0);
    (ks, st.evictions)
}

/// The cache is much smaller than the keys' data, so objects are dropped by the threshold and
/// evicted from sets all along.
fn check_with_evictions(cfg: KangarooConfig, seed: u64) {
    let (ks, evictions) = model_check(cfg, seed, 40_000, 3_000);
    assert!(
        ks.groups_admitted > 10 && ks.objects_dropped > 100,
        "{ks:?}"
    );
    assert!(evictions > 1_000, "KSet hardly evicted: {evictions}");
}

fn small(flush: FlushMode, readmit: bool) -> KangarooConfig {
    let mut c = config(span(2));
    c.partitions = 4;
    c.segment_bytes = 4096;
    c.flush = flush;
    c.readmit_hits = readmit;
    c.expected_object_bytes = 300;
    c
}

#[test]
fn model_check_one_segment_flushing() {
    for seed in 1..=3 {
        check_with_evictions(small(FlushMode::OneSegment, true), seed);
    }
}

#[test]
fn model_check_whole_log_flushing() {
    check_with_evictions(small(FlushMode::WholeLog, false), 11);
    check_with_evictions(small(FlushMode::WholeLog, true), 12);
}

/// Few keys, many rewrites: objects are replaced while still in the segment buffer, on flash
/// in KLog, and in KSet.
#[test]
fn model_check_hot_keys() {
    let mut c = small(FlushMode::OneSegment, true);
    c.threshold = 1;
    let (ks, _) = model_check(c, 21, 30_000, 400);
    assert!(ks.objects_moved > 1_000, "{ks:?}");
}

#[test]
fn a_damaged_set_reads_as_a_miss() {
    let mut c = config(span(2));
    c.partitions = 4;
    c.segment_bytes = 4096;
    c.threshold = 1;
    c.admit_probability = 1.0;
    let device = c.span.device.clone();
    let mut kg = Kangaroo::new(c).unwrap();
    assert!(kg.set(b"victim", b"precious value").unwrap());
    kg.flush_klog().unwrap();
    assert_eq!(kg.klog_objects(), 0, "flush_klog moved everything to KSet");
    assert_eq!(
        kg.get(b"victim").unwrap().as_deref(),
        Some(&b"precious value"[..])
    );

    let off = kg.set_offset(b"victim");
    let mut page = vec![0u8; 4096];
    dev::lock(&device).read(off, &mut page).unwrap();
    let at = page.windows(5).position(|w| w == b"value").unwrap();
    page[at] ^= 0x20;
    dev::lock(&device)
        .write(off, &page, PlacementHandle(2))
        .unwrap();

    assert_eq!(kg.get(b"victim").unwrap(), None);
    assert_eq!(kg.stats().corrupt_reads, 1);
    // The damage is repaired by the next write of that set.
    assert!(kg.set(b"victim", b"new value").unwrap());
    kg.flush_klog().unwrap();
    assert_eq!(
        kg.get(b"victim").unwrap().as_deref(),
        Some(&b"new value"[..])
    );
}

#[test]
fn a_damaged_klog_page_reads_as_a_miss_not_as_an_older_copy() {
    let mut c = config(span(2));
    c.partitions = 1;
    c.segment_bytes = 4096;
    c.threshold = 1;
    c.admit_probability = 1.0;
    let device = c.span.device.clone();
    let mut kg = Kangaroo::new(c).unwrap();
    // An old copy in KSet, the new one in KLog's first page on flash.
    assert!(kg.set(b"k", b"old").unwrap());
    kg.flush_klog().unwrap();
    let first_page = |kg: &Kangaroo| kg.kangaroo_stats().klog_segment_writes;
    let before = first_page(&kg);
    assert!(kg.set(b"k", b"new").unwrap());
    let mut i = 0;
    while first_page(&kg) == before {
        assert!(kg
            .set(format!("filler-{i}").as_bytes(), &[7u8; 300])
            .unwrap());
        i += 1;
    }
    assert_eq!(kg.get(b"k").unwrap().as_deref(), Some(&b"new"[..]));
    // Segment slots rotate; find the page on flash that holds the new copy.
    let mut page = vec![0u8; 4096];
    let klog_bytes = kg.layout().klog_bytes;
    let off = (0..klog_bytes)
        .step_by(4096)
        .find(|&o| {
            dev::lock(&device).read(o, &mut page).unwrap();
            page.windows(3).any(|w| w == b"new")
        })
        .expect("the new copy is on flash");
    dev::lock(&device).read(off, &mut page).unwrap();
    let at = page.windows(3).position(|w| w == b"new").unwrap();
    page[at] ^= 1;
    dev::lock(&device)
        .write(off, &page, PlacementHandle(1))
        .unwrap();
    assert_eq!(
        kg.get(b"k").unwrap(),
        None,
        "a damaged page must not expose the old copy"
    );
    assert!(kg.stats().corrupt_reads >= 1);
    assert!(kg.set(b"k", b"newer").unwrap());
    assert_eq!(kg.get(b"k").unwrap().as_deref(), Some(&b"newer"[..]));
    kg.flush_klog().unwrap();
    assert_eq!(kg.get(b"k").unwrap().as_deref(), Some(&b"newer"[..]));
}

#[test]
fn bad_configuration_is_an_error_not_a_panic() {
    let mut c = config(span(2));
    // 64 partitions of a 2 MiB span leave each partition less than two segments.
    let err = Kangaroo::new(c.clone())
        .err()
        .expect("too small for 64 partitions")
        .to_string();
    assert!(err.contains("partitions"), "{err}");
    let fitted = c.clone().fit_partitions();
    assert!(fitted.partitions < 64 && fitted.partitions.is_power_of_two());
    Kangaroo::new(fitted).expect("fit_partitions makes the default configuration fit");
    c.partitions = 4;
    c.kset_handle = PlacementHandle(99);
    let err = Kangaroo::new(c.clone()).err().unwrap().to_string();
    assert!(err.contains("KSet") && err.contains("99"), "{err}");
    c.kset_handle = PlacementHandle(2);
    c.log_fraction = 1.5;
    assert!(Kangaroo::new(c.clone())
        .err()
        .unwrap()
        .to_string()
        .contains("log_fraction"));
    c.log_fraction = 0.05;
    c.segment_bytes = 1000;
    assert!(Kangaroo::new(c)
        .err()
        .unwrap()
        .to_string()
        .contains("segment_bytes"));
}

#[test]
fn oversized_objects_are_declined_and_drop_the_old_value() {
    let mut c = config(span(2));
    c.partitions = 4;
    c.admit_probability = 1.0;
    let mut kg = Kangaroo::new(c).unwrap();
    assert!(kg.set(b"k", b"small").unwrap());
    assert!(!kg.set(b"k", &[0u8; 5000]).unwrap());
    assert_eq!(kg.get(b"k").unwrap(), None);
    assert_eq!(kg.stats().rejected_sets, 1);
}

/// Keys that share a set and a KLog tag can only be told apart by reading the page; replacing
/// or deleting one of them must never expose another's older copy.
#[test]
fn model_check_keys_sharing_set_and_tag() {
    let c = small(FlushMode::OneSegment, true);
    let mut kg = Kangaroo::new(c).unwrap();
    let sets = u128::from(kg.layout().sets);
    let locate = |k: &[u8]| {
        let h = lachesis_cache::object::key_hash(k);
        (((u128::from(h) * sets) >> 64) as u32, h & 0x1ff)
    };
    let target = locate(b"twin-0");
    let twins: Vec<Vec<u8>> = (0..)
        .map(|i| format!("twin-{i}").into_bytes())
        .filter(|k| locate(k) == target)
        .take(6)
        .collect();
    let mut reference: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut rng = Rng::new(99);
    let mut twin_hits = 0;
    for op in 0..60_000usize {
        let key = if rng.below(3) == 0 {
            twins[rng.below(twins.len() as u64) as usize].clone()
        } else {
            format!("filler-{}", rng.below(2_000)).into_bytes()
        };
        match rng.below(10) {
            0..=4 => {
                let value = format!("{op}-{}", "x".repeat(rng.below(300) as usize)).into_bytes();
                if kg.set(&key, &value).unwrap() {
                    reference.insert(key, value);
                } else {
                    reference.remove(&key);
                }
            }
            5..=8 => {
                if let Some(v) = kg.get(&key).unwrap() {
                    assert_eq!(Some(&v), reference.get(&key), "op {op}: stale value");
                    twin_hits += usize::from(twins.contains(&key));
                }
            }
            _ => {
                kg.delete(&key).unwrap();
                reference.remove(&key);
                assert_eq!(kg.get(&key).unwrap(), None);
            }
        }
    }
    assert!(twin_hits > 100, "{twin_hits}");
    assert!(
        kg.kangaroo_stats().collateral_evictions > 0,
        "the same-page, same-tag case never came up"
    );
}

/// Passes IO through to the simulator and notes which handle each write used.
struct Recorder {
    inner: DataSim,
    writes: std::sync::Arc<std::sync::Mutex<Vec<(u64, u16)>>>,
    trims: std::sync::Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
}

impl lachesis_device::BlockDevice for Recorder {
    fn geometry(&self) -> &lachesis_device::Geometry {
        self.inner.geometry()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
        self.inner.read(offset, buf)
    }
    fn write(
        &mut self,
        offset: u64,
        buf: &[u8],
        handle: PlacementHandle,
    ) -> lachesis_device::Result<()> {
        self.writes.lock().unwrap().push((offset, handle.0));
        self.inner.write(offset, buf, handle)
    }
    fn trim(&mut self, offset: u64, len: u64) -> lachesis_device::Result<()> {
        self.trims.lock().unwrap().push((offset, len));
        self.inner.trim(offset, len)
    }
    fn flush(&mut self) -> lachesis_device::Result<()> {
        self.inner.flush()
    }
}

/// KLog writes whole segments with its handle and trims the segments it empties; KSet writes
/// single sets with the other handle.
#[test]
fn klog_and_kset_write_with_their_own_handles() {
    let inner = DataSim::new(SimConfig {
        pages_per_erase_block: 16,
        erase_blocks_per_ru: 1,
        rus_per_group: 64 + 16,
        overprovisioning: 0.25,
        ..SimConfig::default()
    })
    .unwrap();
    let writes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let trims = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let len = lachesis_device::BlockDevice::geometry(&inner).capacity_bytes / 4096 * 4096;
    let device = share(Recorder {
        inner,
        writes: writes.clone(),
        trims: trims.clone(),
    });
    let mut c = config(Span {
        device,
        offset: 0,
        len,
    });
    c.partitions = 4;
    c.segment_bytes = 8192;
    let mut kg = Kangaroo::new(c).unwrap();
    for i in 0..20_000 {
        kg.set(format!("k{i}").as_bytes(), &[3u8; 150]).unwrap();
    }
    let klog_bytes = kg.layout().klog_bytes;
    let writes = writes.lock().unwrap();
    let (klog, kset): (Vec<_>, Vec<_>) = writes.iter().partition(|(o, _)| *o < klog_bytes);
    assert!(!klog.is_empty() && !kset.is_empty());
    assert!(
        klog.iter().all(|&(o, h)| h == 1 && o % 8192 == 0),
        "KLog writes whole segments with handle 1"
    );
    assert!(
        kset.iter().all(|&(_, h)| h == 2),
        "KSet writes with handle 2"
    );
    let trims = trims.lock().unwrap();
    assert!(!trims.is_empty() && trims.iter().all(|&(o, l)| o < klog_bytes && l == 8192));
    let ks = kg.kangaroo_stats();
    assert_eq!(ks.klog_segment_writes, klog.len() as u64);
    assert_eq!(ks.kset_set_writes, kset.len() as u64);
    assert_eq!(
        kg.stats().flash_bytes_written,
        klog.len() as u64 * 8192 + kset.len() as u64 * 4096
    );
}

/// Random operations while random bytes of the span are damaged now and then: a get may miss
/// more, but never returns anything but the value last stored.
#[test]
fn model_check_with_random_damage() {
    let mut noticed = 0;
    for seed in 31..=46u64 {
        let flush = if seed % 2 == 0 {
            FlushMode::WholeLog
        } else {
            FlushMode::OneSegment
        };
        let mut c = small(flush, true);
        c.seed = seed;
        let device = c.span.device.clone();
        let len = c.span.len;
        let mut kg = Kangaroo::new(c).unwrap();
        let mut reference: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut rng = Rng::new(seed);
        let mut page = vec![0u8; 4096];
        for op in 0..40_000usize {
            if op % 500 == 0 {
                let off = rng.below(len / 4096) * 4096;
                let mut d = dev::lock(&device);
                d.read(off, &mut page).unwrap();
                page[rng.below(4096) as usize] ^= 1 << rng.below(8);
                d.write(off, &page, PlacementHandle(3)).unwrap();
            }
            let key = format!("key-{}", rng.below(3_000)).into_bytes();
            match rng.below(10) {
                0..=5 => {
                    let value = vec![op as u8; 1 + rng.below(500) as usize];
                    if kg.set(&key, &value).unwrap() {
                        reference.insert(key, value);
                    } else {
                        reference.remove(&key);
                    }
                }
                6..=8 => {
                    if let Some(v) = kg.get(&key).unwrap() {
                        assert_eq!(
                            Some(&v),
                            reference.get(&key),
                            "op {op} ({flush:?}): wrong value"
                        );
                    }
                }
                _ => {
                    kg.delete(&key).unwrap();
                    reference.remove(&key);
                    assert_eq!(kg.get(&key).unwrap(), None);
                }
            }
        }
        noticed += kg.stats().corrupt_reads;
    }
    assert!(noticed > 0, "the damage was never noticed");
}
