//! The scheduler in front of a data path's IO: at most `depth` requests pass at once (mClock
//! keeps the device's queue depth constant, and reorders what waits behind it); the rest wait
//! here, and [`mclock`](super::mclock) chooses which goes when one finishes. A thread that
//! wants to do IO calls [`Gate::acquire`] and holds the [`Permit`] while the IO runs.
//!
//! Without a bound on what passes there is nothing to reorder: every request would go at once
//! and priorities would mean nothing. Depth 1 orders every IO; more lets IO of one class
//! overlap at the cost of coarser ordering.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use super::mclock::{Counters, Next, Params, Scheduler, UnknownClass};
use crate::Clock;

/// Who a request is for: a qos stage (by name) or the agent's declared-IO dispatcher.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClassKey {
    Stage(String),
    Declared,
}

struct Inner {
    sched: Scheduler<ClassKey, u64>,
    in_flight: usize,
    /// Tickets dispatched whose threads have not picked them up yet, and whether their
    /// class's limits held them.
    granted: HashMap<u64, bool>,
    next_ticket: u64,
    /// Threads holding a slot taken by [`Gate::enter`], and how many times they entered.
    holders: HashMap<ThreadId, usize>,
}

pub struct Gate {
    inner: Mutex<Inner>,
    cv: Condvar,
    depth: usize,
    clock: Clock,
    epoch: Instant,
}

/// Held while a request's IO runs; dropping it lets the next one go. Owned, so an async front
/// end can wait for it on a blocking thread and hold it across its own code.
pub struct Permit {
    gate: Arc<Gate>,
    limited: bool,
    /// Taken by [`Gate::enter`] on this thread; `nested`: inside a slot it already held.
    holder: Option<ThreadId>,
    nested: bool,
}

impl Permit {
    /// Whether the class's limits held the request past its arrival.
    pub fn limited(&self) -> bool {
        self.limited
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut inner = self.gate.lock();
        if let Some(t) = self.holder {
            if let Some(n) = inner.holders.get_mut(&t) {
                *n -= 1;
                if *n == 0 {
                    inner.holders.remove(&t);
                }
            }
        }
        if !self.nested {
            inner.in_flight -= 1;
            self.gate.pump(&mut inner);
            // Waiters that queued while the slot was taken wait for a signal, not a time; if
            // what freed the slot granted nothing (the head waits for its limit), they must
            // learn that only time stands in the way now, and wait for it.
            self.gate.cv.notify_all();
        }
    }
}

impl Default for Gate {
    /// [`super::DEPTH`] slots on the real clock.
    fn default() -> Self {
        Gate::new(super::DEPTH, Arc::new(Instant::now))
    }
}

impl Gate {
    /// A gate letting `depth` (at least 1) requests pass at once, on `clock`.
    pub fn new(depth: usize, clock: Clock) -> Gate {
        let epoch = clock();
        let mut sched = Scheduler::new();
        // The declared-IO dispatcher's maintenance reads: below every tenant's weight.
        let declared = Params::new(0.0, super::classes::DECLARED_WEIGHT, None, None)
            .expect("a weight of at least 1 and no rates");
        sched.set_class(ClassKey::Declared, declared);
        Gate {
            inner: Mutex::new(Inner {
                sched,
                in_flight: 0,
                granted: HashMap::new(),
                next_ticket: 0,
                holders: HashMap::new(),
            }),
            cv: Condvar::new(),
            depth: depth.max(1),
            clock,
            epoch,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> f64 {
        (self.clock)()
            .saturating_duration_since(self.epoch)
            .as_secs_f64()
    }

    /// Adds a class or changes its parameters.
    pub fn set_class(&self, key: ClassKey, params: Params) {
        self.lock().sched.set_class(key, params);
    }

    /// The parameters `key` runs with (None: no such class).
    pub fn params(&self, key: &ClassKey) -> Option<Params> {
        self.lock().sched.params(key)
    }

    pub fn counters(&self, key: &ClassKey) -> Option<Counters> {
        self.lock().sched.counters(key)
    }

    /// Dispatches while a slot is free; wakes the waiters when it granted any. Returns when
    /// the next request may go, if one waits only for time.
    fn pump(&self, inner: &mut Inner) -> Option<f64> {
        let mut woke = false;
        let mut wait = None;
        while inner.in_flight < self.depth {
            match inner.sched.dispatch(self.now()) {
                Next::Dispatch { item, limited, .. } => {
                    inner.granted.insert(item, limited);
                    inner.in_flight += 1;
                    woke = true;
                }
                Next::Wait { until } => {
                    wait = Some(until);
                    break;
                }
                Next::Idle => break,
            }
        }
        if woke {
            self.cv.notify_all();
        }
        wait
    }

    /// [`Gate::acquire`] for IO that runs on the calling thread (the FUSE switch's): a thread
    /// that already holds a slot (its route passes a second qos stage) goes on inside it, as
    /// waiting for a second slot while holding the only one would never end.
    pub fn enter(self: &Arc<Self>, class: &ClassKey, cost: u64) -> Result<Permit, UnknownClass> {
        let me = std::thread::current().id();
        {
            let mut inner = self.lock();
            if let Some(n) = inner.holders.get_mut(&me) {
                *n += 1;
                return Ok(Permit {
                    gate: self.clone(),
                    limited: false,
                    holder: Some(me),
                    nested: true,
                });
            }
        }
        let mut p = self.acquire(class, cost)?;
        *self.lock().holders.entry(me).or_insert(0) += 1;
        p.holder = Some(me);
        Ok(p)
    }

    /// Queues a request of `cost` bytes in `class` and blocks until the scheduler dispatches
    /// it.
    pub fn acquire(self: &Arc<Self>, class: &ClassKey, cost: u64) -> Result<Permit, UnknownClass> {
        let mut inner = self.lock();
        let ticket = inner.next_ticket;
        inner.next_ticket += 1;
        let now = self.now();
        inner.sched.enqueue(class, cost, ticket, now)?;
        loop {
            let wait = self.pump(&mut inner);
            if let Some(limited) = inner.granted.remove(&ticket) {
                return Ok(Permit {
                    gate: self.clone(),
                    limited,
                    holder: None,
                    nested: false,
                });
            }
            inner = match wait {
                // Only time frees the head (a limit or a reservation not yet due): sleep
                // until then, or until a permit is dropped.
                Some(until) => {
                    let d = Duration::from_secs_f64((until - self.now()).max(0.0));
                    self.cv
                        .wait_timeout(inner, d.max(Duration::from_micros(50)))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.cv.wait(inner).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed_clock() -> Clock {
        let t = Instant::now();
        Arc::new(move || t)
    }

    /// Requests queued behind a held permit come out in the scheduler's order: the high
    /// class's before the low one's, though the low ones queued first.
    #[test]
    fn waiting_threads_are_let_through_high_first() {
        let gate = Arc::new(Gate::new(1, fixed_clock()));
        let low = ClassKey::Stage("qos/low".into());
        let high = ClassKey::Stage("qos/high".into());
        gate.set_class(low.clone(), Params::new(0.0, 1.0, None, None).unwrap());
        gate.set_class(high.clone(), Params::new(0.0, 16.0, None, None).unwrap());
        let order = Arc::new(Mutex::new(Vec::new()));
        let blocker = gate.acquire(&low, 4096).unwrap();
        let mut threads = Vec::new();
        for (i, class) in [(0, &low), (1, &low), (2, &high), (3, &high)] {
            let (g, order, c) = (gate.clone(), order.clone(), class.clone());
            threads.push(std::thread::spawn(move || {
                let _p = g.acquire(&c, 4096).unwrap();
                order.lock().unwrap().push(i);
            }));
            // One at a time, so the low ones are queued first.
            let queued = || {
                let inner = gate.lock();
                inner.sched.queued(&low) + inner.sched.queued(&high)
            };
            while queued() < i + 1 {
                std::thread::yield_now();
            }
        }
        drop(blocker);
        for t in threads {
            t.join().unwrap();
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(
            order[..2].iter().filter(|i| **i >= 2).count(),
            2,
            "{order:?}"
        );
        assert_eq!(gate.counters(&high).unwrap().contended, 2);
    }

    #[test]
    fn an_unknown_class_is_refused() {
        let gate = Arc::new(Gate::new(1, fixed_clock()));
        let nobody = ClassKey::Stage("qos/nobody".into());
        assert!(gate.acquire(&nobody, 1).is_err());
        // Nothing was left holding a slot: the declared class (always there) gets through.
        drop(gate.acquire(&ClassKey::Declared, 1).unwrap());
        drop(gate.acquire(&ClassKey::Declared, 1).unwrap());
    }

    /// The declared-IO dispatcher's reads wait behind a low tenant's (weight 1 against 2):
    /// of equal reads queued together, the tenant's two go for each of the dispatcher's.
    #[test]
    fn declared_io_goes_after_even_a_low_tenant() {
        let gate = Arc::new(Gate::new(1, fixed_clock()));
        let low = ClassKey::Stage("qos/low".into());
        let config = lachesis_switch::RateLimitConfig {
            name: "qos/low".into(),
            owner: None,
            iops: None,
            bytes_per_s: None,
            min_bytes_per_s: None,
            priority: Some(lachesis_switch::Priority::Low),
        };
        gate.set_class(low.clone(), super::super::classes::params(&config).unwrap());
        let mut inner = gate.lock();
        for i in 0..4 {
            inner
                .sched
                .enqueue(&ClassKey::Declared, 4096, i, 0.0)
                .unwrap();
            inner.sched.enqueue(&low, 4096, 10 + i, 0.0).unwrap();
        }
        let mut order = Vec::new();
        while let Next::Dispatch { class, .. } = inner.sched.dispatch(0.0) {
            order.push(class == ClassKey::Declared);
        }
        // Ties (the tenant's 2nd and the dispatcher's 1st) go to the tenant (Stage < Declared).
        assert_eq!(order, [false, false, true, false, false, true, true, true]);
    }

    /// A route through two qos stages: the second is entered inside the first's slot instead
    /// of waiting forever for a second one.
    #[test]
    fn a_thread_inside_a_slot_enters_again_without_waiting() {
        let gate = Arc::new(Gate::new(1, fixed_clock()));
        let a = ClassKey::Stage("qos/a".into());
        gate.set_class(a.clone(), Params::new(0.0, 1.0, None, None).unwrap());
        let outer = gate.enter(&a, 10).unwrap();
        let inner = gate.enter(&ClassKey::Declared, 10).unwrap();
        drop(inner);
        drop(outer);
        // Both slots given back: another thread gets in.
        let g = gate.clone();
        std::thread::spawn(move || drop(g.enter(&a, 10).unwrap()))
            .join()
            .unwrap();
        assert_eq!(
            gate.counters(&ClassKey::Stage("qos/a".into()))
                .unwrap()
                .dispatched,
            2
        );
    }

    /// A request that queued while the slot was taken and whose class's limit holds it once
    /// the slot frees still goes, when the limit lets it (nothing else happens to wake it).
    #[test]
    fn a_limited_request_queued_behind_a_held_slot_goes_when_its_limit_allows() {
        let gate = Arc::new(Gate::new(1, Arc::new(Instant::now)));
        let capped = ClassKey::Stage("qos/capped".into());
        // 10 bytes each at 1,000 bytes/s: the second may go 10 ms after the first.
        gate.set_class(
            capped.clone(),
            Params::new(0.0, 1.0, Some(1000.0), None).unwrap(),
        );
        let first = gate.acquire(&capped, 10).unwrap();
        let (g, c) = (gate.clone(), capped.clone());
        let second = std::thread::spawn(move || g.acquire(&c, 10).unwrap().limited());
        while gate.lock().sched.queued(&capped) == 0 {
            std::thread::yield_now();
        }
        drop(first);
        assert!(second.join().unwrap(), "held by the limit, then let go");
        assert_eq!(gate.counters(&capped).unwrap().dispatched, 2);
    }
}
