//! `PendingRead::read_together`: hits planned together are read together, objects that lie
//! one after another on the device in one IO, and each gets exactly the bytes its own read
//! would have (then `Engine::finish` answers its value).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use lachesis_cache::{DataSim, Engine, Loc, LocConfig, Lookup, PendingRead, SharedDevice, Span};
use lachesis_device::{BlockDevice, ConcurrentRead, Geometry, PlacementHandle};

/// The simulated SSD, counting the reads done without its lock.
struct Counting {
    inner: DataSim,
    reads: Arc<AtomicU64>,
}

struct CountingReads {
    inner: Arc<dyn ConcurrentRead>,
    reads: Arc<AtomicU64>,
}

impl ConcurrentRead for CountingReads {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_at(offset, buf)
    }
}

impl BlockDevice for Counting {
    fn geometry(&self) -> &Geometry {
        self.inner.geometry()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
        self.inner.read(offset, buf)
    }
    fn write(&mut self, o: u64, b: &[u8], h: PlacementHandle) -> lachesis_device::Result<()> {
        self.inner.write(o, b, h)
    }
    fn trim(&mut self, offset: u64, len: u64) -> lachesis_device::Result<()> {
        self.inner.trim(offset, len)
    }
    fn flush(&mut self) -> lachesis_device::Result<()> {
        self.inner.flush()
    }
    fn concurrent_reads(&self) -> Option<Arc<dyn ConcurrentRead>> {
        Some(Arc::new(CountingReads {
            inner: self.inner.concurrent_reads()?,
            reads: self.reads.clone(),
        }))
    }
}

fn planned(e: &mut Loc, k: u32) -> PendingRead {
    match e.lookup(&key(k)).unwrap() {
        Lookup::Read(r) => r,
        Lookup::Done(v) => panic!("key {k} answered under the lock: {v:?}"),
    }
}

#[test]
fn objects_side_by_side_are_read_in_one_io_and_each_gets_its_own_bytes() {
    let reads = Arc::new(AtomicU64::new(0));
    let dev: SharedDevice = Arc::new(Mutex::new(Counting {
        inner: DataSim::new(sim_config(64, 0.25)).unwrap(),
        reads: reads.clone(),
    }));
    let span = Span {
        device: dev,
        offset: 0,
        len: 4 * 65536,
    };
    let mut e = Loc::new(LocConfig::new(span, PlacementHandle(0))).unwrap();
    // Objects of several sizes, one after another in the log; the first region is sealed
    // long before the last key, so keys 0-9 are read from the device.
    let len = |k: u32| 1000 + (k as usize * 397) % 3000;
    for k in 0..40 {
        e.set(&key(k), &value(k, 1, len(k))).unwrap();
    }
    // 2-5 lie side by side; 8 is apart from them; 3 again (one object in two runs).
    let keys = [2, 3, 4, 5, 8, 3];
    let plans: Vec<PendingRead> = keys.iter().map(|&k| planned(&mut e, k)).collect();
    let alone: Vec<Vec<u8>> = plans.iter().map(|p| p.read().unwrap()).collect();
    let before = reads.load(Ordering::Relaxed);
    let together = PendingRead::read_together(&plans.iter().collect::<Vec<_>>());
    assert_eq!(
        reads.load(Ordering::Relaxed) - before,
        3,
        "2-5, then 8, then 3"
    );
    for ((k, p), (t, a)) in keys.iter().zip(plans).zip(together.into_iter().zip(alone)) {
        let t = t.unwrap();
        assert!(t == a, "key {k}: the bytes its own read gives");
        assert_eq!(
            e.finish(&key(*k), p, Ok(t)).unwrap(),
            Some(value(*k, 1, len(*k)))
        );
    }
}
