//! Quiesce, drain and resume of flows: the hook between the control path (two-phase
//! rollouts, [`crate::runner`]) and the data path that carries the IO.
//!
//! The data path (the FUSE switch in `agents/fs`) implements [`FlowControl`]; until it is
//! plugged in, the agent uses [`InFlightGate`], an in-process implementation on the switch's
//! quiesce gate ([`lachesis_switch::gate`]) that admits, counts and releases operations, so the protocol is exercised end to end with or without
//! real IO. A data path can also use [`InFlightGate`] directly: call [`InFlightGate::admit`]
//! (or [`InFlightGate::admit_wait`]) before each operation and drop the guard after it.

use std::sync::Arc;
use std::time::Duration;

use lachesis_switch::{Admitted, Gate, IoHeader, Match, OwnedIoHeader, Waiting};
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

/// The in-process gate keys IO by its header and quiesces header matches.
type HeaderGate = Gate<OwnedIoHeader, Match>;

/// In-process [`FlowControl`] on the switch's [`Gate`]: counts the operations in flight and
/// refuses new ones of quiesced flows.
#[derive(Default)]
pub struct InFlightGate {
    gate: Arc<HeaderGate>,
    resumed: Notify,
}

/// An admitted operation; dropping it ends the operation.
pub type OpGuard = Admitted<Arc<HeaderGate>, OwnedIoHeader>;

impl InFlightGate {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Admit an operation, or `None` while its flow is quiesced.
    pub fn admit(self: &Arc<Self>, h: &IoHeader<'_>) -> Option<OpGuard> {
        Gate::try_admit(Arc::clone(&self.gate), OwnedIoHeader::of(h))
    }

    /// Admit an operation, waiting while its flow is quiesced (counted in
    /// [`FlowControl::waiting`] meanwhile).
    pub async fn admit_wait(self: &Arc<Self>, h: &IoHeader<'_>) -> OpGuard {
        let mut waiting = None;
        loop {
            // Registered before the check, so a resume between the check and the await
            // is not lost.
            let resumed = self.resumed.notified();
            let tried = match waiting.take() {
                None => Gate::admit_or_wait(Arc::clone(&self.gate), OwnedIoHeader::of(h)),
                Some(w) => Waiting::retry(w),
            };
            match tried {
                Ok(guard) => return guard,
                Err(w) => waiting = Some(w),
            }
            resumed.await;
        }
    }

    /// Operations in flight, of any flow.
    pub fn total_in_flight(&self) -> u64 {
        self.gate.total_in_flight()
    }

    /// Whether some flow is quiesced.
    pub fn is_quiesced(&self) -> bool {
        self.gate.any_quiesced()
    }
}

impl FlowControl for InFlightGate {
    fn quiesce(&self, flows: &[Match]) {
        for f in flows {
            self.gate.quiesce(f.clone());
        }
    }

    fn in_flight(&self) -> u64 {
        self.gate.held_in_flight()
    }

    fn resume(&self) {
        self.gate.resume_all();
        self.resumed.notify_waiters();
    }

    /// Not counted: this gate refuses IO of a quiesced flow outright ([`Self::admit`]).
    fn admitted(&self) -> Option<u64> {
        None
    }

    fn waiting(&self) -> u64 {
        self.gate.total_waiting()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_switch::Op;
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
