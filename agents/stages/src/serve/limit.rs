//! Server-side QoS of `lachesis-fs serve` (`--max-iops N`, `--max-bytes-per-s N`): a rate
//! limit on the requests the server answers, shared by all its connections. A request over
//! the limit is not refused but queued: it waits, in arrival order, until the limit lets it
//! run, so a server over its budget answers later, as a loaded disk does. That is what makes
//! an endpoint slow for its peers' latency monitors (sRoute §6.5.1's loaded server) when
//! several clients compete for its budget.
//!
//! The limit is a virtual schedule per budget (GCRA without burst tolerance): request k
//! starts no earlier than the previous one's start plus its cost (`1/iops` seconds for the
//! request budget, `bytes / bytes_per_s` for the byte budget); requests are spaced, never
//! batched. Every request costs one of the request budget, probes and metadata included (a
//! peer measuring this server waits behind its queue like everybody else); a read costs
//! the bytes it asks for, a write (or a demoted block) the bytes it carries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::remote::frame::{Frame, Op};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Requests answered per second at most.
    pub iops: Option<u64>,
    /// Data bytes (read or written) per second at most.
    pub bytes_per_s: Option<u64>,
}

impl Limits {
    /// `None` when neither budget is set (no limit: nothing to queue on).
    pub fn new(iops: Option<u64>, bytes_per_s: Option<u64>) -> Result<Option<Limits>, String> {
        if iops == Some(0) {
            return Err("--max-iops must be at least 1".into());
        }
        if bytes_per_s == Some(0) {
            return Err("--max-bytes-per-s must be at least 1".into());
        }
        Ok((iops.is_some() || bytes_per_s.is_some()).then_some(Limits { iops, bytes_per_s }))
    }
}

/// The data bytes a request moves: what a read asks for, what a write or a demotion carries.
pub fn bytes_of(req: &Frame) -> u64 {
    match req.op {
        // A reply carries at most a frame: a larger length asked for (a bad or hostile
        // client) costs that much, not a wait beyond any schedule (nor a Duration overflow).
        Op::Read => req.len.min(crate::remote::frame::MAX_FRAME as u64),
        Op::Write | Op::Demote => req.data.len() as u64,
        _ => 0,
    }
}

pub struct RateLimit {
    limits: Limits,
    /// When the next request may start, per budget (requests, bytes): the end of the
    /// schedule so far.
    next: Mutex<(Option<Instant>, Option<Instant>)>,
    booked: AtomicU64,
}

impl RateLimit {
    pub fn new(limits: Limits) -> RateLimit {
        RateLimit {
            limits,
            next: Mutex::new((None, None)),
            booked: AtomicU64::new(0),
        }
    }

    /// Books a request of `bytes` arriving at `now` into the schedule and returns when it
    /// may start (`now` if the budgets have room).
    pub fn reserve(&self, bytes: u64, now: Instant) -> Instant {
        let cost = |per_s: Option<u64>, units: u64| {
            per_s.map(|r| Duration::from_secs_f64(units as f64 / r as f64))
        };
        let (req_cost, byte_cost) = (
            cost(self.limits.iops, 1),
            cost(self.limits.bytes_per_s, bytes),
        );
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let start = [next.0, next.1]
            .into_iter()
            .flatten()
            .fold(now, Instant::max);
        if let Some(c) = req_cost {
            next.0 = Some(start + c);
        }
        if let Some(c) = byte_cost {
            next.1 = Some(start + c);
        }
        start
    }

    /// Waits until the request may run.
    pub fn admit(&self, req: &Frame) {
        let now = Instant::now();
        let start = self.reserve(bytes_of(req), now);
        self.wait_until(start, now);
    }

    /// `admit`, counting the booking in [`RateLimit::booked`] once it is in the schedule.
    fn admit_counted(&self, req: &Frame) {
        let now = Instant::now();
        let start = self.reserve(bytes_of(req), now);
        self.booked.fetch_add(1, Ordering::SeqCst);
        self.wait_until(start, now);
    }

    /// Requests booked into the schedule so far (a hook for tests: a request booked after
    /// others is let through after them).
    pub fn booked(&self) -> u64 {
        self.booked.load(Ordering::SeqCst)
    }

    fn wait_until(&self, start: Instant, now: Instant) {
        if start > now {
            std::thread::sleep(start - now);
        }
    }
}

/// Waits until `limit` lets `req` run (at once without one).
pub(super) fn admit(limit: Option<&RateLimit>, req: &Frame) {
    if let Some(l) = limit {
        l.admit_counted(req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of `n` requests of `bytes`, all arriving at `t0`, may start in the first
    /// (virtual) second.
    fn started_in_first_second(l: &RateLimit, t0: Instant, n: usize, bytes: u64) -> usize {
        (0..n)
            .map(|_| l.reserve(bytes, t0))
            .filter(|s| *s < t0 + Duration::from_secs(1))
            .count()
    }

    #[test]
    fn requests_over_the_iops_budget_queue_in_order() {
        let l = RateLimit::new(Limits::new(Some(100), None).unwrap().unwrap());
        let t0 = Instant::now();
        assert_eq!(l.reserve(0, t0), t0, "room: at once");
        let starts: Vec<_> = (0..1000).map(|_| l.reserve(4096, t0)).collect();
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "arrival order");
        let l = RateLimit::new(Limits::new(Some(100), None).unwrap().unwrap());
        assert_eq!(started_in_first_second(&l, t0, 1000, 4096), 100);
    }

    #[test]
    fn a_read_asking_for_more_than_a_frame_costs_a_frame() {
        let huge = Frame::request(Op::Read, "f", 0, u64::MAX, vec![]);
        assert_eq!(bytes_of(&huge), crate::remote::frame::MAX_FRAME as u64);
        let l = RateLimit::new(Limits::new(None, Some(1)).unwrap().unwrap());
        let t0 = Instant::now();
        assert_eq!(l.reserve(bytes_of(&huge), t0), t0, "room: at once");
        assert!(l.reserve(0, t0) > t0, "the next one waits behind it");
    }

    #[test]
    fn the_byte_budget_counts_bytes_and_both_budgets_hold() {
        let t0 = Instant::now();
        let bytes = |b| RateLimit::new(Limits::new(None, Some(b)).unwrap().unwrap());
        // 1 MiB/s: 256 writes of 4 KiB, 16 of 64 KiB.
        assert_eq!(
            started_in_first_second(&bytes(1 << 20), t0, 1000, 4096),
            256
        );
        assert_eq!(
            started_in_first_second(&bytes(1 << 20), t0, 1000, 65536),
            16
        );
        // Both: the tighter one decides.
        let both = |i, b| RateLimit::new(Limits::new(Some(i), Some(b)).unwrap().unwrap());
        assert_eq!(
            started_in_first_second(&both(50, 1 << 20), t0, 1000, 4096),
            50
        );
        assert_eq!(
            started_in_first_second(&both(1000, 1 << 20), t0, 1000, 65536),
            16
        );
    }

    #[test]
    fn an_idle_server_does_not_bank_budget() {
        let l = RateLimit::new(Limits::new(Some(10), None).unwrap().unwrap());
        let t0 = Instant::now();
        l.reserve(0, t0);
        // Long after: one at once, the next a full interval later (no burst saved up).
        let later = t0 + Duration::from_secs(60);
        assert_eq!(l.reserve(0, later), later);
        assert_eq!(started_in_first_second(&l, later, 100, 0), 9);
    }

    #[test]
    fn costs_and_bad_limits() {
        assert_eq!(Limits::new(None, None), Ok(None));
        assert!(Limits::new(Some(0), None)
            .unwrap_err()
            .contains("--max-iops"));
        assert!(Limits::new(None, Some(0))
            .unwrap_err()
            .contains("--max-bytes-per-s"));
        let r = Frame::request(Op::Read, "/a", 0, 8192, vec![]);
        let w = Frame::request(Op::Write, "/a", 0, 0, vec![0; 100]);
        let g = Frame::request(Op::Getattr, "/a", 0, 0, vec![]);
        let d = Frame::request(Op::Demote, "/a", 0, 7, vec![0; 4096]);
        assert_eq!(
            (bytes_of(&r), bytes_of(&w), bytes_of(&g), bytes_of(&d)),
            (8192, 100, 0, 4096)
        );
    }
}
