//! The hybrid cache from several threads at once: writers set and delete, readers check that
//! no get returns a value older than the last completed set or delete of its key, while
//! another thread resizes the partition.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use common::*;

const KEYS: u32 = 400;

fn version_of(v: &[u8]) -> u32 {
    u32::from_le_bytes(v[4..8].try_into().unwrap())
}

#[test]
fn readers_never_see_an_older_value_than_the_last_completed_write() {
    let (_d, dev) = device(64, 0.25);
    let h = Arc::new(hybrid(&dev, 48 * 65536, 32 * 65536, 64 << 10));
    // Per key: the version of the last set or delete that returned.
    let committed: Arc<Vec<AtomicU32>> = Arc::new((0..KEYS).map(|_| AtomicU32::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for w in 0..2u32 {
        let (h, committed) = (h.clone(), committed.clone());
        threads.push(std::thread::spawn(move || {
            for i in 1..=6000u32 {
                // Writer w owns the keys with k % 2 == w; versions rise per key.
                let k = (i.wrapping_mul(7919) % (KEYS / 2)) * 2 + w;
                let version = i;
                if i % 10 == 0 {
                    h.delete(&key(k)).unwrap();
                } else {
                    let len = if i % 3 == 0 { 2500 } else { 150 };
                    h.set(&key(k), &value(k, version, len)).unwrap();
                }
                committed[k as usize].store(version, Ordering::SeqCst);
            }
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2u32 {
        let (h, committed, done) = (h.clone(), committed.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let (mut hits, mut i) = (0u64, r);
            while !done.load(Ordering::SeqCst) {
                i = i.wrapping_mul(1_103_515_245).wrapping_add(12345);
                let k = i % KEYS;
                let floor = committed[k as usize].load(Ordering::SeqCst);
                if let Some(v) = h.get(&key(k)).unwrap() {
                    hits += 1;
                    assert_eq!(&v[..4], &k.to_le_bytes(), "key {k}: another key's value");
                    assert!(
                        version_of(&v) >= floor,
                        "key {k}: read version {} after version {floor} completed",
                        version_of(&v)
                    );
                }
            }
            hits
        }));
    }
    {
        let (h, done) = (h.clone(), done.clone());
        threads.push(std::thread::spawn(move || {
            let sizes = [
                (32u64, 64usize << 10),
                (16, 8 << 10),
                (40, 128 << 10),
                (24, 0),
            ];
            let mut n = 0;
            while !done.load(Ordering::SeqCst) && n < 200 {
                let (units, dram) = sizes[n % sizes.len()];
                h.resize(units * 65536, dram).unwrap();
                n += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }));
    }
    let resizer = threads.pop().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    resizer.join().unwrap();
    let hits: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(hits > 100, "readers hit {hits} times");
}
