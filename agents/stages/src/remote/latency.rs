//! The latency monitor of one remote endpoint (sRoute §6.5.1's per-server statistics, seen
//! from the switch): every answered request is counted with its round-trip time into a
//! long-run mean (an exponential average over requests) and a recent window (the mean of
//! the last [`WINDOW`] requests). Counted per request, not per second: a burst and a quiet
//! period weigh what their requests weigh. The endpoint is `slow` when its recent window is
//! full and above [`SLOW_FACTOR`] times its long-run mean; the controller decides with its
//! own α and hysteresis from the same numbers.

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Requests in the recent window.
pub const WINDOW: usize = 32;
/// The long-run mean moves by 1/`HORIZON` of each request's difference from it.
pub const HORIZON: f64 = 1024.0;
/// The agent's own view of slow: recent above this many times the mean.
pub const SLOW_FACTOR: f64 = 2.0;

/// One endpoint's numbers, as telemetry reports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointLatency {
    /// `HOST:PORT` of the agent serving the endpoint.
    pub addr: String,
    /// Requests answered (or timed out) so far.
    pub requests: u64,
    /// Mean round trip of the last `WINDOW` requests, microseconds.
    pub recent_us: f64,
    /// Long-run mean round trip, microseconds.
    pub mean_us: f64,
    pub slow: bool,
}

#[derive(Default)]
struct Inner {
    requests: u64,
    mean_us: f64,
    window: Vec<f64>,
    next: usize,
}

#[derive(Default)]
pub struct LatencyMonitor(Mutex<Inner>);

impl LatencyMonitor {
    pub fn record(&self, took: Duration) {
        let us = took.as_secs_f64() * 1e6;
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.requests += 1;
        m.mean_us = if m.requests == 1 {
            us
        } else {
            m.mean_us + (us - m.mean_us) / HORIZON.min(m.requests as f64)
        };
        if m.window.len() < WINDOW {
            m.window.push(us);
        } else {
            let i = m.next;
            m.window[i] = us;
        }
        m.next = (m.next + 1) % WINDOW;
    }

    pub fn report(&self, addr: &str) -> EndpointLatency {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let recent = if m.window.is_empty() {
            0.0
        } else {
            m.window.iter().sum::<f64>() / m.window.len() as f64
        };
        EndpointLatency {
            addr: addr.to_string(),
            requests: m.requests,
            recent_us: recent,
            mean_us: m.mean_us,
            slow: m.window.len() == WINDOW && recent > SLOW_FACTOR * m.mean_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_slow_requests_shows_in_the_window_not_the_mean() {
        let m = LatencyMonitor::default();
        for _ in 0..2000 {
            m.record(Duration::from_micros(100));
        }
        let r = m.report("h:1");
        assert_eq!((r.requests, r.slow), (2000, false));
        assert!((r.recent_us - 100.0).abs() < 1e-6 && (r.mean_us - 100.0).abs() < 1e-6);
        for _ in 0..WINDOW {
            m.record(Duration::from_micros(2000));
        }
        let r = m.report("h:1");
        assert!(r.slow, "{r:?}");
        assert!((r.recent_us - 2000.0).abs() < 1e-6, "{r:?}");
        // The mean moved by a little over WINDOW / HORIZON of the difference.
        assert!(r.mean_us < 200.0, "{r:?}");
        // Fast again: a full window of fast requests ends it.
        for _ in 0..WINDOW {
            m.record(Duration::from_micros(100));
        }
        assert!(!m.report("h:1").slow);
    }

    #[test]
    fn too_few_requests_are_never_slow() {
        let m = LatencyMonitor::default();
        m.record(Duration::from_micros(10));
        for _ in 0..WINDOW - 2 {
            m.record(Duration::from_millis(10));
        }
        assert!(!m.report("h:1").slow);
    }
}
