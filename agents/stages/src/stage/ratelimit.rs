//! Rate limit stage: token buckets for IOPS and bytes per second (either or both). Each
//! bucket refills at its rate up to one second's worth (the burst); an IO takes one operation
//! and its length in bytes. Tokens may go negative: the IO that overdraws waits the debt out,
//! which keeps large IOs admissible and the long-run rate exact.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lachesis_switch::RateLimitConfig;

use super::{Backend, Stage, StageStats};

/// One token bucket.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
}

impl Bucket {
    fn new(rate: u64) -> Bucket {
        Bucket {
            rate: rate as f64,
            burst: rate as f64,
            tokens: rate as f64,
        }
    }

    /// Refills for `elapsed`, takes `n`, and says how long the debt (if any) takes to pay.
    fn debit(&mut self, n: f64, elapsed: Duration) -> Duration {
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.burst) - n;
        if self.tokens < 0.0 {
            Duration::from_secs_f64(-self.tokens / self.rate)
        } else {
            Duration::ZERO
        }
    }
}

struct State {
    bytes: Option<Bucket>,
    ops: Option<Bucket>,
    last: Instant,
}

pub struct RateLimit {
    config: RateLimitConfig,
    state: Mutex<State>,
    waited_ns: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl RateLimit {
    /// Buckets for the limits `config` sets (a limit not set is not enforced).
    pub fn new(config: &RateLimitConfig) -> Self {
        RateLimit {
            config: config.clone(),
            state: Mutex::new(State {
                bytes: config.bytes_per_s.map(Bucket::new),
                ops: config.iops.map(Bucket::new),
                last: Instant::now(),
            }),
            waited_ns: Default::default(),
            bytes_read: Default::default(),
            bytes_written: Default::default(),
        }
    }

    /// Takes one operation and `n` bytes, sleeping while a bucket is in debt.
    pub fn acquire(&self, n: usize) {
        let wait = self.debit(n, Instant::now());
        if !wait.is_zero() {
            self.waited_ns.fetch_add(wait.as_nanos() as u64, Relaxed);
            std::thread::sleep(wait);
        }
    }

    /// Refills the buckets up to `now`, takes one operation and `n` bytes, and says how long
    /// the caller must wait for the larger debt to be paid. Apart from the sleep so the
    /// arithmetic is testable without a clock.
    pub fn debit(&self, n: usize, now: Instant) -> Duration {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(st.last);
        st.last = st.last.max(now);
        let b = st
            .bytes
            .as_mut()
            .map_or(Duration::ZERO, |b| b.debit(n as f64, elapsed));
        let o = st
            .ops
            .as_mut()
            .map_or(Duration::ZERO, |o| o.debit(1.0, elapsed));
        b.max(o)
    }
}

impl Stage for RateLimit {
    fn read(&self, file: u64, buf: &mut [u8], off: u64, next: &dyn Backend) -> io::Result<usize> {
        self.acquire(buf.len());
        self.bytes_read.fetch_add(buf.len() as u64, Relaxed);
        next.read_at(file, buf, off)
    }

    fn write(&self, file: u64, data: &[u8], off: u64, next: &dyn Backend) -> io::Result<()> {
        self.acquire(data.len());
        self.bytes_written.fetch_add(data.len() as u64, Relaxed);
        next.write_at(file, data, off)
    }

    fn counters(&self) -> StageStats {
        StageStats {
            kind: "ratelimit".into(),
            bytes_written: self.bytes_written.load(Relaxed),
            ..StageStats::default()
        }
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "ratelimit",
            "iops": self.config.iops,
            "bytes_per_sec": self.config.bytes_per_s,
            "bytes_read": self.bytes_read.load(Relaxed),
            "bytes_written": self.bytes_written.load(Relaxed),
            "waited_ms": self.waited_ns.load(Relaxed) / 1_000_000,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(iops: Option<u64>, bytes_per_s: Option<u64>) -> RateLimit {
        RateLimit::new(&RateLimitConfig {
            name: "qos/t".into(),
            owner: None,
            iops,
            bytes_per_s,
            min_bytes_per_s: None,
            priority: None,
        })
    }

    fn start(rl: &RateLimit) -> Instant {
        rl.state.lock().unwrap().last
    }

    #[test]
    fn debt_is_paid_at_the_rate() {
        let rl = limit(None, Some(4 << 20));
        let t0 = start(&rl);
        // The burst is one second's worth: 64 IOs of 64 KiB pass at once, then each later
        // one adds 64 KiB of debt, i.e. 1/64 s at 4 MiB/s.
        for i in 0..64 {
            assert_eq!(rl.debit(64 << 10, t0), Duration::ZERO, "IO {i}");
        }
        let waits: Vec<f64> = (1..=16)
            .map(|_| rl.debit(64 << 10, t0).as_secs_f64())
            .collect();
        for (i, w) in waits.iter().enumerate() {
            assert!(
                (w - (i + 1) as f64 / 64.0).abs() < 1e-9,
                "IO {i} waits {w}s"
            );
        }
        // A quarter of a second later 1 MiB has been refilled: the debt of 1/4 s is paid.
        let later = t0 + Duration::from_millis(250);
        assert_eq!(rl.debit(0, later), Duration::ZERO);
    }

    #[test]
    fn iops_limit_counts_operations_whatever_their_size() {
        let rl = limit(Some(100), None);
        let t0 = start(&rl);
        for _ in 0..100 {
            assert_eq!(rl.debit(1 << 20, t0), Duration::ZERO);
        }
        // The 101st IO owes one operation: 10 ms at 100 IOPS.
        let w = rl.debit(1, t0).as_secs_f64();
        assert!((w - 0.01).abs() < 1e-9, "{w}");
        // Half a second on, 50 operations were refilled.
        let later = t0 + Duration::from_millis(500);
        for _ in 0..49 {
            assert_eq!(rl.debit(1, later), Duration::ZERO);
        }
        assert!(rl.debit(1, later) > Duration::ZERO);
    }

    #[test]
    fn both_limits_the_larger_wait_wins() {
        let rl = limit(Some(1000), Some(1 << 20));
        let t0 = start(&rl);
        // 1 MiB in one IO spends the byte bucket; the next 4 KiB IO owes 4 KiB of bytes
        // (1/256 s) and no operation.
        assert_eq!(rl.debit(1 << 20, t0), Duration::ZERO);
        let w = rl.debit(4096, t0).as_secs_f64();
        assert!((w - 1.0 / 256.0).abs() < 1e-9, "{w}");
    }
}
