//! Bytes corrupted on the device under an engine read as misses, never as wrong data.

mod common;

use common::*;
use lachesis_cache::object::key_hash;
use lachesis_cache::{dev, Engine, RegionEviction};
use lachesis_device::PlacementHandle;

/// Flips one byte in every `stride` bytes of `[offset, offset + len)` on the device.
fn corrupt(dev: &lachesis_cache::SharedDevice, offset: u64, len: u64, stride: usize) {
    let mut d = dev::lock(dev);
    let mut buf = vec![0; len as usize];
    d.read(offset, &mut buf).unwrap();
    for i in (stride / 2..buf.len()).step_by(stride) {
        buf[i] ^= 0x5a;
    }
    d.write(offset, &buf, PlacementHandle(3)).unwrap();
}

#[test]
fn corrupted_log_region_reads_as_misses() {
    let (_d, dev) = device(64, 0.25);
    let mut e = loc(&dev, 8 * 65536, RegionEviction::Fifo);
    // 300 objects of 1 KiB: regions 0-3 sealed, the rest in the open region.
    for k in 0..300 {
        assert!(e.set(&key(k), &value(k, 1, 1000)).unwrap());
    }
    corrupt(&dev, 0, 65536, 64);
    let (mut misses, mut hits) = (0, 0);
    for k in 0..300 {
        match e.get(&key(k)).unwrap() {
            None => misses += 1,
            Some(v) => {
                assert_eq!(v, value(k, 1, 1000), "key {k}: wrong data after corruption");
                hits += 1;
            }
        }
    }
    // Region 0 held the first 64 KiB / 1020 B ≈ 64 objects; every one has flipped bytes.
    assert!(misses >= 60, "{misses} misses");
    assert!(hits >= 230, "{hits} hits: uncorrupted regions still read");
    assert_eq!(e.stats().corrupt_reads, misses);
    // The index dropped the corrupt objects: asking again costs no flash read.
    assert_eq!(e.get(&key(0)).unwrap(), None);
}

#[test]
fn corrupted_bucket_reads_as_misses() {
    let (_d, dev) = device(64, 0.25);
    let buckets = 32u64;
    let mut e = set_assoc(&dev, buckets * 4096);
    for k in 0..100 {
        assert!(e.set(&key(k), &value(k, 1, 150)).unwrap());
    }
    let victim = key_hash(&key(7)) % buckets;
    corrupt(&dev, victim * 4096, 4096, 97);
    let mut lost = 0;
    for k in 0..100 {
        let in_victim = key_hash(&key(k)) % buckets == victim;
        match e.get(&key(k)).unwrap() {
            None => {
                assert!(in_victim, "key {k} lost but its bucket was intact");
                lost += 1;
            }
            Some(v) => {
                assert!(!in_victim || v == value(k, 1, 150));
                assert_eq!(v, value(k, 1, 150), "key {k}: wrong data");
            }
        }
    }
    assert!(lost >= 1, "the corrupted bucket's keys miss");
    assert!(e.stats().corrupt_reads >= 1);
    // A set into the bucket rewrites it cleanly: the key is readable again.
    assert!(e.set(&key(7), &value(7, 2, 150)).unwrap());
    assert_eq!(e.get(&key(7)).unwrap(), Some(value(7, 2, 150)));
}

#[test]
fn corrupted_hybrid_partition_reads_as_misses() {
    let (_d, dev) = device(64, 0.25);
    let h = hybrid(&dev, 48 * 65536, 32 * 65536, 0);
    let size = |k: u32| if k.is_multiple_of(2) { 300 } else { 3000 };
    for k in 0..200 {
        assert!(h.set(&key(k), &value(k, 1, size(k))).unwrap());
    }
    // Corrupt the whole partition: the log's regions and the small engine's buckets.
    corrupt(&dev, 0, 48 * 65536, 61);
    for k in 0..200 {
        if let Some(v) = h.get(&key(k)).unwrap() {
            assert_eq!(v, value(k, 1, size(k)), "key {k}: wrong data");
        }
    }
    assert!(h.stats().corrupt_reads > 0);
}
