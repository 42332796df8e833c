//! The IO scheduler's decisions, pure: mClock's three tags per request (Gulati, Merchant and
//! Varman, "mClock: Handling Throughput Variability for Hypervisor IO Scheduling", OSDI'10; the
//! per-server half of dmClock), in bytes. No clock, no locks, no IO: the caller says what time
//! it is, so every decision is a function of the calls made and the tests decide by counts.
//!
//! Each class (a tenant's qos stage, or the declared-IO dispatcher) has a reservation (bytes/s
//! it is owed while it has IO queued), a weight (its share of what is left) and limits (bytes/s
//! and IOPS it never exceeds). A request gets, when it arrives at time `t` with cost `c` bytes:
//!
//! - R = max(R' + c/r, t): when its reservation is due (real time);
//! - L = max(L' + c'/l, t): when its limit lets it go (real time; one tag for bytes, one for
//!   IOPS; c' the previous request's cost, so a limit holds for every prefix of the stream);
//! - P = max(P', V) + c/w: its finish tag in *virtual* time (`V`, the P of the newest request
//!   dispatched by weight: self-clocked fair queueing, Golestani, INFOCOM'94).
//!
//! where R', L', P' are the tags of the class's previous request. A dispatch first serves the
//! earliest due R (the reservation phase), else the smallest P among classes within their
//! limits (the weight phase); a class served by weight has its queued R tags moved back by
//! c/r, as mClock does, so weight-phase service does not use up its reservation.
//!
//! Why P in virtual time and not mClock's max(P' + 1/w, t): with real time, a class whose
//! requests come slower than 1/w apart is reset to `t` each time and weights stop mattering
//! (the "weight must stay below the expected IOPS" caveat of Ceph's mClock). In virtual time
//! the order of queued requests depends only on their costs and weights: with equal costs a
//! class of weight 16 has 16 requests dispatched for every one of a class of weight 1,
//! whatever the clock says.
//!
//! Limits hold in both phases (a reservation above a limit is refused, so none is owed past
//! it): a class's bytes dispatched before time t never exceed l x (t - its first arrival).
//!
//! Written here rather than taken from crates.io: no maintained mClock/dmClock crate exists
//! there (Ceph's dmclock is C++), and the scheduler must be pure for the tests above.

use std::collections::{BTreeMap, VecDeque};

/// What a class is owed and allowed. Rates in bytes (or operations) per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Bytes/s served by reservation whenever the class has IO queued; 0: none.
    pub reservation: f64,
    /// Share of what reservations leave; at least 1.
    pub weight: f64,
    /// Bytes/s never exceeded; None: no limit.
    pub limit_bytes: Option<f64>,
    /// Operations/s never exceeded; None: no limit.
    pub limit_iops: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamsError {
    #[error("weight {0} is not a number of at least 1")]
    Weight(f64),
    #[error("reservation {0} bytes/s is negative or not a number")]
    Reservation(f64),
    #[error("limit {0} is not a positive number")]
    Limit(f64),
    #[error("reservation {reservation} bytes/s is above the limit {limit} bytes/s")]
    ReservationOverLimit { reservation: f64, limit: f64 },
}

impl Params {
    /// Checked: a weight of at least 1, rates positive, a reservation within the byte limit.
    pub fn new(
        reservation: f64,
        weight: f64,
        limit_bytes: Option<f64>,
        limit_iops: Option<f64>,
    ) -> Result<Params, ParamsError> {
        if !(weight >= 1.0 && weight.is_finite()) {
            return Err(ParamsError::Weight(weight));
        }
        if !(reservation >= 0.0 && reservation.is_finite()) {
            return Err(ParamsError::Reservation(reservation));
        }
        for l in limit_bytes.iter().chain(limit_iops.iter()) {
            if !(*l > 0.0 && l.is_finite()) {
                return Err(ParamsError::Limit(*l));
            }
        }
        if let Some(limit) = limit_bytes {
            if reservation > limit {
                return Err(ParamsError::ReservationOverLimit { reservation, limit });
            }
        }
        Ok(Params {
            reservation,
            weight,
            limit_bytes,
            limit_iops,
        })
    }
}

/// Which phase dispatched a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Reservation,
    Weight,
}

/// What a class was dispatched, cumulative (and the telemetry a qos stage reports:
/// `api-schemas/bus/telemetry.schema.json`, `stage.qos`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    pub dispatched: u64,
    pub dispatched_bytes: u64,
    /// Bytes dispatched in the reservation phase.
    pub reserved_bytes: u64,
    /// Dispatches made while another class had IO queued (who won when both waited).
    pub contended: u64,
    /// Of those, made in the reservation phase.
    pub contended_reserved: u64,
    /// Requests held past their arrival by the class's limit, and their bytes.
    pub limited: u64,
    pub limited_bytes: u64,
}

impl std::ops::AddAssign for Counters {
    /// Summing a stage's counters over the mounts that each run an instance of it.
    fn add_assign(&mut self, o: Counters) {
        self.dispatched += o.dispatched;
        self.dispatched_bytes += o.dispatched_bytes;
        self.reserved_bytes += o.reserved_bytes;
        self.contended += o.contended;
        self.contended_reserved += o.contended_reserved;
        self.limited += o.limited;
        self.limited_bytes += o.limited_bytes;
    }
}

#[derive(Debug)]
struct Request<T> {
    item: T,
    cost: u64,
    arrived: f64,
    r: f64,
    l: f64,
    p: f64,
}

#[derive(Debug)]
struct Class<T> {
    params: Params,
    queue: VecDeque<Request<T>>,
    // Tags of the newest request that arrived (R', P'), and when the limits let the next one
    // go (bytes, IOPS).
    r: f64,
    lb: f64,
    lo: f64,
    p: f64,
    counters: Counters,
}

/// What [`Scheduler::dispatch`] decided.
#[derive(Debug, PartialEq)]
pub enum Next<K, T> {
    Dispatch {
        class: K,
        item: T,
        phase: Phase,
        /// Whether the class's limits held the request past its arrival.
        limited: bool,
    },
    /// Requests are queued but none may go before this time (limits, or reservations alone
    /// while every other class is at its limit).
    Wait { until: f64 },
    /// Nothing queued.
    Idle,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no scheduler class {0}")]
pub struct UnknownClass(pub String);

/// The scheduler's state: classes keyed by `K` (ties go to the smaller key), requests
/// carrying a `T` back to whoever queued them.
#[derive(Debug)]
pub struct Scheduler<K, T> {
    classes: BTreeMap<K, Class<T>>,
    /// Virtual time: the P tag of the newest weight-phase dispatch.
    vtime: f64,
}

impl<K, T> Default for Scheduler<K, T> {
    fn default() -> Self {
        Scheduler {
            classes: BTreeMap::new(),
            vtime: 0.0,
        }
    }
}

impl<K: Ord + Clone + std::fmt::Debug, T> Scheduler<K, T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a class, or changes one's parameters (its queued requests keep their tags; the
    /// next ones are tagged with the new rates).
    pub fn set_class(&mut self, key: K, params: Params) {
        self.classes
            .entry(key)
            .and_modify(|c| c.params = params)
            .or_insert(Class {
                params,
                queue: VecDeque::new(),
                r: f64::NEG_INFINITY,
                lb: f64::NEG_INFINITY,
                lo: f64::NEG_INFINITY,
                p: f64::NEG_INFINITY,
                counters: Counters::default(),
            });
    }

    pub fn params(&self, key: &K) -> Option<Params> {
        self.classes.get(key).map(|c| c.params)
    }

    pub fn counters(&self, key: &K) -> Option<Counters> {
        self.classes.get(key).map(|c| c.counters)
    }

    /// Requests queued in `key`.
    pub fn queued(&self, key: &K) -> usize {
        self.classes.get(key).map_or(0, |c| c.queue.len())
    }

    /// Queues a request of `cost` bytes at time `now` (seconds, any origin, never going back).
    pub fn enqueue(&mut self, key: &K, cost: u64, item: T, now: f64) -> Result<(), UnknownClass> {
        let vtime = self.vtime;
        let c = self
            .classes
            .get_mut(key)
            .ok_or_else(|| UnknownClass(format!("{key:?}")))?;
        let bytes = cost as f64;
        let p = &c.params;
        let r = if p.reservation > 0.0 {
            (c.r + bytes / p.reservation).max(now)
        } else {
            f64::INFINITY
        };
        // A limit spaces a request after the previous one by the *previous* one's cost, so
        // the bytes before any request never exceed the limit's worth (a large request goes
        // when it may, and the next waits for it to be paid).
        let lb = c.lb.max(now);
        let lo = c.lo.max(now);
        c.lb = p.limit_bytes.map_or(now, |l| lb + bytes / l);
        c.lo = p.limit_iops.map_or(now, |l| lo + 1.0 / l);
        // A class idle for a while starts at the virtual time, not behind it: it gets no
        // credit for the time it did not ask (SCFQ).
        let pt = c.p.max(vtime) + bytes / p.weight;
        (c.r, c.p) = (r, pt);
        c.queue.push_back(Request {
            item,
            cost,
            arrived: now,
            r,
            l: lb.max(lo),
            p: pt,
        });
        Ok(())
    }

    /// The next request to dispatch at time `now`, or why none.
    pub fn dispatch(&mut self, now: f64) -> Next<K, T> {
        let mut by_r: Option<(&K, f64)> = None;
        let mut by_p: Option<(&K, f64)> = None;
        let mut until = f64::INFINITY;
        let mut busy = 0;
        for (k, c) in &self.classes {
            let Some(h) = c.queue.front() else { continue };
            busy += 1;
            if h.l > now {
                until = until.min(h.l);
                continue;
            }
            if h.r <= now {
                if by_r.is_none_or(|(_, r)| h.r < r) {
                    by_r = Some((k, h.r));
                }
            } else {
                until = until.min(h.r);
            }
            if by_p.is_none_or(|(_, p)| h.p < p) {
                by_p = Some((k, h.p));
            }
        }
        let (key, phase) = match (by_r, by_p) {
            (Some((k, _)), _) => (k.clone(), Phase::Reservation),
            (None, Some((k, _))) => (k.clone(), Phase::Weight),
            (None, None) if busy == 0 => return Next::Idle,
            (None, None) => return Next::Wait { until },
        };
        let c = self
            .classes
            .get_mut(&key)
            .expect("chosen among the classes");
        let req = c.queue.pop_front().expect("chosen for its head");
        let n = &mut c.counters;
        n.dispatched += 1;
        n.dispatched_bytes += req.cost;
        if busy > 1 {
            n.contended += 1;
        }
        let limited = req.l > req.arrived;
        if limited {
            n.limited += 1;
            n.limited_bytes += req.cost;
        }
        match phase {
            Phase::Reservation => {
                n.reserved_bytes += req.cost;
                if busy > 1 {
                    n.contended_reserved += 1;
                }
            }
            Phase::Weight => {
                self.vtime = self.vtime.max(req.p);
                if c.params.reservation > 0.0 {
                    let back = req.cost as f64 / c.params.reservation;
                    for q in &mut c.queue {
                        q.r -= back;
                    }
                    c.r -= back;
                }
            }
        }
        Next::Dispatch {
            class: key,
            item: req.item,
            phase,
            limited,
        }
    }
}

#[cfg(test)]
#[path = "mclock_tests.rs"]
mod tests;
