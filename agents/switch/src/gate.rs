//! The quiesce gate of every data path, for consistent rollouts: quiesce stops admitting the
//! IO of a flow, drain waits until the flow's in-flight IO has finished, resume lets the held
//! IO go on.
//!
//! IO enters the gate under a key `K`; a quiesce names flows `F` that [`Selects`] keys. The
//! FUSE switch keys IO by the rule it matched and quiesces rules by name (`Gate<String,
//! String>`); the agent's in-process gate keys IO by its header and quiesces header matches
//! (`Gate<OwnedIoHeader, Match>`), so IO admitted before a quiesce counts as in flight for
//! every flow quiesced later that matches it.
//!
//! Per key the gate also counts the IO admitted so far and the IO waiting at a quiesced gate:
//! the agent logs them at drain and resume, so a log shows that no IO of a quiesced flow was
//! admitted in between and that IO was held (tests order events by these counters, not by
//! clocks).
//!
//! Admission takes the mutex once and looks its key up once, however many flows are held,
//! and allocates nothing for a key seen before (it is on the FUSE switch's IO path); leaving
//! takes the mutex once more. Quiesce and resume, rare, visit every key.

use std::collections::HashMap;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::rule::Match;
use crate::table::OwnedIoHeader;

/// Whether a quiesced flow holds the IO admitted under a key.
pub trait Selects<K: ?Sized> {
    fn selects(&self, key: &K) -> bool;
}

/// A flow named like its key (a rule name) holds the IO admitted under that name.
impl Selects<str> for String {
    fn selects(&self, key: &str) -> bool {
        self == key
    }
}

impl Selects<String> for String {
    fn selects(&self, key: &String) -> bool {
        self == key
    }
}

/// A header match holds the IO it matches.
impl Selects<OwnedIoHeader> for Match {
    fn selects(&self, key: &OwnedIoHeader) -> bool {
        self.matches(&key.header())
    }
}

/// The flows a quiesce holds, each once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held<F> {
    flows: Vec<F>,
}

impl<F> Default for Held<F> {
    fn default() -> Self {
        Held { flows: Vec::new() }
    }
}

impl<F: PartialEq> Held<F> {
    /// Holds `flow` too (once).
    pub fn hold(&mut self, flow: F) {
        if !self.flows.contains(&flow) {
            self.flows.push(flow);
        }
    }

    /// Lets `flow` go.
    pub fn release<Q: ?Sized>(&mut self, flow: &Q)
    where
        F: PartialEq<Q>,
    {
        self.flows.retain(|f| f != flow);
    }

    pub fn release_all(&mut self) {
        self.flows.clear();
    }

    /// Keeps only the flows `keep` says.
    pub fn retain(&mut self, keep: impl FnMut(&F) -> bool) {
        self.flows.retain(keep);
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Whether some held flow holds the IO of `key`.
    pub fn holds<K: ?Sized>(&self, key: &K) -> bool
    where
        F: Selects<K>,
    {
        self.flows.iter().any(|f| f.selects(key))
    }
}

/// The counters of one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounts {
    /// IO admitted and not yet finished.
    pub in_flight: u64,
    /// IO admitted so far (only grows while the gate keeps the key, see [`Gate::counting`]).
    pub admitted: u64,
    /// IO waiting at the quiesced gate.
    pub waiting: u64,
}

impl FlowCounts {
    fn idle(&self) -> bool {
        self.in_flight == 0 && self.waiting == 0
    }
}

/// What the gate knows of one key.
#[derive(Default)]
struct KeyState {
    counts: FlowCounts,
    /// Whether a held flow selects the key: decided when the key is first seen and at each
    /// quiesce and resume, so that admission is one hash lookup however many flows are held.
    held: bool,
}

struct State<K, F> {
    held: Held<F>,
    keys: HashMap<K, KeyState>,
    /// Threads in [`Gate::drain`] waiting for IO to leave: an IO leaving wakes them only when
    /// there are some (a condvar's notify is a system call, and leaving is on every IO).
    draining: usize,
}

impl<K: Hash + Eq + Clone, F: Selects<K>> State<K, F> {
    fn key_mut(&mut self, key: &K) -> &mut KeyState {
        // Looked up before inserting: no clone of a key seen before.
        if !self.keys.contains_key(key) {
            let held = self.held.flows.iter().any(|f| f.selects(key));
            self.keys.insert(
                key.clone(),
                KeyState {
                    held,
                    ..KeyState::default()
                },
            );
        }
        self.keys.get_mut(key).expect("inserted above")
    }

    fn is_held(&self, key: &K) -> bool {
        self.keys.get(key).is_some_and(|k| k.held)
    }

    /// Decides again, after the held flows changed, which keys they hold.
    fn rehold(&mut self) {
        let State { held, keys, .. } = self;
        for (k, s) in keys.iter_mut() {
            s.held = held.flows.iter().any(|f| f.selects(k));
        }
    }

    fn in_flight_where(&self, select: impl Fn(&K, &KeyState) -> bool) -> u64 {
        self.keys
            .iter()
            .filter(|(k, s)| select(k, s))
            .map(|(_, s)| s.counts.in_flight)
            .sum()
    }
}

/// Holds new IO of quiesced flows, counts the IO in flight, waits for drains, releases on
/// resume.
pub struct Gate<K, F> {
    state: Mutex<State<K, F>>,
    changed: Condvar,
    /// Keep the counters of keys with nothing in flight or waiting, for `admitted`. Only for a
    /// bounded set of keys (rule names); keys per header are forgotten when idle.
    keep_idle: bool,
    /// Told when the first IO of a key starts waiting (a log line).
    on_hold: Option<fn(&K)>,
}

/// Admission of one IO; the IO counts as in flight until this is dropped. `G` is how it
/// reaches the gate: a borrow on the IO path, an `Arc` for an IO that outlives the call.
pub struct Admitted<G, K>
where
    G: Deref,
    G::Target: Door<K>,
{
    /// `None`: IO no flow claims (never held, not counted).
    entered: Option<(G, K)>,
}

/// An IO waiting at a quiesced gate, counted in `waiting` until admitted or dropped.
pub struct Waiting<G, K>
where
    G: Deref,
    G::Target: Door<K>,
{
    /// Taken when admitted.
    at: Option<(G, K)>,
}

/// What the guards ask of their gate (implemented by [`Gate`]).
pub trait Door<K> {
    /// Admits `key` if no held flow selects it; `waited`: the caller is counted as waiting.
    fn enter(&self, key: &K, waited: bool) -> bool;
    /// Ends an admitted IO.
    fn leave(&self, key: &K);
    /// Counts a waiting IO out.
    fn stop_waiting(&self, key: &K);
}

impl<G: Deref, K> Drop for Admitted<G, K>
where
    G::Target: Door<K>,
{
    fn drop(&mut self) {
        if let Some((gate, key)) = self.entered.take() {
            gate.leave(&key);
        }
    }
}

impl<G: Deref, K> Drop for Waiting<G, K>
where
    G::Target: Door<K>,
{
    fn drop(&mut self) {
        if let Some((gate, key)) = self.at.take() {
            gate.stop_waiting(&key);
        }
    }
}

impl<G: Deref, K> Waiting<G, K>
where
    G::Target: Door<K>,
{
    /// Admitted if the flow was resumed since; still waiting (and counted once) otherwise.
    pub fn retry(mut self) -> Result<Admitted<G, K>, Self> {
        let (gate, key) = self.at.take().expect("only taken when admitted");
        if gate.enter(&key, true) {
            Ok(Admitted {
                entered: Some((gate, key)),
            })
        } else {
            Err(Waiting {
                at: Some((gate, key)),
            })
        }
    }
}

impl<K: Hash + Eq + Clone, F: Selects<K> + PartialEq> Gate<K, F> {
    /// A gate that forgets a key once nothing of it is in flight or waiting (keys per IO
    /// header); `admitted` counts only while IO of the key is in flight.
    pub fn new() -> Self {
        Gate {
            state: Mutex::new(State {
                held: Held::default(),
                keys: HashMap::new(),
                draining: 0,
            }),
            changed: Condvar::new(),
            keep_idle: false,
            on_hold: None,
        }
    }

    /// A gate that keeps every key's counters (a bounded set of keys: rule names), so
    /// `admitted` only grows.
    pub fn counting() -> Self {
        Gate {
            keep_idle: true,
            ..Self::new()
        }
    }

    /// Calls `f` when the first IO of a key starts waiting at the quiesced gate.
    pub fn on_hold(mut self, f: fn(&K)) -> Self {
        self.on_hold = Some(f);
        self
    }

    fn lock(&self) -> MutexGuard<'_, State<K, F>> {
        // A panic elsewhere while holding the lock leaves plain counters behind: keep using
        // them.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits an IO under `key` (`None`: IO no flow claims, never held), blocking the thread
    /// while a quiesced flow holds it.
    pub fn admit<G: Deref<Target = Self>>(gate: G, key: Option<K>) -> Admitted<G, K> {
        let Some(key) = key else {
            return Admitted { entered: None };
        };
        let mut waiting = match Self::admit_or_wait(gate, key) {
            Ok(admitted) => return admitted,
            Err(waiting) => waiting,
        };
        loop {
            {
                let (gate, key) = waiting.at.as_ref().expect("waiting");
                let state = gate.lock();
                if state.is_held(key) {
                    drop(gate.changed.wait(state).unwrap_or_else(|e| e.into_inner()));
                }
            }
            waiting = match waiting.retry() {
                Ok(admitted) => return admitted,
                Err(w) => w,
            };
        }
    }

    /// Blocks the thread while a quiesced flow holds `key` (counted as waiting), and returns
    /// without admitting: for an IO that found its flow held by [`Gate::try_admit`] while it
    /// held locks, let them go, and must wait with none held before it tries again (a held IO
    /// that keeps a lock can stall what the rollout that resumes it needs).
    pub fn wait_while_held<G: Deref<Target = Self>>(gate: G, key: K) {
        let mut state = gate.lock();
        let k = state.key_mut(&key);
        if !k.held {
            if !gate.keep_idle && k.counts.idle() {
                state.keys.remove(&key);
            }
            return;
        }
        gate.start_waiting(state, &key);
        let mut state = gate.lock();
        while state.is_held(&key) {
            state = gate.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        drop(state);
        gate.stop_waiting(&key);
    }

    /// Admits an IO under `key`, or `None` while a quiesced flow holds it (not counted as
    /// waiting).
    pub fn try_admit<G: Deref<Target = Self>>(gate: G, key: K) -> Option<Admitted<G, K>> {
        gate.enter(&key, false).then(|| Admitted {
            entered: Some((gate, key)),
        })
    }

    /// Admits an IO under `key`, or counts it as waiting while a quiesced flow holds it
    /// ([`Waiting::retry`] after a resume).
    pub fn admit_or_wait<G: Deref<Target = Self>>(
        gate: G,
        key: K,
    ) -> Result<Admitted<G, K>, Waiting<G, K>> {
        let mut state = gate.lock();
        if gate.enter_locked(&mut state, &key, false) {
            drop(state);
            return Ok(Admitted {
                entered: Some((gate, key)),
            });
        }
        gate.start_waiting(state, &key);
        Err(Waiting {
            at: Some((gate, key)),
        })
    }

    /// Counts one more IO of `key` waiting at the quiesced gate, lets the lock go, and tells
    /// `on_hold` when it is the key's first.
    fn start_waiting(&self, mut state: MutexGuard<'_, State<K, F>>, key: &K) {
        let c = &mut state.key_mut(key).counts;
        c.waiting += 1;
        let first = c.waiting == 1;
        drop(state);
        if let Some(f) = self.on_hold.filter(|_| first) {
            f(key);
        }
    }

    fn enter_locked(&self, state: &mut State<K, F>, key: &K, waited: bool) -> bool {
        let k = state.key_mut(key);
        if k.held {
            if !self.keep_idle && k.counts.idle() {
                state.keys.remove(key);
            }
            return false;
        }
        let c = &mut k.counts;
        if waited {
            c.waiting -= 1;
        }
        c.in_flight += 1;
        c.admitted += 1;
        true
    }

    /// Applies `f` to the counters of `key`, forgetting them when idle unless kept; whether
    /// a drain is waiting.
    fn count_out(&self, key: &K, f: impl FnOnce(&mut FlowCounts)) -> bool {
        let mut state = self.lock();
        if let Some(k) = state.keys.get_mut(key) {
            f(&mut k.counts);
            if !self.keep_idle && k.counts.idle() {
                state.keys.remove(key);
            }
        }
        state.draining > 0
    }

    /// Stops admitting new IO of `flow` (added to the flows already held). IO already admitted
    /// goes on.
    pub fn quiesce(&self, flow: F) {
        let mut state = self.lock();
        for (k, s) in state.keys.iter_mut() {
            s.held |= flow.selects(k);
        }
        state.held.hold(flow);
    }

    /// Admits `flow` again and wakes the IO held on it.
    pub fn resume<Q: ?Sized>(&self, flow: &Q)
    where
        F: PartialEq<Q>,
    {
        let mut state = self.lock();
        state.held.release(flow);
        state.rehold();
        drop(state);
        self.changed.notify_all();
    }

    /// Admits every flow again and wakes the IO held.
    pub fn resume_all(&self) {
        let mut state = self.lock();
        state.held.release_all();
        state.rehold();
        drop(state);
        self.changed.notify_all();
    }

    /// Whether `flow` is held.
    pub fn is_quiesced<Q: ?Sized>(&self, flow: &Q) -> bool
    where
        F: PartialEq<Q>,
    {
        self.lock().held.flows.iter().any(|f| f == flow)
    }

    /// Whether some flow is held.
    pub fn any_quiesced(&self) -> bool {
        !self.lock().held.is_empty()
    }

    /// Waits until no IO that `flow` selects is in flight; false if `timeout` passed first.
    pub fn drain(&self, flow: &F, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if state.in_flight_where(|k, _| flow.selects(k)) == 0 {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state.draining += 1;
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            state.draining -= 1;
        }
    }

    /// The counters of `key` (zero for a key never seen or forgotten).
    pub fn counts<Q: ?Sized + Hash + Eq>(&self, key: &Q) -> FlowCounts
    where
        K: std::borrow::Borrow<Q>,
    {
        self.lock()
            .keys
            .get(key)
            .map_or_else(FlowCounts::default, |k| k.counts)
    }

    /// IO in flight that some held flow selects.
    pub fn held_in_flight(&self) -> u64 {
        self.lock().in_flight_where(|_, s| s.held)
    }

    /// IO in flight, of any key.
    pub fn total_in_flight(&self) -> u64 {
        self.lock().in_flight_where(|_, _| true)
    }

    /// IO waiting at the gate, of any key.
    pub fn total_waiting(&self) -> u64 {
        self.lock().keys.values().map(|k| k.counts.waiting).sum()
    }
}

impl<K: Hash + Eq + Clone, F: Selects<K> + PartialEq> Default for Gate<K, F> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone, F: Selects<K> + PartialEq> Door<K> for Gate<K, F> {
    fn enter(&self, key: &K, waited: bool) -> bool {
        self.enter_locked(&mut self.lock(), key, waited)
    }

    fn leave(&self, key: &K) {
        // A drain counted itself under the lock before waiting, so one that looked at the
        // in-flight count before this decrement is seen here.
        if self.count_out(key, |c| c.in_flight -= 1) {
            self.changed.notify_all();
        }
    }

    fn stop_waiting(&self, key: &K) {
        self.count_out(key, |c| c.waiting -= 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    type Rules = Gate<String, String>;

    fn admit<'g>(g: &'g Rules, flow: Option<&str>) -> Admitted<&'g Rules, String> {
        Gate::admit(g, flow.map(str::to_string))
    }

    /// Polls until `cond` holds (another thread got there); the count of polls only turns a
    /// hang into a failure, it is no duration the test depends on.
    fn wait_until(cond: impl Fn() -> bool, never: &str) {
        let mut polls = 0;
        while !cond() {
            polls += 1;
            assert!(polls < 60_000, "{never}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn quiesce_holds_new_io_and_drain_waits_for_in_flight() {
        let g = Arc::new(Rules::counting());
        let r1 = "r1".to_string();
        let a = admit(&g, Some("r1"));
        g.quiesce(r1.clone());
        // One IO in flight, which nothing finishes: drain gives up, whatever the timeout.
        assert!(!g.drain(&r1, Duration::ZERO));
        let done = Arc::new(AtomicBool::new(false));
        let (g2, d2) = (g.clone(), done.clone());
        let held = std::thread::spawn(move || {
            let _x = Gate::admit(g2.as_ref(), Some("r1".to_string()));
            d2.store(true, Ordering::SeqCst);
        });
        // The new IO reached the gate and waits there.
        wait_until(
            || g.counts("r1").waiting != 0,
            "the IO never reached the gate",
        );
        assert!(!done.load(Ordering::SeqCst), "a quiesced flow admitted IO");
        assert_eq!(g.counts("r1").admitted, 1);
        // Other flows and unmatched IO are not held.
        drop(admit(&g, Some("r2")));
        drop(admit(&g, None));
        drop(a);
        assert!(g.drain(&r1, Duration::ZERO));
        assert!(!done.load(Ordering::SeqCst), "drained, but still quiesced");
        g.resume("r1");
        held.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(
            g.counts("r1"),
            FlowCounts {
                in_flight: 0,
                waiting: 0,
                admitted: 2
            }
        );
        assert_eq!(g.counts("r2").admitted, 1);
    }

    #[test]
    fn a_waiting_drain_is_woken_by_the_last_io_leaving() {
        let g = Arc::new(Rules::counting());
        let r = "r".to_string();
        let a = admit(&g, Some("r"));
        g.quiesce(r.clone());
        let g2 = g.clone();
        // The timeout only turns a lost wake-up into a failure instead of a hang.
        let drain =
            std::thread::spawn(move || g2.drain(&"r".to_string(), Duration::from_secs(600)));
        wait_until(|| g.lock().draining != 0, "the drain never waited");
        drop(a);
        assert!(drain.join().unwrap(), "woken with nothing in flight");
        assert_eq!(g.lock().draining, 0);
    }

    #[test]
    fn waiting_while_held_counts_as_waiting_and_admits_nothing() {
        let g = Arc::new(Rules::counting());
        // Open: returns at once, nothing counted.
        Gate::wait_while_held(g.as_ref(), "r".to_string());
        assert_eq!(g.counts("r"), FlowCounts::default());
        g.quiesce("r".to_string());
        let g2 = g.clone();
        let waiter =
            std::thread::spawn(move || Gate::wait_while_held(g2.as_ref(), "r".to_string()));
        wait_until(
            || g.counts("r").waiting != 0,
            "the waiter never reached the gate",
        );
        assert!(!waiter.is_finished(), "returned while the flow is held");
        g.resume("r");
        waiter.join().unwrap();
        assert_eq!(
            g.counts("r"),
            FlowCounts::default(),
            "never admitted, no longer waiting"
        );
        // A gate keyed per header forgets the key again.
        let h = Gate::<String, String>::new();
        Gate::wait_while_held(&h, "x".to_string());
        assert!(h.lock().keys.is_empty());
    }

    #[test]
    fn a_header_gate_holds_what_a_later_quiesce_matches_and_forgets_idle_headers() {
        use crate::rule::Op;
        use crate::table::IoHeader;
        let g = Arc::new(Gate::<OwnedIoHeader, Match>::new());
        let io = |t: &str| OwnedIoHeader::of(&IoHeader::new(Op::Read).tenant(t).path("/d"));
        let a = Gate::try_admit(g.clone(), io("a")).expect("nothing quiesced");
        g.quiesce(Match::any().tenant("a"));
        assert!(g.any_quiesced());
        assert!(Gate::try_admit(g.clone(), io("a")).is_none());
        let b = Gate::try_admit(g.clone(), io("b")).expect("another flow");
        assert_eq!((g.held_in_flight(), g.total_in_flight()), (1, 2));
        let w = Gate::admit_or_wait(g.clone(), io("a")).err().expect("held");
        assert_eq!(g.total_waiting(), 1);
        let w = w.retry().err().expect("still held");
        assert_eq!(g.total_waiting(), 1);
        g.resume_all();
        let again = w.retry().ok().expect("resumed");
        assert_eq!((g.total_waiting(), g.total_in_flight()), (0, 3));
        drop((a, b, again));
        assert_eq!(g.counts(&io("a")), FlowCounts::default());
        assert!(g.lock().keys.is_empty());
    }

    #[test]
    fn resuming_one_flow_keeps_what_another_holds_and_new_keys_see_the_held_flows() {
        use crate::rule::Op;
        use crate::table::IoHeader;
        let g = Gate::<OwnedIoHeader, Match>::counting();
        let io = OwnedIoHeader::of(&IoHeader::new(Op::Write).tenant("a").path("/d/x"));
        let (by_tenant, by_path) = (Match::any().tenant("a"), Match::any().path_prefix("/d"));
        let a = Gate::try_admit(&g, io.clone()).expect("nothing quiesced");
        g.quiesce(by_tenant.clone());
        g.quiesce(by_path.clone());
        g.resume(&by_tenant);
        assert!(
            Gate::try_admit(&g, io.clone()).is_none(),
            "/d still holds it"
        );
        assert_eq!(g.held_in_flight(), 1);
        // A key the gate has not seen yet is held as well.
        let other = OwnedIoHeader::of(&IoHeader::new(Op::Read).path("/d/y"));
        assert!(Gate::try_admit(&g, other.clone()).is_none());
        g.resume(&by_path);
        assert!(!g.any_quiesced());
        let b = Gate::try_admit(&g, io.clone()).expect("resumed");
        assert_eq!((g.held_in_flight(), g.counts(&io).in_flight), (0, 2));
        drop((a, b));
        assert_eq!(g.counts(&io).admitted, 2, "a counting gate keeps idle keys");
        assert!(Gate::try_admit(&g, other).is_some());
    }
}
