//! The qos stage (contract kind `ratelimit`): a tenant's class in its data path's IO
//! scheduler. Each IO waits at the [`Gate`] until the scheduler dispatches it, and holds its
//! slot while the rest of the route runs.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use lachesis_switch::RateLimitConfig;

use super::{Backend, Stage, StageStats};
use crate::qos::classes::params;
use crate::qos::gate::{ClassKey, Gate, Permit};
use crate::qos::mclock::{Params, UnknownClass};

pub struct QosStage {
    config: RateLimitConfig,
    key: ClassKey,
    params: Params,
    gate: Arc<Gate>,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl QosStage {
    /// The stage `config` declares, as a class of `gate`: its parameters are checked here
    /// and take effect in the gate at [`Stage::put_in_force`] (the class is added or its
    /// parameters changed), so a refused change leaves the scheduler as it was.
    pub fn new(config: &RateLimitConfig, gate: Arc<Gate>) -> Result<QosStage, String> {
        let p = params(config).map_err(|e| format!("qos stage {:?}: {e}", config.name))?;
        Ok(QosStage {
            config: config.clone(),
            key: ClassKey::Stage(config.name.clone()),
            params: p,
            gate,
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        })
    }

    /// Waits until the scheduler lets a request of `bytes` of this stage's class go; the slot
    /// it holds while it runs (the KV front end's requests, which run in its own code).
    pub fn admit(&self, bytes: u64) -> Result<Permit, UnknownClass> {
        self.gate.acquire(&self.key, bytes)
    }

    fn pass<R>(&self, bytes: usize, io: impl FnOnce() -> R) -> io::Result<R> {
        let _slot = self
            .gate
            .enter(&self.key, bytes as u64)
            .map_err(io::Error::other)?;
        Ok(io())
    }
}

impl Stage for QosStage {
    fn put_in_force(&self) {
        self.gate.set_class(self.key.clone(), self.params);
    }

    fn read(&self, file: u64, buf: &mut [u8], off: u64, next: &dyn Backend) -> io::Result<usize> {
        let n = buf.len();
        let r = self.pass(n, || next.read_at(file, buf, off))??;
        self.bytes_read.fetch_add(r as u64, Relaxed);
        Ok(r)
    }

    fn write(&self, file: u64, data: &[u8], off: u64, next: &dyn Backend) -> io::Result<()> {
        self.pass(data.len(), || next.write_at(file, data, off))??;
        self.bytes_written.fetch_add(data.len() as u64, Relaxed);
        Ok(())
    }

    fn counters(&self) -> StageStats {
        StageStats {
            kind: "ratelimit".into(),
            bytes_written: self.bytes_written.load(Relaxed),
            qos: self.gate.counters(&self.key),
            ..StageStats::default()
        }
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "ratelimit",
            "iops": self.config.iops,
            "bytes_per_sec": self.config.bytes_per_s,
            "min_bytes_per_sec": self.config.min_bytes_per_s,
            "priority": self.config.priority,
            "bytes_read": self.bytes_read.load(Relaxed),
            "bytes_written": self.bytes_written.load(Relaxed),
            "scheduler": self.gate.counters(&self.key),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::testing::MemFiles;
    use lachesis_switch::Priority;
    use std::time::Instant;

    fn config(name: &str, priority: Priority, min: Option<u64>) -> RateLimitConfig {
        RateLimitConfig {
            name: name.into(),
            owner: None,
            iops: None,
            bytes_per_s: None,
            min_bytes_per_s: min,
            priority: Some(priority),
        }
    }

    #[test]
    fn io_passes_through_its_class_and_is_counted() {
        let t = Instant::now();
        let gate = Arc::new(Gate::new(1, Arc::new(move || t)));
        let s = QosStage::new(&config("qos/a", Priority::High, Some(1 << 20)), gate).unwrap();
        s.put_in_force();
        let m = MemFiles::default();
        s.write(1, b"hello", 0, &m).unwrap();
        let mut buf = [0u8; 5];
        assert_eq!(s.read(1, &mut buf, 0, &m).unwrap(), 5);
        assert_eq!(&buf, b"hello");
        let q = s.counters().qos.unwrap();
        assert_eq!((q.dispatched, q.dispatched_bytes), (2, 10));
        // The first was due by reservation at once; the second only 5 bytes' worth of the
        // reservation later, and this clock does not move: it went by weight.
        assert_eq!(q.reserved_bytes, 5);
    }

    #[test]
    fn a_stage_changes_its_class_only_when_put_in_force() {
        let t = Instant::now();
        let gate = Arc::new(Gate::new(1, Arc::new(move || t)));
        let key = ClassKey::Stage("qos/a".into());
        let low = QosStage::new(&config("qos/a", Priority::Low, None), gate.clone()).unwrap();
        assert_eq!(gate.params(&key), None, "built, not yet in force");
        low.put_in_force();
        let in_force = gate.params(&key).unwrap();
        // A successor built for a change that is then refused leaves the class as it was.
        let high = QosStage::new(
            &config("qos/a", Priority::High, Some(1 << 20)),
            gate.clone(),
        );
        drop(high.unwrap());
        assert_eq!(gate.params(&key), Some(in_force));
        let high = QosStage::new(
            &config("qos/a", Priority::High, Some(1 << 20)),
            gate.clone(),
        );
        high.unwrap().put_in_force();
        let now = gate.params(&key).unwrap();
        assert!(
            now.weight > in_force.weight && now.reservation > 0.0,
            "{now:?}"
        );
    }

    #[test]
    fn a_reservation_over_the_limit_is_refused_naming_the_stage() {
        let t = Instant::now();
        let gate = Arc::new(Gate::new(1, Arc::new(move || t)));
        let mut c = config("qos/b", Priority::Low, Some(2 << 20));
        c.bytes_per_s = Some(1 << 20);
        let e = QosStage::new(&c, gate).err().unwrap();
        assert!(e.contains("qos/b") && e.contains("above the limit"), "{e}");
    }
}
