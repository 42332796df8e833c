//! Quiesce, drain and resume of flows: the hook between the control path (two-phase
//! rollouts, [`crate::runner`]) and the data path that carries the IO.
//!
//! The data path (the FUSE switch in `agents/fs`) implements [`FlowControl`]; until it is
//! plugged in, the agent uses [`InFlightGate`], an in-process implementation that admits,
//! counts and releases operations, so the protocol is exercised end to end with or without
//! real IO. A data path can also use [`InFlightGate`] directly: call [`InFlightGate::admit`]
//! (or [`InFlightGate::admit_wait`]) before each operation and drop the guard after it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lachesis_switch::{IoHeader, Match, Op};
use tokio::sync::Notify;
use tokio::time::{sleep, Instant};

/// What the control path asks of the data path.
pub trait FlowControl: Send + Sync {
    /// Stop admitting new IO matching any of `flows` (added to the flows already quiesced).
    /// IO already admitted goes on.
    fn quiesce(&self, flows: &[Match]);
    /// Operations of quiesced flows admitted before the quiesce and still in flight.
    fn in_flight(&self) -> u64;
    /// Admit IO of every flow again; IO held back by the quiesce proceeds.
    fn resume(&self);
    /// IO of the quiesced flows admitted so far (a count that only grows), or `None` where
    /// the data path does not count it. Logged at drain and at resume: the same count at both
    /// shows that no IO of the flows was admitted in between, without comparing clocks.
    fn admitted(&self) -> Option<u64>;
    /// IO of the quiesced flows waiting for the resume.
    fn waiting(&self) -> u64;
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// No quiesced IO in flight any more; `waited_for` were in flight when the drain began.
    Done { waited_for: u64 },
    /// The timeout passed with `left` operations still in flight.
    TimedOut { left: u64 },
}

/// Wait until no IO of the quiesced flows is in flight, up to `timeout`.
///
/// Polls (every millisecond) rather than asking the data path for a wake-up, so the trait
/// stays three plain methods any data path can implement.
pub async fn drain(ctl: &dyn FlowControl, timeout: Duration) -> Drained {
    let deadline = Instant::now() + timeout;
    let waited_for = ctl.in_flight();
    loop {
        let left = ctl.in_flight();
        if left == 0 {
            return Drained::Done { waited_for };
        }
        if Instant::now() >= deadline {
            return Drained::TimedOut { left };
        }
        sleep(Duration::from_millis(1)).await;
    }
}

/// The header of an admitted operation, kept to decide later whether it belongs to a flow
/// quiesced after it was admitted.
#[derive(Debug, Clone)]
struct OwnedHeader {
    op: Op,
    tenant: Option<String>,
    path: Option<String>,
    key: Option<String>,
    offset: u64,
    length: u64,
}

impl OwnedHeader {
    fn of(h: &IoHeader<'_>) -> Self {
        OwnedHeader {
            op: h.op,
            tenant: h.tenant.map(str::to_owned),
            path: h.path.map(str::to_owned),
            key: h.key.map(str::to_owned),
            offset: h.offset,
            length: h.length,
        }
    }

    fn matches(&self, m: &Match) -> bool {
        let mut h = IoHeader::new(self.op).at(self.offset, self.length);
        if let Some(t) = &self.tenant {
            h = h.tenant(t);
        }
        if let Some(p) = &self.path {
            h = h.path(p);
        }
        if let Some(k) = &self.key {
            h = h.key(k);
        }
        m.matches(&h)
    }
}

#[derive(Debug, Default)]
struct Inner {
    quiesced: Vec<Match>,
    ops: HashMap<u64, OwnedHeader>,
    next_id: u64,
    /// Callers of `admit_wait` waiting for a resume.
    waiting: u64,
}

/// In-process [`FlowControl`]: counts the operations in flight and refuses new ones of
/// quiesced flows.
#[derive(Debug, Default)]
pub struct InFlightGate {
    inner: Mutex<Inner>,
    resumed: Notify,
}

/// An admitted operation; dropping it ends the operation.
#[derive(Debug)]
pub struct OpGuard {
    gate: Arc<InFlightGate>,
    id: u64,
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        self.gate.lock().ops.remove(&self.id);
    }
}

impl InFlightGate {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves plain data behind: keep using it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admit an operation, or `None` while its flow is quiesced.
    pub fn admit(self: &Arc<Self>, h: &IoHeader<'_>) -> Option<OpGuard> {
        let mut inner = self.lock();
        if inner.quiesced.iter().any(|m| m.matches(h)) {
            return None;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.ops.insert(id, OwnedHeader::of(h));
        Some(OpGuard {
            gate: Arc::clone(self),
            id,
        })
    }

    /// Admit an operation, waiting while its flow is quiesced.
    pub async fn admit_wait(self: &Arc<Self>, h: &IoHeader<'_>) -> OpGuard {
        /// Counts the caller in [`InFlightGate::waiting`] until it is admitted or gives up.
        struct Waiting<'a>(&'a InFlightGate);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.lock().waiting -= 1;
            }
        }
        let mut waiting = None;
        loop {
            // Registered before the check, so a resume between the check and the await
            // is not lost.
            let resumed = self.resumed.notified();
            if let Some(guard) = self.admit(h) {
                return guard;
            }
            if waiting.is_none() {
                self.lock().waiting += 1;
                waiting = Some(Waiting(self));
            }
            resumed.await;
        }
    }

    /// Operations in flight, of any flow.
    pub fn total_in_flight(&self) -> u64 {
        self.lock().ops.len() as u64
    }

    /// Whether some flow is quiesced.
    pub fn is_quiesced(&self) -> bool {
        !self.lock().quiesced.is_empty()
    }
}

impl FlowControl for InFlightGate {
    fn quiesce(&self, flows: &[Match]) {
        let mut inner = self.lock();
        for f in flows {
            if !inner.quiesced.contains(f) {
                inner.quiesced.push(f.clone());
            }
        }
    }

    fn in_flight(&self) -> u64 {
        let inner = self.lock();
        inner
            .ops
            .values()
            .filter(|op| inner.quiesced.iter().any(|m| op.matches(m)))
            .count() as u64
    }

    fn resume(&self) {
        self.lock().quiesced.clear();
        self.resumed.notify_waiters();
    }

    /// Not counted: this gate refuses IO of a quiesced flow outright ([`Self::admit`]).
    fn admitted(&self) -> Option<u64> {
        None
    }

    fn waiting(&self) -> u64 {
        self.lock().waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::Poll;

    /// A gate that signals each `in_flight` question asked after the first (the drain's
    /// first look, which decides what it waited for).
    struct Counted {
        gate: Arc<InFlightGate>,
        calls: std::sync::atomic::AtomicU64,
        asked: Notify,
    }

    impl Counted {
        fn new(gate: Arc<InFlightGate>) -> Arc<Self> {
            Arc::new(Counted {
                gate,
                calls: Default::default(),
                asked: Notify::new(),
            })
        }
    }

    impl FlowControl for Counted {
        fn quiesce(&self, flows: &[Match]) {
            self.gate.quiesce(flows)
        }
        fn in_flight(&self) -> u64 {
            let n = self.gate.in_flight();
            if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1 {
                self.asked.notify_one();
            }
            n
        }
        fn resume(&self) {
            self.gate.resume()
        }
        fn admitted(&self) -> Option<u64> {
            self.gate.admitted()
        }
        fn waiting(&self) -> u64 {
            self.gate.waiting()
        }
    }

    fn read(tenant: &str) -> IoHeader<'_> {
        IoHeader::new(Op::Read)
            .tenant(tenant)
            .path("/data/x")
            .at(0, 4096)
    }

    #[tokio::test]
    async fn quiesce_refuses_new_io_of_the_flow_only_and_drain_waits_for_old_io() {
        let gate = InFlightGate::new();
        let before = gate.admit(&read("a")).expect("nothing quiesced yet");
        let other = gate.admit(&read("b")).unwrap();
        gate.quiesce(&[Match::any().tenant("a")]);
        assert!(gate.admit(&read("a")).is_none());
        assert!(gate.admit(&read("b")).is_some());
        // Only the IO of the quiesced flow counts, though both are in flight.
        assert_eq!(gate.in_flight(), 1);
        assert_eq!(gate.total_in_flight(), 2);

        // Nothing finishes the IO: the drain gives up, however long it waits.
        assert_eq!(
            drain(gate.as_ref(), Duration::ZERO).await,
            Drained::TimedOut { left: 1 }
        );
        // The IO finishes once the drain has begun (has asked the gate twice: for what it
        // waits for, then in its loop): it waited for one and then saw none.
        let counted = Counted::new(gate.clone());
        let c = Arc::clone(&counted);
        let finisher = tokio::spawn(async move {
            c.asked.notified().await;
            drop(before);
            c.gate.total_in_flight()
        });
        assert_eq!(
            drain(counted.as_ref(), Duration::from_secs(60)).await,
            Drained::Done { waited_for: 1 }
        );
        assert_eq!(finisher.await.unwrap(), 1);
        drop(other);
        assert_eq!(gate.total_in_flight(), 0);
    }

    #[tokio::test]
    async fn resume_lets_waiting_io_through() {
        let gate = InFlightGate::new();
        gate.quiesce(&[Match::any().tenant("a")]);
        gate.quiesce(&[Match::any().tenant("a")]);
        assert!(gate.is_quiesced());
        // Polled once: refused and waiting, not admitted.
        let h = read("a");
        let mut waiter = std::pin::pin!(gate.admit_wait(&h));
        assert!(
            std::future::poll_fn(|cx| Poll::Ready(waiter.as_mut().poll(cx).is_pending())).await
        );
        assert_eq!((gate.waiting(), gate.total_in_flight()), (1, 0));
        gate.resume();
        let guard = tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("resume woke the waiter");
        assert_eq!((gate.waiting(), gate.total_in_flight()), (0, 1));
        drop(guard);
        assert!(!gate.is_quiesced());
        assert_eq!(
            drain(gate.as_ref(), Duration::ZERO).await,
            Drained::Done { waited_for: 0 }
        );
    }
}
