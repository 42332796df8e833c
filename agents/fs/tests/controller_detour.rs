//! Controller detours on the switch core (no FUSE, a fake controller link): held IO, the
//! re-match after the verdict, the gate, copies, the deadline, and the standalone refusal.

mod common;
use common::ctx;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lachesis_fs::detour::{ControllerLink, DetourHeader, Detours, Reply, Verdict};
use lachesis_fs::{config, Switch, SwitchOptions};

/// Keeps what the switch sends; the test plays the controller.
#[derive(Default)]
struct FakeController {
    asked: Mutex<Vec<(DetourHeader, Reply)>>,
    copies: Mutex<Vec<DetourHeader>>,
}

impl ControllerLink for FakeController {
    fn ask(&self, header: DetourHeader, reply: Reply) {
        self.asked.lock().unwrap().push((header, reply));
    }
    fn copy(&self, header: DetourHeader) {
        self.copies.lock().unwrap().push(header);
    }
}

/// Longer than any test: a held IO waits for the answer the test gives.
const NEVER: Duration = Duration::from_secs(3600);

/// Polls `probe` until it returns something; a bounded number of polls (a minute's worth)
/// only turns a hang into a failure.
fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    const POLLS: u32 = 30_000;
    for _ in 0..POLLS {
        if let Some(v) = probe() {
            return v;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("never after {POLLS} polls: {what}");
}

/// Waits until an IO of rule `flow` waits at its quiesced gate.
fn wait_held_at_gate(sw: &Switch, flow: &str) {
    wait_for("an IO waiting at the quiesced gate", || {
        (sw.stats()["flows"][flow]["waiting"] == 1).then_some(())
    });
}

impl FakeController {
    fn wait_asked(&self, n: usize) -> DetourHeader {
        wait_for(&format!("header {n} sent"), || {
            self.asked
                .lock()
                .unwrap()
                .get(n - 1)
                .map(|(h, _)| h.clone())
        })
    }
    fn answer(&self, i: usize, v: Verdict) {
        self.asked.lock().unwrap()[i].1.answer(v);
    }
}

fn det(kind: &str, what: &str, target: &str) -> String {
    format!(r#"{{"what": "{what}", "to": {{"kind": "{kind}", "target": "{target}"}}}}"#)
}

fn rule(name: &str, prio: u32, ops: &str, detours: &[String]) -> String {
    format!(
        r#"{{"name": "{name}", "priority": {prio}, "match": {{"ops": [{ops}], "path_prefix": "/data"}},
             "detours": [{}]}}"#,
        detours.join(", ")
    )
}

fn linked(state: &Path, rules: &str, deadline: Duration) -> (Arc<Switch>, Arc<FakeController>) {
    let link = Arc::new(FakeController::default());
    let sw = Switch::with_controller(
        SwitchOptions {
            state_dir: state.to_path_buf(),
            rules: config::parse_rules(rules).unwrap(),
            stages: vec![],
            devices: Default::default(),
            roots: Default::default(),
            remote: Default::default(),
        },
        Arc::new(Detours::new(link.clone(), deadline)),
    )
    .unwrap();
    (Arc::new(sw), link)
}

#[test]
fn standalone_switch_refuses_controller_detours_and_io_to_the_controller() {
    let t = tempfile::tempdir().unwrap();
    let hold = format!(
        "[{}]",
        rule(
            "ask",
            1,
            r#""write""#,
            &[det("controller", "header", "readset")]
        )
    );
    let e = Switch::new(SwitchOptions {
        state_dir: t.path().join("s"),
        rules: config::parse_rules(&hold).unwrap(),
        stages: vec![],
        devices: Default::default(),
        roots: Default::default(),
        remote: Default::default(),
    })
    .err()
    .expect("refused");
    assert!(
        e.contains("rule \"ask\"") && e.contains("lachesis-agent"),
        "{e}"
    );
    let io = format!(
        "[{}]",
        rule("io", 1, r#""write""#, &[det("controller", "io", "approve")])
    );
    let link = Arc::new(FakeController::default());
    let e = Switch::with_controller(
        SwitchOptions {
            state_dir: t.path().join("s2"),
            rules: config::parse_rules(&io).unwrap(),
            stages: vec![],
            devices: Default::default(),
            roots: Default::default(),
            remote: Default::default(),
        },
        Arc::new(Detours::new(link, Duration::from_secs(1))),
    )
    .err()
    .expect("refused");
    assert!(e.contains("what: header"), "{e}");
}

#[test]
fn a_held_write_waits_outside_the_gate_and_goes_where_the_rules_say_after_the_verdict() {
    let t = tempfile::tempdir().unwrap();
    let (b, r1, r2) = (t.path().join("b"), t.path().join("r1"), t.path().join("r2"));
    std::fs::create_dir_all(b.join("data")).unwrap();
    let (r1s, r2s) = (r1.display().to_string(), r2.display().to_string());
    let hdr = det("controller", "header", "readset");
    let ask_to = |dir: &str| {
        rule(
            "ask",
            1,
            r#""write""#,
            &[hdr.clone(), det("file", "io", dir)],
        )
    };
    let (sw, ctl) = linked(&t.path().join("s"), &format!("[{}]", ask_to(&r1s)), NEVER);
    let c = Arc::new(ctx(&b, Some("t"), "/data/f"));
    let (sw2, c2) = (sw.clone(), c.clone());
    let writer = std::thread::spawn(move || sw2.write(&c2, &[7u8; 4096], 0));
    let h = ctl.wait_asked(1);
    assert_eq!(
        (
            h.rule.as_str(),
            h.target.as_str(),
            h.op.as_str(),
            h.path.as_str(),
            h.offset,
            h.length,
            h.tenant.as_deref(),
            h.hold
        ),
        (
            "ask",
            "readset",
            "write",
            "/data/f",
            0,
            4096,
            Some("t"),
            true
        )
    );
    // Unanswered, it waits (where it goes once answered shows it did not go before).
    assert!(
        !writer.is_finished(),
        "the write went on before the verdict"
    );
    // The held IO is not in flight: the controller can quiesce and drain its flow at once
    // (a drain that may not wait at all).
    assert_eq!(sw.stats()["flows"]["ask"]["in_flight"], 0);
    sw.quiesce("ask");
    assert!(sw.drain("ask", Duration::ZERO));
    // Meanwhile the controller moves the rule's writes to r2, then lets the write go: it is
    // admitted once the flow resumes, and takes the new route.
    sw.set_rules(
        config::parse_rules(&format!("[{}]", ask_to(&r2s))).unwrap(),
        &[],
    )
    .unwrap();
    ctl.answer(0, Verdict::Proceed { ttl: None });
    wait_held_at_gate(&sw, "ask");
    assert!(
        !writer.is_finished(),
        "a quiesced flow admitted the released IO"
    );
    sw.resume("ask");
    writer.join().unwrap().unwrap();
    assert_eq!(sw.stats()["flows"]["ask"]["waiting"], 0);
    assert_eq!(std::fs::read(r2.join("data/f")).unwrap(), vec![7u8; 4096]);
    assert!(!r1.join("data/f").exists());
    // Asked under the previous table, so the next write asks again; this answer is
    // remembered and the third write goes without asking.
    let (sw2, c2) = (sw.clone(), c.clone());
    let writer = std::thread::spawn(move || sw2.write(&c2, &[8u8; 4096], 4096));
    ctl.wait_asked(2);
    ctl.answer(1, Verdict::Proceed { ttl: None });
    writer.join().unwrap().unwrap();
    sw.write(&c, &[9u8; 4096], 8192).unwrap();
    assert_eq!(ctl.asked.lock().unwrap().len(), 2);
    let stats = sw.stats();
    assert_eq!(stats["detours"]["remembered"], 1, "{stats}");
    // Reads match no asking rule and never wait.
    let mut buf = [0u8; 4096];
    sw.read(&c, &mut buf, 8192).unwrap();
    assert_eq!(buf, [9u8; 4096]);
}

#[test]
fn a_held_quiesced_flow_is_admitted_only_after_resume() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(b.join("data")).unwrap();
    let ask = rule(
        "ask",
        1,
        r#""write""#,
        &[det("controller", "header", "approve")],
    );
    let (sw, ctl) = linked(&t.path().join("s"), &format!("[{ask}]"), NEVER);
    let c = Arc::new(ctx(&b, None, "/data/f"));
    sw.quiesce("ask");
    let (sw2, c2) = (sw.clone(), c.clone());
    let writer = std::thread::spawn(move || sw2.write(&c2, b"hello", 0));
    ctl.wait_asked(1);
    ctl.answer(0, Verdict::Proceed { ttl: None });
    wait_held_at_gate(&sw, "ask");
    assert!(
        !writer.is_finished(),
        "a quiesced flow admitted the released IO"
    );
    assert_eq!(sw.stats()["flows"]["ask"]["admitted"], 0);
    sw.resume("ask");
    writer.join().unwrap().unwrap();
    // A header-only rule sends the IO to its original destination, the backing file.
    assert_eq!(std::fs::read(b.join("data/f")).unwrap(), b"hello");
}

#[test]
fn without_a_verdict_the_write_fails_with_etimedout_and_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let (b, r1) = (t.path().join("b"), t.path().join("r1"));
    std::fs::create_dir_all(b.join("data")).unwrap();
    let rules = format!(
        "[{}]",
        rule(
            "ask",
            1,
            r#""write""#,
            &[
                det("controller", "header", "readset"),
                det("file", "io", &r1.display().to_string())
            ]
        )
    );
    let (sw, ctl) = linked(&t.path().join("s"), &rules, Duration::from_millis(200));
    let c = ctx(&b, None, "/data/f");
    let e = sw.write(&c, &[1u8; 4096], 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
    // It asked, and the one header it waited on never got an answer.
    assert_eq!(ctl.asked.lock().unwrap().len(), 1);
    let detours = &sw.stats()["detours"];
    assert_eq!(
        (&detours["asked"], &detours["timed_out"]),
        (&1.into(), &1.into())
    );
    assert_eq!(std::fs::metadata(b.join("data/f")).unwrap().len(), 0);
    assert!(!r1.join("data/f").exists());
    // A denial carries its errno (a switch whose IO waits as long as the test needs).
    let (sw, ctl) = linked(&t.path().join("s2"), &rules, NEVER);
    let sw2 = sw.clone();
    let writer = std::thread::spawn(move || {
        let c = ctx(&b, None, "/data/f");
        sw2.write(&c, &[1u8; 4096], 0)
    });
    ctl.wait_asked(1);
    ctl.answer(0, Verdict::Deny { errno: libc::EPERM });
    assert_eq!(
        writer.join().unwrap().unwrap_err().raw_os_error(),
        Some(libc::EPERM)
    );
}

#[test]
fn a_header_after_other_detours_is_a_copy_and_does_not_hold() {
    let t = tempfile::tempdir().unwrap();
    let (b, r1) = (t.path().join("b"), t.path().join("r1"));
    std::fs::create_dir_all(b.join("data")).unwrap();
    let rules = format!(
        "[{}]",
        rule(
            "audit",
            1,
            r#""write""#,
            &[
                det("file", "io", &r1.display().to_string()),
                det("controller", "header", "approve")
            ]
        )
    );
    let (sw, ctl) = linked(&t.path().join("s"), &rules, NEVER);
    let c = ctx(&b, Some("t"), "/data/f");
    sw.write(&c, b"abc", 10).unwrap();
    assert!(ctl.asked.lock().unwrap().is_empty());
    let copies = ctl.copies.lock().unwrap();
    assert_eq!(copies.len(), 1);
    assert_eq!(
        (copies[0].offset, copies[0].length, copies[0].hold),
        (10, 3, false)
    );
    assert_eq!(std::fs::read(r1.join("data/f")).unwrap()[10..], *b"abc");
}
