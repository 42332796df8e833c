//! Behaviour of the simulated FDP SSD beyond DLWA: data survives garbage collection, trims,
//! handle isolation, FDP reporting, and clear errors for bad input.

use std::collections::{HashMap, HashSet};

use lachesis_device::nvme::logpage::{FdpEventType, FdpStats, RuhType};
use lachesis_device::sim::{SimConfig, SimSsd};
use lachesis_device::{BlockDevice, Error, FdpLogs, Placement, PlacementHandle};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

/// 64 reclaim units of 32 pages (two 16-page erase blocks each).
fn small(handles: Vec<RuhType>, backing: Option<std::path::PathBuf>) -> SimSsd {
    SimSsd::new(SimConfig {
        pages_per_erase_block: 16,
        erase_blocks_per_ru: 2,
        rus_per_group: 64,
        overprovisioning: 0.25,
        handles,
        backing_file: backing,
        ..Default::default()
    })
    .unwrap()
}

fn page(tag: u32) -> Vec<u8> {
    let mut p = vec![0u8; 4096];
    for (i, c) in p.chunks_mut(4).enumerate() {
        c.copy_from_slice(&(tag ^ (i as u32).wrapping_mul(0x9e37_79b9)).to_le_bytes());
    }
    p
}

#[test]
fn data_survives_garbage_collection() {
    let dir = tempfile::tempdir().unwrap();
    let mut dev = small(
        vec![RuhType::InitiallyIsolated; 2],
        Some(dir.path().join("flash")),
    );
    let g = dev.geometry().clone();
    assert_eq!(g.placement, Placement::Fdp);
    assert_eq!(g.placement_handles, 2);
    assert_eq!(g.reclaim_unit_bytes, 32 * 4096);
    let pages = dev.logical_pages();
    let mut shadow: HashMap<u64, u32> = HashMap::new();
    let mut rng = SmallRng::seed_from_u64(5);
    for tag in 0..(pages as u32 * 6) {
        let lpn = rng.random_range(0..pages);
        let h = PlacementHandle((lpn % 2) as u16);
        dev.write(lpn * 4096, &page(tag), h).unwrap();
        shadow.insert(lpn, tag);
        if tag % 97 == 0 {
            let victim = rng.random_range(0..pages);
            dev.trim(victim * 4096, 4096).unwrap();
            shadow.remove(&victim);
        }
    }
    let s = dev.stats();
    assert!(s.gc_pages_written > 0 && s.rus_erased > 0, "{s:?}");
    let mut buf = vec![0u8; 4096];
    for lpn in 0..pages {
        dev.read(lpn * 4096, &mut buf).unwrap();
        match shadow.get(&lpn) {
            Some(&tag) => assert!(buf == page(tag), "page {lpn} lost its data"),
            None => assert!(
                buf.iter().all(|&b| b == 0),
                "page {lpn} should read as zeroes"
            ),
        }
    }
    dev.check_invariants().unwrap();
    dev.flush().unwrap();
    // Multi-page IO in one call.
    let two: Vec<u8> = [page(1), page(2)].concat();
    dev.write(8192, &two, PlacementHandle(1)).unwrap();
    let mut back = vec![0u8; 8192];
    dev.read(8192, &mut back).unwrap();
    assert_eq!(back, two);
}

#[test]
fn deallocating_whole_units_makes_reclaim_free() {
    let mut dev = small(vec![RuhType::InitiallyIsolated], None);
    let ppr = u64::from(dev.pages_per_ru());
    let units = dev.logical_pages() / ppr;
    // A log that trims each unit-sized segment before rewriting it never copies a page.
    for lap in 0..5 {
        for u in 0..units {
            if lap > 0 {
                dev.deallocate_pages(u * ppr, ppr).unwrap();
            }
            dev.write_pages(u * ppr, ppr, PlacementHandle(0)).unwrap();
        }
    }
    let s = dev.stats();
    assert!(s.rus_erased > 0);
    assert_eq!(s.gc_pages_written, 0, "{s:?}");
    assert_eq!(s.pages_deallocated, 4 * units * ppr);
    assert_eq!(dev.media_reallocated_events(), 0);
}

#[test]
fn relocation_is_reported_as_media_reallocated_events() {
    let mut dev = small(vec![RuhType::InitiallyIsolated], None);
    let pages = dev.logical_pages();
    let mut rng = SmallRng::seed_from_u64(9);
    for _ in 0..pages * 5 {
        dev.write_page(rng.random_range(0..pages), PlacementHandle(0))
            .unwrap();
    }
    let events = dev.fdp_events().unwrap();
    assert!(!events.is_empty());
    let moved: u64 = events
        .iter()
        .filter(|e| e.kind == FdpEventType::MediaReallocated)
        .map(|e| u64::from(e.reallocated.unwrap().lbas_moved))
        .sum();
    assert!(moved > 0);
    assert!(dev.media_reallocated_events() >= events.len() as u64);
    if dev.media_reallocated_events() == events.len() as u64 {
        assert_eq!(
            moved,
            dev.stats().gc_pages_written,
            "every relocated page is in an event"
        );
    }
    let wear = dev.wear();
    assert!(wear.max >= 1 && wear.mean > 0.0);
}

fn mixed_units(kind: RuhType) -> usize {
    let mut dev = small(vec![kind; 2], None);
    let pages = dev.logical_pages();
    let half = pages / 2;
    // Handle 0 rewrites the low half, handle 1 the high half; GC must relocate both.
    dev.write_pages(0, half, PlacementHandle(0)).unwrap();
    dev.write_pages(half, pages - half, PlacementHandle(1))
        .unwrap();
    let mut rng = SmallRng::seed_from_u64(3);
    for _ in 0..pages * 6 {
        let lpn = rng.random_range(0..pages);
        dev.write_page(lpn, PlacementHandle(u16::from(lpn >= half)))
            .unwrap();
    }
    assert!(dev.stats().gc_pages_written > 0);
    let mut owners: HashMap<u32, HashSet<bool>> = HashMap::new();
    for lpn in 0..pages {
        if let Some(ru) = dev.reclaim_unit_of(lpn) {
            owners.entry(ru).or_default().insert(lpn >= half);
        }
    }
    dev.check_invariants().unwrap();
    owners.values().filter(|s| s.len() > 1).count()
}

#[test]
fn persistently_isolated_handles_never_share_a_unit() {
    assert_eq!(mixed_units(RuhType::PersistentlyIsolated), 0);
    // Initially isolated handles only start apart: GC relocates both into one unit.
    assert!(mixed_units(RuhType::InitiallyIsolated) > 0);
}

#[test]
fn ruh_status_and_configuration_report_the_handles() {
    let mut dev = small(
        vec![RuhType::InitiallyIsolated, RuhType::PersistentlyIsolated],
        None,
    );
    let st = dev.ruh_status().unwrap();
    assert_eq!(st.len(), 2);
    assert!(st.iter().all(|s| s.available_media_writes == 32));
    dev.write_pages(0, 5, PlacementHandle(1)).unwrap();
    let st = dev.ruh_status().unwrap();
    assert_eq!(st[0].available_media_writes, 32);
    assert_eq!(st[1].available_media_writes, 27);
    assert_eq!((st[1].placement_id, st[1].ruh_id), (1, 1));
    let cfg = dev.fdp_configurations().unwrap();
    assert_eq!(
        cfg.configs[0].ruh_types,
        vec![RuhType::InitiallyIsolated, RuhType::PersistentlyIsolated]
    );
    assert_eq!(cfg.configs[0].reclaim_unit_bytes, 32 * 4096);
    // The statistics round-trip through the log page layout.
    let stats = dev.fdp_stats().unwrap();
    assert_eq!(stats.host_bytes_written, 5 * 4096);
    assert_eq!(FdpStats::parse(&stats.encode()).unwrap(), stats);
}

#[test]
fn bad_input_changes_nothing() {
    let mut dev = small(vec![RuhType::InitiallyIsolated; 2], None);
    let cap = dev.geometry().capacity_bytes;
    let p = page(1);
    let before = dev.stats();
    assert!(matches!(
        dev.write(1, &p, PlacementHandle(0)),
        Err(Error::Unaligned { .. })
    ));
    assert!(matches!(
        dev.write(0, &p[..100], PlacementHandle(0)),
        Err(Error::Unaligned { .. })
    ));
    assert!(matches!(
        dev.write(cap, &p, PlacementHandle(0)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write_pages(dev.logical_pages(), 1, PlacementHandle(0)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write_page(u64::MAX, PlacementHandle(0)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.trim(0, cap + 4096),
        Err(Error::OutOfRange { .. })
    ));
    let e = dev.write(0, &p, PlacementHandle(2)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnknownPlacementHandle {
                handle: 2,
                available: 2
            }
        ),
        "{e}"
    );
    assert_eq!(dev.stats(), before);
    let ev = dev.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].kind, FdpEventType::InvalidPlacementId);
    assert_eq!(ev[0].placement_id, Some(2));
}

#[test]
fn a_full_reclaim_group_is_an_error_not_a_panic() {
    // Two groups of 64 units; placement handle h writes to group h / 2. Writing the whole
    // logical space through group 0 cannot fit in its half of the flash.
    let mut dev = SimSsd::new(SimConfig {
        pages_per_erase_block: 16,
        erase_blocks_per_ru: 2,
        rus_per_group: 64,
        reclaim_groups: 2,
        overprovisioning: 0.25,
        handles: vec![RuhType::InitiallyIsolated; 2],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(dev.geometry().placement_handles, 4);
    assert_eq!(dev.geometry().reclaim_groups, 2);
    let pids: Vec<u16> = dev
        .ruh_status()
        .unwrap()
        .iter()
        .map(|s| s.placement_id)
        .collect();
    assert_eq!(
        pids,
        vec![0, 1, 0x8000, 0x8001],
        "group in the PID's upper bit (RGIF 1)"
    );
    let err = dev
        .write_pages(0, dev.logical_pages(), PlacementHandle(0))
        .unwrap_err();
    assert!(matches!(err, Error::ReclaimGroupFull { group: 0 }), "{err}");
    dev.check_invariants().unwrap();
    // The other group still takes writes.
    dev.write_pages(0, 64, PlacementHandle(2)).unwrap();
    dev.check_invariants().unwrap();
}
