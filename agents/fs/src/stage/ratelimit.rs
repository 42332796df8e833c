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
        let wait = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let refill = now.duration_since(st.1).as_secs_f64() * self.rate;
            st.0 = (st.0 + refill).min(self.burst) - n as f64;
            st.1 = now;
            if st.0 < 0.0 {
                Duration::from_secs_f64(-st.0 / self.rate)
            } else {
                Duration::ZERO
            }
        };
        if !wait.is_zero() {
            self.waited_ns
                .fetch_add(wait.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(wait);
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
        // 1 MiB at 4 MiB/s after a 64 KiB burst: about 0.23 s.
        for i in 0..16u64 {
            rl.write(1, &block, i * block.len() as u64, &mem).unwrap();
        }
        let el = t.elapsed().as_secs_f64();
        assert!((0.2..0.6).contains(&el), "took {el}s");
        assert_eq!(mem.content(1).len(), 1 << 20);
    }

    #[test]
    fn burst_passes_without_waiting() {
        let rl = RateLimit::new(1 << 20, 1 << 20);
        let t = Instant::now();
        rl.acquire(512 << 10);
        assert!(t.elapsed() < Duration::from_millis(50));
    }
}
