//! Quiesce and drain of flows (a flow = the IO one rule matches), for consistent rollouts:
//! quiesce stops admitting the flow's IO, drain waits until its in-flight IO has finished,
//! resume lets held IO go on.
//!
//! Per flow the gates also count the IO admitted so far and the IO waiting at a quiesced
//! gate: the agent logs them at drain and resume, so a log shows that no IO of a quiesced
//! flow was admitted in between and that IO was held (tests order events by these counters,
//! not by clocks).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Flow {
    quiesced: bool,
    in_flight: usize,
    /// IO admitted since the flow was first seen (only grows).
    admitted: u64,
    /// IO waiting for the flow to resume.
    waiting: usize,
}

#[derive(Default)]
pub struct Gates {
    flows: Mutex<HashMap<String, Flow>>,
    changed: Condvar,
}

/// Admission of one IO; the IO counts as in flight until this is dropped.
pub struct Admitted<'a> {
    gates: &'a Gates,
    flow: Option<String>,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.flow.take() {
            let mut flows = self.gates.lock();
            if let Some(fl) = flows.get_mut(&f) {
                fl.in_flight -= 1;
            }
            drop(flows);
            self.gates.changed.notify_all();
        }
    }
}

impl Gates {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Flow>> {
        self.flows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits an IO of `flow` (`None`: IO no rule matched, never held), waiting while the
    /// flow is quiesced.
    pub fn admit(&self, flow: Option<&str>) -> Admitted<'_> {
        let Some(name) = flow else {
            return Admitted {
                gates: self,
                flow: None,
            };
        };
        let mut flows = self.lock();
        let mut waited = false;
        loop {
            let fl = flows.entry(name.to_string()).or_default();
            if !fl.quiesced {
                if waited {
                    fl.waiting -= 1;
                }
                fl.in_flight += 1;
                fl.admitted += 1;
                break;
            }
            if !waited {
                waited = true;
                fl.waiting += 1;
                if fl.waiting == 1 {
                    tracing::info!(flow = name, "IO held at the quiesced flow");
                }
            }
            flows = self.changed.wait(flows).unwrap_or_else(|e| e.into_inner());
        }
        Admitted {
            gates: self,
            flow: Some(name.to_string()),
        }
    }

    /// Stops admitting new IO of `flow`.
    pub fn quiesce(&self, flow: &str) {
        self.lock().entry(flow.to_string()).or_default().quiesced = true;
    }

    /// Waits until no IO of `flow` is in flight; false if `timeout` passed first.
    pub fn drain(&self, flow: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut flows = self.lock();
        loop {
            if flows.get(flow).is_none_or(|f| f.in_flight == 0) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            flows = self
                .changed
                .wait_timeout(flows, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Admits `flow` again and wakes the IO held on it.
    pub fn resume(&self, flow: &str) {
        if let Some(f) = self.lock().get_mut(flow) {
            f.quiesced = false;
        }
        self.changed.notify_all();
    }

    pub fn is_quiesced(&self, flow: &str) -> bool {
        self.lock().get(flow).is_some_and(|f| f.quiesced)
    }

    pub fn in_flight(&self, flow: &str) -> usize {
        self.lock().get(flow).map_or(0, |f| f.in_flight)
    }

    /// IO of `flow` admitted so far.
    pub fn admitted(&self, flow: &str) -> u64 {
        self.lock().get(flow).map_or(0, |f| f.admitted)
    }

    /// IO of `flow` waiting at its quiesced gate.
    pub fn waiting(&self, flow: &str) -> usize {
        self.lock().get(flow).map_or(0, |f| f.waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn quiesce_holds_new_io_and_drain_waits_for_in_flight() {
        let g = Arc::new(Gates::default());
        let a = g.admit(Some("r1"));
        g.quiesce("r1");
        // One IO in flight, which nothing finishes: drain gives up, whatever the timeout.
        assert!(!g.drain("r1", Duration::ZERO));
        let done = Arc::new(AtomicBool::new(false));
        let (g2, d2) = (g.clone(), done.clone());
        let held = std::thread::spawn(move || {
            let _x = g2.admit(Some("r1"));
            d2.store(true, Ordering::SeqCst);
        });
        // The new IO reached the gate and waits there (the deadline only turns a hang into
        // a failure).
        let t = Instant::now();
        while g.waiting("r1") == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the IO never reached the gate"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!done.load(Ordering::SeqCst), "a quiesced flow admitted IO");
        assert_eq!(g.admitted("r1"), 1);
        // Other flows and unmatched IO are not held.
        drop(g.admit(Some("r2")));
        drop(g.admit(None));
        drop(a);
        assert!(g.drain("r1", Duration::ZERO));
        assert!(!done.load(Ordering::SeqCst), "drained, but still quiesced");
        g.resume("r1");
        held.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(
            (g.in_flight("r1"), g.waiting("r1"), g.admitted("r1")),
            (0, 0, 2)
        );
        assert_eq!(g.admitted("r2"), 1);
    }
}
