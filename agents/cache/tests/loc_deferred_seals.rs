//! `LocConfig::defer_seals`: a full region is written by the owner without its lock
//! (`Engine::take_write`, `RegionWrite::write`, `Engine::wrote`). Until then its objects are
//! answered from memory, and every path that could reuse its space (the next seal, a
//! resize, a victim search) completes the write first, taken or not.

mod common;

use common::*;
use lachesis_cache::{Engine, Loc, LocConfig, Lookup, RegionWrite};
use lachesis_device::PlacementHandle;

fn log(regions: u64) -> Loc {
    let (_, dev) = device(64, 0.25);
    let mut c = LocConfig::new(span(&dev, 0, regions * 65536), PlacementHandle(0));
    c.defer_seals = true;
    Loc::new(c).unwrap()
}

/// Sets keys 0, 1, ... until the log hands out a region write: the write, and the keys set.
fn first_write(e: &mut Loc) -> (RegionWrite, u32) {
    let mut k = 0;
    loop {
        e.set(&key(k), &value(k, 1, 3000)).unwrap();
        k += 1;
        if let Some(w) = e.take_write() {
            return (w, k);
        }
    }
}

#[test]
fn a_region_being_written_is_read_from_memory_then_from_the_device() {
    let mut e = log(4);
    let (w, k) = first_write(&mut e);
    assert!(
        e.take_write().is_none(),
        "one write at a time, handed out once"
    );
    // Not yet on the device: every key so far answers from memory, at once.
    for i in 0..k {
        match e.lookup(&key(i)).unwrap() {
            Lookup::Done(v) => assert_eq!(v, Some(value(i, 1, 3000)), "key {i}"),
            Lookup::Read(_) => panic!("key {i} planned a device read of an unwritten region"),
        }
    }
    w.write();
    e.wrote(&w).unwrap();
    // Written: the sealed region's keys are read from the device, with the same bytes.
    let mut from_device = 0;
    for i in 0..k {
        match e.lookup(&key(i)).unwrap() {
            Lookup::Done(v) => assert_eq!(v, Some(value(i, 1, 3000))),
            Lookup::Read(r) => {
                from_device += 1;
                let bytes = r.read();
                assert_eq!(
                    e.finish(&key(i), r, bytes).unwrap(),
                    Some(value(i, 1, 3000))
                );
            }
        }
    }
    assert!(from_device > 0);
}

/// Every key below `n` answers its value or a miss, never other bytes; how many hit.
fn hits_all_right(e: &mut Loc, n: u32) -> u32 {
    let mut hits = 0;
    for k in 0..n {
        if let Some(v) = e.get(&key(k)).unwrap() {
            assert_eq!(v, value(k, 1, 3000), "key {k}");
            hits += 1;
        }
    }
    hits
}

#[test]
fn a_write_nobody_took_is_done_before_the_next_seal_or_a_resize() {
    // Never taken: each next seal writes the previous region under the lock.
    let mut e = log(4);
    for k in 0..200 {
        e.set(&key(k), &value(k, 1, 3000)).unwrap();
    }
    assert!(e.stats().evictions > 0);
    assert!(hits_all_right(&mut e, 200) > 0);
    // Pending and untaken at a shrink to 2 regions: written first, then the log shrinks,
    // and the sealed region (region 0, kept) still answers from the device.
    let mut e = log(4);
    let mut k = 0;
    while e.stats().flash_bytes_written == 0 {
        e.set(&key(k), &value(k, 1, 3000)).unwrap();
        k += 1;
    }
    e.resize(2 * 65536).unwrap();
    assert!(e.take_write().is_none(), "settled by the resize");
    assert!(hits_all_right(&mut e, k) >= k - 1);
}

#[test]
fn the_next_seal_waits_for_a_write_under_way() {
    let mut e = log(4);
    let (w, mut k) = first_write(&mut e);
    let sealed_at = k;
    // The write runs on another thread while this one fills the next region: its seal
    // waits for the write (whichever comes first), and nothing reads an unwritten region.
    std::thread::scope(|s| {
        s.spawn(|| w.write());
        let before = e.stats().flash_bytes_written;
        while e.stats().flash_bytes_written == before {
            e.set(&key(k), &value(k, 1, 3000)).unwrap();
            k += 1;
        }
    });
    // Settled by the second seal already: nothing left to do.
    e.wrote(&w).unwrap();
    assert!(hits_all_right(&mut e, k) >= sealed_at);
}
