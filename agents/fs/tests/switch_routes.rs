//! The switch core on real files (no FUSE): scatter, read sets, quiesce/drain, stage routes.

mod common;
use common::ctx;

use std::net::TcpListener;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use lachesis_fs::serve::server::{self, DirStore, Store};
use lachesis_fs::{config, Switch};

/// A switch with the rules (and stages) of a rules file's text.
fn switch(state: &Path, rules: &str) -> Switch {
    common::switch_of(state, rules, Default::default()).unwrap()
}

#[test]
fn scatter_writes_every_replica_and_the_read_set_decides_who_serves_reads() {
    let t = tempfile::tempdir().unwrap();
    let (b, r1, r2) = (t.path().join("b"), t.path().join("r1"), t.path().join("r2"));
    std::fs::create_dir_all(&b).unwrap();
    let rules = |read_set: &str| {
        format!(
            r#"[{{"name": "w", "priority": 1, "match": {{"ops": ["write"]}},
                 "detours": [{{"what": "io", "to": {{"kind": "file", "target": "{r1}"}}}},
                             {{"what": "io", "to": {{"kind": "file", "target": "{r2}"}}}}]}},
                {{"name": "r", "priority": 2, "match": {{"ops": ["read"]}},
                 "detours": [{read_set}]}}]"#,
            r1 = r1.display(),
            r2 = r2.display()
        )
    };
    let det = |d: &Path| {
        format!(
            r#"{{"what": "io", "to": {{"kind": "file", "target": "{}"}}}}"#,
            d.display()
        )
    };
    let sw = switch(&t.path().join("s"), &rules(&det(&r1)));
    let c = ctx(&b, None, "/f");
    sw.write(&c, &[5u8; 8192], 0).unwrap();
    for r in [&r1, &r2] {
        assert_eq!(std::fs::read(r.join("f")).unwrap(), vec![5u8; 8192]);
    }
    // The backing file only keeps the size.
    assert_eq!(std::fs::metadata(b.join("f")).unwrap().len(), 8192);
    // Written ranges are read from the primary (delegates); to see who serves reads that
    // match the read rule, give the replicas different bytes past what was written.
    use std::os::unix::fs::FileExt;
    for (r, v) in [(&r1, 5u8), (&r2, 0u8)] {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(r.join("f"))
            .unwrap();
        f.write_all_at(&[v; 4096], 8192).unwrap();
    }
    c.backing.set_len(12288).unwrap();
    let sw2 = switch(&t.path().join("s2"), &rules(&det(&r1)));
    let mut buf = [0u8; 4096];
    for _ in 0..4 {
        sw2.read(&c, &mut buf, 8192).unwrap();
        assert_eq!(buf, [5u8; 4096], "primary-only read set reads r1");
    }
    sw2.set_rules(
        config::parse_rules(&rules(&format!("{}, {}", det(&r1), det(&r2)))).unwrap(),
        &[],
    )
    .unwrap();
    let mut sources = std::collections::HashSet::new();
    for _ in 0..4 {
        sw2.read(&c, &mut buf, 8192).unwrap();
        sources.insert(buf[0]);
        sw2.read(&c, &mut buf, 0).unwrap();
        assert_eq!(
            buf, [5u8; 4096],
            "written ranges follow their delegate to the primary"
        );
    }
    assert_eq!(
        sources,
        [0u8, 5].into_iter().collect(),
        "all-replica read set spreads reads"
    );
}

/// A remote store whose writes wait until the test lets them finish: an IO that stays in
/// flight exactly as long as the test says.
struct HeldWrites {
    inner: DirStore,
    started: Mutex<mpsc::Sender<()>>,
    finish: Mutex<mpsc::Receiver<()>>,
}

impl Store for HeldWrites {
    fn read(&self, p: &str, off: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.inner.read(p, off, len)
    }
    fn write(&self, p: &str, off: u64, data: &[u8]) -> std::io::Result<()> {
        self.started.lock().unwrap().send(()).unwrap();
        self.finish.lock().unwrap().recv().unwrap();
        self.inner.write(p, off, data)
    }
    fn sync(&self, p: &str) -> std::io::Result<()> {
        self.inner.sync(p)
    }
    fn truncate(&self, p: &str, size: u64) -> std::io::Result<()> {
        self.inner.truncate(p, size)
    }
    fn size(&self, p: &str) -> std::io::Result<u64> {
        self.inner.size(p)
    }
    fn rename(&self, a: &str, b: &str) -> std::io::Result<()> {
        self.inner.rename(a, b)
    }
}

/// Polls `done` until it holds; a bounded number of polls (a minute's worth) only turns a
/// hang into a failure.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..GUARD_POLLS {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("never after {GUARD_POLLS} polls: {what}");
}

const GUARD: Duration = Duration::from_secs(60);
/// Polls of 1 ms in `wait_until` before it gives up: a minute's worth.
const GUARD_POLLS: u32 = 60_000;

#[test]
fn quiesce_holds_a_flow_and_drain_waits_for_it() {
    let t = tempfile::tempdir().unwrap();
    let (b, root) = (t.path().join("b"), t.path().join("remote"));
    std::fs::create_dir_all(&b).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let (started_tx, started) = mpsc::channel();
    let (finish, finish_rx) = mpsc::channel();
    let store = Arc::new(HeldWrites {
        inner: DirStore::new(&root).unwrap(),
        started: Mutex::new(started_tx),
        finish: Mutex::new(finish_rx),
    });
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || server::serve(l, store, None));
    // A held remote write must not fail on the client's timeout while the test holds it.
    let remote = lachesis_fs::route::RemoteOptions {
        timeout: GUARD,
        key: None,
    };
    let sw = Arc::new(common::switch_reaching(
        &t.path().join("s"),
        &format!(
            r#"[{{"name": "slow", "priority": 1, "match": {{"tenant": "t"}},
                 "detours": [{{"what": "io", "to": {{"kind": "file", "target": "tcp://{addr}/ep"}}}}]}}]"#
        ),
        Default::default(),
        remote,
    )
    .unwrap());
    let flow = |what: &str| sw.stats()["flows"]["slow"][what].as_u64().unwrap();
    let c = Arc::new(ctx(&b, Some("t"), "/f"));
    let (sw2, c2) = (sw.clone(), c.clone());
    let inflight = std::thread::spawn(move || sw2.write(&c2, b"first", 0).unwrap());
    // The write is admitted and at the remote, which holds it: in flight until let go.
    started.recv_timeout(GUARD).unwrap();
    assert_eq!(flow("in_flight"), 1);
    sw.quiesce("slow");
    assert!(
        !sw.drain("slow", Duration::ZERO),
        "the held write is in flight"
    );
    finish.send(()).unwrap();
    assert!(sw.drain("slow", GUARD));
    inflight.join().unwrap();
    let (sw3, c3) = (sw.clone(), c.clone());
    let held = std::thread::spawn(move || sw3.write(&c3, b"x", 0).unwrap());
    // The new write reached the quiesced gate and waits there, not admitted.
    wait_until("the write waiting at the gate", || flow("waiting") == 1);
    assert!(!held.is_finished(), "a quiesced flow admitted IO");
    assert_eq!(flow("admitted"), 1);
    // IO of other tenants is not held.
    sw.write(&ctx(&b, None, "/g"), b"y", 0).unwrap();
    sw.resume("slow");
    started.recv_timeout(GUARD).unwrap();
    finish.send(()).unwrap();
    held.join().unwrap();
    assert_eq!((flow("admitted"), flow("waiting")), (2, 0));
    let mut buf = [0u8; 5];
    sw.read(&c, &mut buf, 0).unwrap();
    assert_eq!(&buf, b"xirst");
}

/// A read held at a quiesced gate holds no lock: a truncate of its file (not gated) and the
/// rule change that a rollout installs before it resumes the flow both go on while it waits.
/// The read once kept its block locks while held: the truncate waited for them holding
/// `held`, the install waited for `held`, and nothing could resume the flow (a hang of a
/// two-phase rollout in CI, the reader stuck in the kernel).
#[test]
fn a_read_held_at_the_quiesce_gate_lets_a_truncate_and_an_install_go_on() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let rules = |size: u64| {
        format!(
            r#"{{"rules": [{{"name": "c", "priority": 1, "match": {{"tenant": "t"}},
                 "detours": [{{"what": "io", "to": {{"kind": "stage", "target": "cache/c"}}}}]}}],
                "stages": [{{"kind": "cache", "name": "cache/c", "owner": null, "engine": "dram",
                  "size_bytes": {size}, "write_mode": "back", "eviction": "lru",
                  "max_dirty_bytes": 65536, "device": null, "placement": [], "next": null}}]}}"#
        )
    };
    let sw = Arc::new(switch(&t.path().join("s"), &rules(1 << 20)));
    // Bytes the switch did not write: no delegate, so reads of them take the rule (and its gate).
    std::fs::write(b.join("f"), [7u8; 16384]).unwrap();
    let c = Arc::new(ctx(&b, Some("t"), "/f"));
    let mut first = vec![0u8; 4096];
    sw.read(&c, &mut first, 0).unwrap();
    let flow = |what: &str| sw.stats()["flows"]["c"][what].as_u64().unwrap();
    let admitted = flow("admitted");
    sw.quiesce("c");
    let (sw2, c2) = (sw.clone(), c.clone());
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 8192];
        let n = sw2.read(&c2, &mut buf, 0).unwrap();
        buf.truncate(n);
        buf
    });
    wait_until("the read waiting at the gate", || flow("waiting") == 1);
    // Each change on a thread of its own, so that a hang fails the test instead of hanging it.
    let (done_tx, done) = mpsc::channel();
    let (sw3, c3) = (sw.clone(), c.clone());
    std::thread::spawn(move || {
        let cut = sw3.truncate("/f", c3.id, 4096, || c3.backing.set_len(4096));
        let f = lachesis_fs::config::parse(&rules(2 << 20)).unwrap();
        let installed = sw3.set_rules(f.rules, &f.stages);
        done_tx
            .send((cut.map_err(|e| e.to_string()), installed))
            .unwrap();
    });
    let (cut, installed) = done
        .recv_timeout(GUARD)
        .expect("a truncate and an install went on while a read was held at the gate");
    cut.unwrap();
    installed.unwrap();
    assert!(!reader.is_finished(), "the quiesced flow admitted the read");
    assert_eq!(
        flow("admitted"),
        admitted,
        "nothing admitted while quiesced"
    );
    sw.resume("c");
    // The read ran after the truncate, so it sees the file's new size.
    assert_eq!(reader.join().unwrap(), vec![7u8; 4096]);
    assert_eq!((flow("admitted"), flow("waiting")), (admitted + 1, 0));
}

#[test]
fn log_stage_route_is_followed_by_other_tenants_and_survives_restart() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let rules = format!(
        r#"{{"rules": [{{"name": "log", "priority": 1, "match": {{"tenant": "t", "ops": ["write"], "path_prefix": "/f"}},
             "detours": [{{"what": "io", "to": {{"kind": "stage", "target": "log/t"}}}}]}}],
            "stages": [{{"kind": "log", "name": "log/t", "owner": "t", "dir": "{}"}},
                       {{"kind": "cache", "name": "cache/g", "owner": null, "engine": "dram",
                         "size_bytes": 1048576, "write_mode": "through", "eviction": "lru",
                         "max_dirty_bytes": 4096, "device": null, "placement": [], "next": null}}]}}"#,
        t.path().join("log").display()
    );
    {
        let sw = switch(&t.path().join("s"), &rules);
        let c = ctx(&b, Some("t"), "/f");
        sw.write(&c, b"hello log", 100).unwrap();
        sw.sync(&c).unwrap();
    }
    // Nothing but the size reached the backing file.
    assert_eq!(std::fs::read(b.join("f")).unwrap(), vec![0u8; 109]);
    let sw = switch(&t.path().join("s"), &rules);
    let mut buf = [0u8; 9];
    sw.read(&ctx(&b, None, "/f"), &mut buf, 100).unwrap();
    assert_eq!(&buf, b"hello log");
    assert!(!sw.can_passthrough("/f"));
    assert!(sw.can_passthrough("/g"));
    // Switch API insert/delete (the declared stages stay); a bad rule changes nothing.
    let r: Vec<lachesis_switch::Rule> = serde_json::from_str(
        r#"[{"name": "g", "priority": 5, "match": {"path_prefix": "/g"},
             "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/g"}}]}]"#,
    )
    .unwrap();
    sw.insert_rule(r[0].clone()).unwrap();
    assert!(!sw.can_passthrough("/g"));
    assert!(sw
        .insert_rule(r[0].clone())
        .unwrap_err()
        .to_string()
        .contains("duplicate"));
    let mut bad = r[0].clone();
    bad.name = "bad".into();
    bad.detours[0].to.target = "cache/nosuch".into();
    let e = sw.insert_rule(bad).unwrap_err().to_string();
    assert!(e.contains("\"cache/nosuch\" is not declared"), "{e}");
    assert_eq!(sw.rules().len(), 2);
    assert_eq!(sw.delete_rule("g").unwrap().name, "g");
    assert!(sw.delete_rule("g").is_err());
    assert!(sw.can_passthrough("/g"));
}
