//! DRAM per object at flash scale (issue 35: Kangaroo and FairyWREN at 10 M and 50 M objects).
//! The engines allocate every structure that grows with the cache when they are built, from
//! the span alone; a fill does not grow them. So the DRAM of a cache sized for 50 M objects can
//! be read from an engine built on a metadata-only simulator (no data: nothing is stored), and
//! divided by the objects a full cache of that size holds (measured by `cachebench
//! --fill-objects` at 10 M: the same pages hold the same objects at any size).
//! `cargo test --release -p lachesis-cache --test dram_scale -- --nocapture` prints the sizes.

mod common;

use lachesis_cache::fairywren::{self, FairyWren, FairyWrenConfig};
use lachesis_cache::kangaroo::{self, Kangaroo, KangarooConfig, Layout, MAX_DEFAULT_SEGMENT_PAGES};
use lachesis_cache::{share, Engine, SharedDevice, Span};
use lachesis_device::nvme::logpage::RuhType;
use lachesis_device::sim::{SimConfig, SimSsd};
use lachesis_device::PlacementHandle;

/// `mib` MiB of a metadata-only device with 1 MiB reclaim units (cachebench's default, so
/// FairyWREN's erase units are the same as in its runs).
fn span(mib: u32) -> Span {
    let sim = SimSsd::new(SimConfig {
        pages_per_erase_block: 256,
        erase_blocks_per_ru: 1,
        rus_per_group: mib + mib / 4 + 8,
        overprovisioning: 0.2,
        handles: vec![RuhType::InitiallyIsolated; 3],
        ..SimConfig::default()
    })
    .unwrap();
    let device: SharedDevice = share(sim);
    Span {
        device,
        offset: 0,
        len: u64::from(mib) << 20,
    }
}

fn kangaroo_dram(mib: u32) -> kangaroo::DramBreakdown {
    let c = KangarooConfig::new(span(mib), PlacementHandle(0), PlacementHandle(1));
    Kangaroo::new(c.fit_partitions()).unwrap().dram()
}

fn fairywren_dram(mib: u32) -> fairywren::DramBreakdown {
    let h = PlacementHandle;
    let c = FairyWrenConfig::new(span(mib), h(0), h(1), h(2));
    FairyWren::new(c).unwrap().dram()
}

/// `big` is within 1% of `factor` times `small` (sets, slots and units round per partition).
fn scales(what: &str, small: usize, big: usize, factor: f64) {
    let ratio = big as f64 / small as f64;
    assert!(
        (ratio / factor - 1.0).abs() < 0.01,
        "{what}: {small} -> {big} is {ratio:.4}x, not {factor}x"
    );
}

/// Flash of the order of the 10 M-object runs (2,400 MiB Kangaroo, 3,200 MiB FairyWREN), and
/// five times it (docs/benchmarks/fairywren.md, "DRAM per object at 10 M and 50 M objects").
const SMALL_MIB: u32 = 2_200;
const BIG_MIB: u32 = 5 * SMALL_MIB;

/// Each structure of `big` is `factor` times that of `small`, the fixed buffers the same.
fn scale<const N: usize>(small: [(&str, u64); N], big: [(&str, u64); N], factor: f64) {
    for ((what, a), (_, b)) in small.into_iter().zip(big) {
        if what == "dram_buffers" {
            assert_eq!(a, b, "{what}: fixed, not per object");
        } else {
            scales(what, a as usize, b as usize, factor);
        }
    }
}

#[test]
fn structures_grow_with_the_flash_and_buffers_do_not() {
    let (small, big) = (SMALL_MIB, BIG_MIB);
    let factor = f64::from(big) / f64::from(small);
    let (k1, k5) = (kangaroo_dram(small), kangaroo_dram(big));
    println!("kangaroo {small} MiB: {k1:?}\nkangaroo {big} MiB: {k5:?}");
    scale(k1.named(), k5.named(), factor);
    let (f1, f5) = (fairywren_dram(small), fairywren_dram(big));
    println!("fairywren {small} MiB: {f1:?}\nfairywren {big} MiB: {f5:?}");
    scale(f1.named(), f5.named(), factor);
}

/// Every KLog partition buffers one segment: the default segment is an eighth of a partition's
/// log up to the cap, so the buffers stay a fixed 2 MiB at flash scale.
#[test]
fn default_segments_are_an_eighth_of_a_partition_up_to_the_cap() {
    let config = |mib| KangarooConfig::new(span(mib), PlacementHandle(0), PlacementHandle(1));
    // 64 MiB: 5% over 64 partitions is 12 pages each, segments of 1 page (as before the cap).
    let small = Layout::new(&config(64).fit_partitions()).unwrap();
    assert_eq!((small.partitions, small.pages_per_segment), (64, 1));
    // 2 GiB: an eighth would be 51 pages; the cap keeps 8.
    let big = Layout::new(&config(2048).fit_partitions()).unwrap();
    assert_eq!(big.partitions, 64);
    assert_eq!(u64::from(big.pages_per_segment), MAX_DEFAULT_SEGMENT_PAGES);
    assert_eq!(big.segments_per_partition, 409 / 8);
    let dram = Kangaroo::new(config(2048).fit_partitions()).unwrap().dram();
    assert_eq!(dram.buffers, 64 * 8 * 4096);
}

/// A fill does not grow what the engine allocated when it was built: the per-object structures
/// of a full cache are those of a new one.
#[test]
fn a_fill_leaves_the_structures_as_built() {
    let (_, dev) = common::device(16 * 20, 0.25);
    let sp = |len| Span {
        device: dev.clone(),
        offset: 0,
        len,
    };
    let mut k = Kangaroo::new(
        KangarooConfig::new(sp(16 << 20), PlacementHandle(0), PlacementHandle(1)).fit_partitions(),
    )
    .unwrap();
    let built = k.dram();
    let value = [7u8; 200];
    for i in 0..400_000u64 {
        k.set(&i.to_le_bytes(), &value).unwrap();
    }
    assert!(k.stats().objects > 40_000, "{:?}", k.stats());
    assert_eq!(
        k.dram().per_object_structures(),
        built.per_object_structures()
    );

    let h = PlacementHandle;
    let mut f = FairyWren::new(FairyWrenConfig::new(sp(16 << 20), h(0), h(1), h(2))).unwrap();
    let built = f.dram();
    for i in 0..400_000u64 {
        f.set(&i.to_le_bytes(), &value).unwrap();
    }
    assert!(f.stats().objects > 30_000, "{:?}", f.stats());
    let filled = f.dram();
    // The store's queues of free and sealed units grow to hold every unit (built empty):
    // at most 4 bytes per erase unit more.
    let units = (16 << 20) / f.layout().eu_bytes() as usize;
    assert!(
        filled.store_owners <= built.store_owners + 4 * units,
        "{built:?} -> {filled:?}"
    );
    assert_eq!(
        fairywren::DramBreakdown {
            store_owners: built.store_owners,
            buffers: built.buffers,
            ..filled
        },
        built
    );
}
