//! Controller detours (sRoute `<IOHeader, Controller>`, thesis §6.3.3-6.3.5): a rule whose
//! first detour is `{what: header, to: {kind: controller, target: APP}}` holds each matching
//! IO, sends its header to the controller application `APP` and lets the IO go on only once
//! the controller answers. The application may change rules first (e.g. the replica read set,
//! through a two-phase rollout); the IO is then matched again against the rules in force.
//! A `header -> controller` detour listed after other detours is a copy: sent, not waited for.
//!
//! The crate stays bus-agnostic: [`ControllerLink`] is the way to the controller (the agent
//! implements it over Redis, `agents/agent/src/detour_link.rs`).
//!
//! - Coalescing: while a header for the same (rule, table generation, tenant, op) is waiting
//!   for its answer, further matching IOs wait on that answer instead of sending their own.
//! - `proceed` is remembered for that key until the switch installs another rule table or the
//!   verdict's TTL runs out, so a busy flow asks once, not once per IO. `deny` is not
//!   remembered: the next IO asks again.
//! - No answer within the deadline: the IO fails with `ETIMEDOUT` and a log line (the
//!   controller being away must not let IO through: correctness over liveness, but a mature
//!   tool gives up eventually). A header whose answer is overdue is sent again by the next IO.
//! - Gates: a held IO is *not admitted* while it waits (the switch asks before
//!   [`lachesis_switch::Gate::admit`]), so it is not in flight and a drain does not wait for it.
//!   That is what lets the controller quiesce and drain the very flow whose IO it holds (the
//!   read-set application does) without a deadlock; once released, the IO is admitted by the
//!   gate of the rule it matches then, and waits there if that flow is quiesced.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use lachesis_switch::Op;

/// The header of an IO sent to the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetourHeader {
    /// The rule whose detour sent it.
    pub rule: String,
    /// The controller application (the detour's target).
    pub target: String,
    pub tenant: Option<String>,
    pub op: Op,
    /// Absolute path in the namespace.
    pub path: String,
    pub offset: u64,
    pub length: u64,
    /// The IO waits for the verdict (false: a copy, nothing comes back).
    pub hold: bool,
}

/// The controller's answer to a held IO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let the IO go on. `ttl`: how long the switch may let IO of the same rule, tenant and
    /// op through without asking (`None`: until the rule table changes; zero: this IO only).
    Proceed { ttl: Option<Duration> },
    /// Fail the IO with this errno.
    Deny { errno: i32 },
}

/// The way to the controller.
pub trait ControllerLink: Send + Sync {
    /// Sends a held IO's header. Must not wait for the controller: the verdict is handed to
    /// `reply` later, from any thread (or never, if the controller does not answer).
    fn ask(&self, header: DetourHeader, reply: Reply);
    /// Sends a copy of a header; nothing comes back. Must not block.
    fn copy(&self, header: DetourHeader);
}

/// Where a verdict goes: every IO waiting on the same header.
pub struct Reply {
    slot: Arc<Slot>,
}

impl Reply {
    /// Releases the IO(s) waiting on this header. A second answer is ignored.
    pub fn answer(&self, verdict: Verdict) {
        let mut v = self.slot.verdict.lock().unwrap_or_else(|e| e.into_inner());
        if v.is_none() {
            *v = Some((verdict, (self.slot.clock)()));
            self.slot.done.notify_all();
        }
    }
}

struct Slot {
    verdict: Mutex<Option<(Verdict, Instant)>>,
    done: Condvar,
    sent: Instant,
    /// The detours' clock: when the verdict came, for its TTL.
    clock: Clock,
}

impl Slot {
    /// The verdict, waiting until `until` at most.
    fn wait(&self, until: Instant) -> Option<(Verdict, Instant)> {
        let mut v = self.verdict.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(x) = *v {
                return Some(x);
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            v = self
                .done
                .wait_timeout(v, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn answered(&self) -> Option<(Verdict, Instant)> {
        *self.verdict.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// (rule, rule-table generation of the switch, tenant, op)
type Key = (String, u64, Option<String>, Op);

#[derive(Default)]
struct State {
    /// The table generation the remembered verdicts are for; older ones are dropped.
    generation: u64,
    waiting: HashMap<Key, Arc<Slot>>,
    /// Remembered `proceed`s and until when (`None`: while the generation lasts).
    proceed: HashMap<Key, Option<Instant>>,
}

/// Counters for the stats file.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DetourStats {
    /// Headers sent and waited for.
    pub asked: u64,
    /// IOs that waited on a header another IO had sent.
    pub coalesced: u64,
    /// IOs let through by a remembered `proceed`, without asking.
    pub remembered: u64,
    pub denied: u64,
    pub timed_out: u64,
    pub copies: u64,
}

/// The controller detours of the switches of one agent (its mounts share one link).
pub struct Detours {
    link: Arc<dyn ControllerLink>,
    deadline: Duration,
    clock: Clock,
    state: Mutex<State>,
    stats: Mutex<DetourStats>,
    /// The last rule-table generation handed out ([`Detours::next_table`]).
    tables: AtomicU64,
}

/// Where the detours read the time for verdict TTLs and overdue headers: `Instant::now` in
/// the product; tests inject a clock they advance, so a TTL expires when the test says and
/// not after a sleep.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// The errno of an IO whose verdict did not come within the deadline.
pub const TIMEOUT_ERRNO: i32 = libc::ETIMEDOUT;

impl Detours {
    /// `deadline`: how long a held IO waits for its verdict before failing with
    /// [`TIMEOUT_ERRNO`].
    pub fn new(link: Arc<dyn ControllerLink>, deadline: Duration) -> Self {
        Detours {
            link,
            deadline,
            clock: Arc::new(Instant::now),
            state: Mutex::new(State::default()),
            stats: Mutex::new(DetourStats::default()),
            tables: AtomicU64::new(0),
        }
    }

    /// A generation for a rule table a switch compiled, distinct from every other table of
    /// the switches sharing these detours: remembered verdicts are keyed by it, so a
    /// `proceed` given under one table never lets IO of another through.
    pub fn next_table(&self) -> u64 {
        self.tables.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Reads TTL and overdue times from `clock` instead of `Instant::now` (the deadline a
    /// held IO waits for its verdict stays real time).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    pub fn stats(&self) -> DetourStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut DetourStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Holds the IO of `header` (matched under rule-table `generation`) until the
    /// controller lets it go: `Ok` to proceed, the verdict's errno, or `ETIMEDOUT`.
    pub fn hold(&self, header: DetourHeader, generation: u64) -> io::Result<()> {
        let key: Key = (
            header.rule.clone(),
            generation,
            header.tenant.clone(),
            header.op,
        );
        let now = (self.clock)();
        let (slot, send) = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.generation != generation {
                // A new table: what the controller said about the old one no longer holds.
                st.generation = generation;
                st.proceed.clear();
                st.waiting.retain(|k, _| k.1 == generation);
            }
            match st.proceed.get(&key) {
                Some(None) => {
                    drop(st);
                    self.count(|s| s.remembered += 1);
                    return Ok(());
                }
                Some(Some(until)) if *until > now => {
                    drop(st);
                    self.count(|s| s.remembered += 1);
                    return Ok(());
                }
                Some(Some(_)) => {
                    st.proceed.remove(&key);
                }
                None => {}
            }
            let joinable = st.waiting.get(&key).filter(|s| match s.answered() {
                // A denial is for the IOs that waited on it; later ones ask again.
                Some((Verdict::Deny { .. }, _)) => false,
                Some((Verdict::Proceed { .. }, _)) => true,
                // Overdue: the header (or its answer) was lost; send it again.
                None => now.duration_since(s.sent) < self.deadline,
            });
            match joinable {
                Some(s) => (s.clone(), false),
                None => {
                    let s = Arc::new(Slot {
                        verdict: Mutex::new(None),
                        done: Condvar::new(),
                        sent: now,
                        clock: self.clock.clone(),
                    });
                    st.waiting.insert(key.clone(), s.clone());
                    (s, true)
                }
            }
        };
        // The held IO's trace (exported by the agent when OTel is on: its target is the
        // agent's `otel::TARGET`): the request sent in `ask` carries this span's context, so
        // the controller's verdict span is its child.
        let span = if send {
            tracing::info_span!(
                target: "lachesis::trace", "detour",
                lachesis.rule = %header.rule, lachesis.app = %header.target, lachesis.op = %header.op,
            )
        } else {
            tracing::Span::none()
        };
        let _held = span.enter();
        if send {
            self.count(|s| s.asked += 1);
            self.link.ask(header.clone(), Reply { slot: slot.clone() });
        } else {
            self.count(|s| s.coalesced += 1);
        }
        let verdict = slot.wait(Instant::now() + self.deadline);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if verdict.is_some() && st.waiting.get(&key).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
            st.waiting.remove(&key);
        }
        match verdict {
            Some((Verdict::Proceed { ttl }, at)) => {
                // Remembered only for the table it was asked under (the key's generation).
                if st.generation == generation && ttl != Some(Duration::ZERO) {
                    st.proceed.insert(key, ttl.map(|t| at + t));
                }
                Ok(())
            }
            Some((Verdict::Deny { errno }, _)) => {
                drop(st);
                self.count(|s| s.denied += 1);
                tracing::warn!(
                    rule = %header.rule, target = %header.target, path = %header.path,
                    op = %header.op, errno, "controller denied the IO"
                );
                Err(io::Error::from_raw_os_error(errno))
            }
            None => {
                drop(st);
                self.count(|s| s.timed_out += 1);
                tracing::error!(
                    rule = %header.rule, target = %header.target, path = %header.path,
                    op = %header.op, tenant = header.tenant.as_deref().unwrap_or("-"),
                    deadline_ms = self.deadline.as_millis() as u64,
                    "no verdict from the controller before the deadline; the IO fails with ETIMEDOUT"
                );
                Err(io::Error::from_raw_os_error(TIMEOUT_ERRNO))
            }
        }
    }

    /// Sends a copy of `header` (the IO is not held).
    pub fn copy(&self, header: DetourHeader) {
        self.count(|s| s.copies += 1);
        let _sent = tracing::info_span!(
            target: "lachesis::trace", "detour copy",
            lachesis.rule = %header.rule, lachesis.app = %header.target, lachesis.op = %header.op,
        )
        .entered();
        self.link.copy(header);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeps what was sent; the test answers.
    #[derive(Default)]
    pub struct Recorder {
        pub asked: Mutex<Vec<(DetourHeader, Reply)>>,
        pub copies: Mutex<Vec<DetourHeader>>,
    }

    impl ControllerLink for Recorder {
        fn ask(&self, header: DetourHeader, reply: Reply) {
            self.asked.lock().unwrap().push((header, reply));
        }
        fn copy(&self, header: DetourHeader) {
            self.copies.lock().unwrap().push(header);
        }
    }

    impl Recorder {
        fn sent(&self) -> usize {
            self.asked.lock().unwrap().len()
        }
        fn answer(&self, i: usize, v: Verdict) {
            self.asked.lock().unwrap()[i].1.answer(v);
        }
        fn wait_sent(&self, n: usize) {
            wait_until(&format!("header {n} sent"), || self.sent() >= n);
        }
    }

    /// Polls `done` until it holds; a bounded number of polls (a minute's worth) only turns
    /// a hang into a failure.
    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        const POLLS: u32 = 60_000;
        for _ in 0..POLLS {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("never after {POLLS} polls: {what}");
    }

    /// A clock that moves only when the test says.
    fn fake_clock() -> (Clock, Arc<Mutex<Duration>>) {
        let (base, offset) = (Instant::now(), Arc::new(Mutex::new(Duration::ZERO)));
        let o = offset.clone();
        (Arc::new(move || base + *o.lock().unwrap()), offset)
    }

    /// Long enough never to pass in a test: a held IO waits for the test's answer.
    const NEVER: Duration = Duration::from_secs(3600);

    fn header(op: Op) -> DetourHeader {
        DetourHeader {
            rule: "w".into(),
            target: "approve".into(),
            tenant: Some("t".into()),
            op,
            path: "/data/x".into(),
            offset: 0,
            length: 4096,
            hold: true,
        }
    }

    /// Holds one IO on another thread, answers the `n`th header sent with `v` and returns
    /// what the IO got.
    fn held_then_answered(
        d: &Arc<Detours>,
        link: &Recorder,
        op: Op,
        generation: u64,
        n: usize,
        v: Verdict,
    ) -> io::Result<()> {
        let d1 = d.clone();
        let t = std::thread::spawn(move || d1.hold(header(op), generation));
        link.wait_sent(n + 1);
        link.answer(n, v);
        t.join().unwrap()
    }

    #[test]
    fn concurrent_ios_share_one_header_and_proceed_is_remembered_per_generation() {
        let link = Arc::new(Recorder::default());
        let d = Arc::new(Detours::new(link.clone(), NEVER));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let d = d.clone();
                std::thread::spawn(move || d.hold(header(Op::Write), 1))
            })
            .collect();
        // All four are holding: one sent the header, three wait on its answer.
        wait_until("four IOs holding", || {
            let s = d.stats();
            s.asked + s.coalesced == 4
        });
        // Four IOs, one header.
        assert_eq!(link.sent(), 1);
        assert!(
            threads.iter().all(|t| !t.is_finished()),
            "released before the verdict"
        );
        link.answer(0, Verdict::Proceed { ttl: None });
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(d.stats().coalesced, 3);
        // Remembered: no new header for the same rule, tenant and op.
        d.hold(header(Op::Write), 1).unwrap();
        assert_eq!(link.sent(), 1);
        assert_eq!(d.stats().remembered, 1);
        // Another op is another key; a new table generation forgets.
        held_then_answered(&d, &link, Op::Read, 1, 1, Verdict::Proceed { ttl: None }).unwrap();
        held_then_answered(&d, &link, Op::Write, 2, 2, Verdict::Proceed { ttl: None }).unwrap();
    }

    #[test]
    fn a_ttl_expires_and_a_zero_ttl_is_for_this_io_only() {
        let link = Arc::new(Recorder::default());
        let (clock, now) = fake_clock();
        let d = Arc::new(Detours::new(link.clone(), NEVER).with_clock(clock));
        let ttl = |ms| Verdict::Proceed {
            ttl: Some(Duration::from_millis(ms)),
        };
        held_then_answered(&d, &link, Op::Write, 1, 0, ttl(100)).unwrap();
        *now.lock().unwrap() += Duration::from_millis(99);
        d.hold(header(Op::Write), 1).unwrap();
        assert_eq!(link.sent(), 1, "asked again within the TTL");
        *now.lock().unwrap() += Duration::from_millis(1);
        held_then_answered(&d, &link, Op::Write, 1, 1, ttl(0)).unwrap();
        // A zero TTL let only that IO through: the next one asks again.
        held_then_answered(&d, &link, Op::Write, 1, 2, Verdict::Proceed { ttl: None }).unwrap();
    }

    #[test]
    fn deny_fails_with_its_errno_and_is_not_remembered() {
        let link = Arc::new(Recorder::default());
        let d = Arc::new(Detours::new(link.clone(), NEVER));
        let deny = Verdict::Deny {
            errno: libc::EACCES,
        };
        let e = held_then_answered(&d, &link, Op::Write, 1, 0, deny).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES));
        held_then_answered(&d, &link, Op::Write, 1, 1, Verdict::Proceed { ttl: None }).unwrap();
        assert_eq!(d.stats().denied, 1);
    }

    #[test]
    fn no_answer_fails_with_etimedout_after_the_deadline_and_the_next_io_asks_again() {
        let link = Arc::new(Recorder::default());
        let d = Detours::new(link.clone(), Duration::from_millis(100));
        let e = d.hold(header(Op::Write), 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
        // It asked and waited on that header: the one sent, never answered, timed out.
        assert_eq!(link.sent(), 1);
        assert_eq!((d.stats().asked, d.stats().timed_out), (1, 1));
        // The overdue header is sent again rather than waited on.
        let _ = d.hold(header(Op::Write), 1);
        assert_eq!(link.sent(), 2);
        // A late `proceed` still counts for the rule generation it was asked under.
        link.answer(1, Verdict::Proceed { ttl: None });
        d.hold(header(Op::Write), 1).unwrap();
        assert_eq!(link.sent(), 2);
    }
}
