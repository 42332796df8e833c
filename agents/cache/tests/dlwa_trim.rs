//! The log deallocates a region as soon as it evicts it, so the device never keeps dead log
//! data. Measured on the simulated FDP SSD at 7% overprovisioning and 100% utilisation:
//!
//! - two logs on two placement handles: DLWA 1 (FIFO regions of one reclaim unit invalidate
//!   whole units, so in this greedy-GC model they stay at 1 even without trimming);
//! - a log next to a set-associative cache (random bucket rewrites, 16% of the space) whose
//!   partition then shrinks to half: with trimming the log's dropped regions become spare space
//!   for the buckets' garbage collection and DLWA falls; without it they stay valid data.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use lachesis_cache::{
    dev, DataSim, Engine, Loc, LocConfig, RegionEviction, SetAssoc, SetAssocConfig, SharedDevice,
};
use lachesis_device::sim::SimConfig;
use lachesis_device::PlacementHandle;

const RU: u64 = 256 << 10;

fn sim(rus: u32) -> (Arc<Mutex<DataSim>>, SharedDevice, u64) {
    let cfg = SimConfig {
        pages_per_erase_block: 64,
        erase_blocks_per_ru: 1,
        ..sim_config(rus, 0.07)
    };
    let data = Arc::new(Mutex::new(DataSim::new(cfg).unwrap()));
    let shared: SharedDevice = data.clone();
    let capacity = dev::lock(&shared).geometry().capacity_bytes;
    (data, shared, capacity)
}

fn dlwa_over(data: &Arc<Mutex<DataSim>>, work: impl FnOnce()) -> f64 {
    let before = data.lock().unwrap().fdp_statistics();
    work();
    let after = data.lock().unwrap().fdp_statistics();
    data.lock().unwrap().sim().check_invariants().unwrap();
    (after.media_bytes_written - before.media_bytes_written) as f64
        / (after.host_bytes_written - before.host_bytes_written) as f64
}

/// Two logs with LRU region eviction on two handles, objects of uneven sizes (so a region
/// seals with an unused tail) and reads that keep some regions recently used, so neighbours
/// are evicted far apart. Returns DLWA over the second lap, and the bytes each log wrote.
fn two_lru_logs_of_uneven_objects() -> (f64, Vec<u64>) {
    let (data, dev, capacity) = sim(300);
    let half = capacity / 2 / RU * RU;
    let mut logs: Vec<Loc> = (0..2)
        .map(|i| {
            let mut c = LocConfig::new(span(&dev, i * half, half), PlacementHandle(i as u16));
            c.eviction = RegionEviction::Lru;
            Loc::new(c).unwrap()
        })
        .collect();
    let len = |k: u32| 3_000 + (k.wrapping_mul(7_919) % 40_000) as usize;
    let per_lap = (2 * half / 23_000) as u32;
    let mut fill = |from: u32, n: u32| {
        for k in from..from + n {
            logs[(k % 2) as usize]
                .set(&key(k), &value(k, 0, len(k)))
                .unwrap();
            // Reads of a few older keys of the same log keep their regions recently used.
            if k % 16 == 0 {
                let old = k - (k.wrapping_mul(2_654_435_761) % (k / 2 + 1)) / 2 * 2;
                logs[(old % 2) as usize].get(&key(old)).unwrap();
            }
        }
    };
    fill(0, 2 * per_lap);
    let d = dlwa_over(&data, || fill(2 * per_lap, 2 * per_lap));
    assert!(
        logs.iter().all(|l| l.stats().evictions > 0),
        "both logs wrapped"
    );
    (
        d,
        logs.iter().map(|l| l.stats().flash_bytes_written).collect(),
    )
}

#[test]
fn regions_are_written_whole_so_lru_eviction_frees_whole_units() {
    let (d, written) = two_lru_logs_of_uneven_objects();
    eprintln!("two LRU logs of uneven objects, 7% OP: DLWA {d:.3}, written {written:?}");
    // Each region write fills its reclaim unit exactly; nothing of another region shares it.
    assert!(written.iter().all(|w| w % RU == 0), "{written:?}");
    // Every unit is deallocated whole when its region goes: GC never copies log data.
    assert!(d <= 1.0 + 1e-9, "DLWA {d:.4}");
}

fn two_logs_dlwa(trim: bool) -> f64 {
    let (data, dev, capacity) = sim(300);
    let half = capacity / 2 / RU * RU;
    let mut logs: Vec<Loc> = (0..2)
        .map(|i| {
            let mut c = LocConfig::new(span(&dev, i * half, half), PlacementHandle(i as u16));
            c.trim = trim;
            Loc::new(c).unwrap()
        })
        .collect();
    let per_lap = (2 * half / 4000) as u32;
    let mut fill = |from: u32, n: u32| {
        for k in from..from + n {
            logs[(k % 2) as usize]
                .set(&key(k), &value(k, 0, 3980))
                .unwrap();
        }
    };
    fill(0, 2 * per_lap);
    let d = dlwa_over(&data, || fill(2 * per_lap, 2 * per_lap));
    assert!(
        logs.iter().all(|l| l.stats().evictions > 0),
        "both logs wrapped"
    );
    d
}

/// Log + buckets on 16% of the space, four bucket writes per log write; after a warm-up the
/// log shrinks to half its regions. Returns DLWA after the shrink.
fn shrunk_log_next_to_buckets_dlwa(trim: bool) -> f64 {
    let (data, dev, capacity) = sim(300);
    let sa_len = (capacity as f64 * 0.16) as u64 / RU * RU;
    let log_len = (capacity - sa_len) / RU * RU;
    let mut c = LocConfig::new(span(&dev, 0, log_len), PlacementHandle(0));
    c.trim = trim;
    let mut log = Loc::new(c).unwrap();
    let mut sa = SetAssoc::new(SetAssocConfig::new(
        span(&dev, log_len, sa_len),
        PlacementHandle(1),
    ))
    .unwrap();
    let small_keys = (sa_len / 60) as u32;
    let mut k = 0u32;
    let mut run = |sets: u64, log: &mut Loc| {
        for _ in 0..sets {
            log.set(&key(k), &value(k, 0, 3980)).unwrap();
            for j in 0..4u32 {
                let s = k
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(j.wrapping_mul(40_503))
                    % small_keys;
                sa.set(&key(1 << 30 | s), &value(s, k, 200)).unwrap();
            }
            k += 1;
        }
    };
    let lap = log_len / 4000;
    run(lap, &mut log);
    log.resize(log_len / 2 / RU * RU).unwrap();
    run(lap / 2, &mut log);
    dlwa_over(&data, || run(lap, &mut log))
}

#[test]
fn trimming_evicted_regions_keeps_dlwa_at_one() {
    let with = two_logs_dlwa(true);
    let without = two_logs_dlwa(false);
    eprintln!("two logs, 7% OP: DLWA {with:.3} with trim, {without:.3} without");
    assert!(with <= 1.02, "with trim: DLWA {with:.3}");

    let with = shrunk_log_next_to_buckets_dlwa(true);
    let without = shrunk_log_next_to_buckets_dlwa(false);
    eprintln!("log shrunk next to buckets, 7% OP: DLWA {with:.3} with trim, {without:.3} without");
    assert!(with <= 1.15, "with trim: DLWA {with:.3}");
    assert!(
        without >= with + 0.3,
        "without trim: DLWA {without:.3} vs {with:.3}"
    );
}
