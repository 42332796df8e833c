//! Token-bucket rate limiter: IO bytes spend tokens refilled at `rate` bytes/s up to `burst`.

use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Backend, Stage};

pub struct RateLimit {
    rate: f64,
    burst: f64,
    /// (tokens, last refill). Tokens may go negative: the IO that overdraws waits the debt out,
    /// which keeps large IOs admissible and the long-run rate exact.
    state: Mutex<(f64, Instant)>,
    waited_ns: std::sync::atomic::AtomicU64,
}

impl RateLimit {
    pub fn new(bytes_per_sec: u64, burst: u64) -> Self {
        RateLimit {
            rate: bytes_per_sec as f64,
            burst: burst as f64,
            state: Mutex::new((burst as f64, Instant::now())),
            waited_ns: Default::default(),
        }
    }

    /// Takes `n` tokens, sleeping while the bucket is in debt.
    pub fn acquire(&self, n: usize) {
        let wait = self.debit(n, Instant::now());
        if !wait.is_zero() {
            self.waited_ns
                .fetch_add(wait.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(wait);
        }
    }

    /// Refills the bucket up to `now`, takes `n` tokens, and says how long the caller must wait
    /// for the debt (if any) to be paid. Separate from the sleep so the arithmetic is testable
    /// without a clock.
    fn debit(&self, n: usize, now: Instant) -> Duration {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let refill = now.saturating_duration_since(st.1).as_secs_f64() * self.rate;
        st.0 = (st.0 + refill).min(self.burst) - n as f64;
        st.1 = st.1.max(now);
        if st.0 < 0.0 {
            Duration::from_secs_f64(-st.0 / self.rate)
        } else {
            Duration::ZERO
        }
    }
}

impl Stage for RateLimit {
    fn read(&self, file: u64, buf: &mut [u8], off: u64, next: &dyn Backend) -> io::Result<usize> {
        self.acquire(buf.len());
        next.read_at(file, buf, off)
    }

    fn write(&self, file: u64, data: &[u8], off: u64, next: &dyn Backend) -> io::Result<()> {
        self.acquire(data.len());
        next.write_at(file, data, off)
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "ratelimit",
            "bytes_per_sec": self.rate,
            "waited_ms": self.waited_ns.load(std::sync::atomic::Ordering::Relaxed) / 1_000_000,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::testing::MemFiles;

    #[test]
    fn limits_throughput_to_the_rate() {
        let rl = RateLimit::new(4 << 20, 64 << 10);
        let mem = MemFiles::default();
        let block = vec![7u8; 64 << 10];
        let t = Instant::now();
        // 1 MiB at 4 MiB/s after a 64 KiB burst: at least 15/64 s of waiting.
        for i in 0..16u64 {
            rl.write(1, &block, i * block.len() as u64, &mem).unwrap();
        }
        let el = t.elapsed().as_secs_f64();
        assert!(el >= 15.0 / 64.0 - 1e-3, "took {el}s");
        assert_eq!(mem.content(1).len(), 1 << 20);
    }

    #[test]
    fn debt_is_paid_at_the_rate() {
        let rl = RateLimit::new(4 << 20, 64 << 10);
        let t0 = rl.state.lock().unwrap().1;
        // Sixteen 64 KiB IOs at the same instant: the first spends the burst, each later one
        // adds 64 KiB of debt, i.e. 1/64 s at 4 MiB/s.
        let waits: Vec<f64> = (0..16)
            .map(|_| rl.debit(64 << 10, t0).as_secs_f64())
            .collect();
        for (i, w) in waits.iter().enumerate() {
            assert!((w - i as f64 / 64.0).abs() < 1e-9, "IO {i} waits {w}s");
        }
        // A quarter of a second later 1 MiB has been refilled: the debt of 15/64 s is paid.
        let later = t0 + Duration::from_millis(250);
        assert_eq!(rl.debit(0, later), Duration::ZERO);
    }

    #[test]
    fn burst_passes_without_waiting() {
        let rl = RateLimit::new(1 << 20, 1 << 20);
        let t0 = rl.state.lock().unwrap().1;
        assert_eq!(rl.debit(512 << 10, t0), Duration::ZERO);
        assert_eq!(rl.debit(512 << 10, t0), Duration::ZERO);
        assert!(rl.debit(1, t0) > Duration::ZERO);
    }
}
