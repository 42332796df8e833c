//! Tail-latency forwarding (sRoute §6.5.1) in the switch, over real TCP on loopback: a
//! tenant's writes forwarded from its endpoint E to a log on another agent F, reads of
//! them served from F's log (delegates), a rate-paced reclaim back to E, and the log stage
//! removed once empty; nothing lost on the way.

mod common;
use common::ctx;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use lachesis_fs::serve::server::{self, DirStore};
use lachesis_fs::{Switch, SwitchOptions};
use lachesis_switch::StageConfig;

fn server(root: &std::path::Path) -> String {
    std::fs::create_dir_all(root).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap().to_string();
    let store = Arc::new(DirStore::new(root).unwrap());
    std::thread::spawn(move || server::serve(l, store, None));
    a
}

fn rules(e: &str, forwarded: bool) -> Vec<lachesis_switch::Rule> {
    let stage = if forwarded {
        r#"{"what": "io", "to": {"kind": "stage", "target": "fwd/a"}},"#
    } else {
        ""
    };
    serde_json::from_str(&format!(
        r#"[{{"name": "a", "priority": 1, "match": {{"tenant": "a"}},
             "detours": [{stage} {{"what": "io", "to": {{"kind": "file", "target": "tcp://{e}/ep"}}}}]}}]"#
    ))
    .unwrap()
}

fn forward_log(f: &str, reclaim: Option<u64>) -> StageConfig {
    serde_json::from_value(serde_json::json!({
        "kind": "log", "name": "fwd/a", "owner": "a", "dir": "/fwd/a",
        "remote": format!("tcp://{f}"), "reclaim_bytes_per_s": reclaim,
    }))
    .unwrap()
}

fn log_counters(sw: &Switch) -> (u64, u64, u64) {
    let s = sw
        .stage_stats()
        .into_iter()
        .find(|s| s.name == "fwd/a")
        .expect("the forwarding log is declared");
    (s.bytes_written, s.dirty_bytes, s.reclaimed_bytes)
}

struct Setup {
    _t: tempfile::TempDir,
    backing: std::path::PathBuf,
    e_root: std::path::PathBuf,
    f_root: std::path::PathBuf,
    e: String,
    f: String,
    sw: Switch,
}

/// E holds `x` (3 blocks of 1) for tenant a's file /v; the forwarding stage is not in force yet.
fn setup() -> Setup {
    let t = tempfile::tempdir().unwrap();
    let backing = t.path().join("b");
    std::fs::create_dir_all(&backing).unwrap();
    let (e_root, f_root) = (t.path().join("e"), t.path().join("f"));
    let (e, f) = (server(&e_root), server(&f_root));
    let sw = Switch::new(SwitchOptions {
        state_dir: t.path().join("s"),
        rules: rules(&e, false),
        stages: vec![],
        devices: Default::default(),
        roots: Default::default(),
        remote: Default::default(),
    })
    .unwrap();
    let a = ctx(&backing, Some("a"), "/v");
    sw.write(&a, &[1u8; 3 * 4096], 0).unwrap();
    Setup {
        _t: t,
        backing,
        e_root,
        f_root,
        e,
        f,
        sw,
    }
}

fn read_all(s: &Setup, len: usize) -> Vec<u8> {
    // Another tenant: reads of written ranges follow their delegates, whoever reads.
    let z = ctx(&s.backing, Some("z"), "/v");
    let mut buf = vec![0u8; len];
    assert_eq!(s.sw.read(&z, &mut buf, 0).unwrap(), len);
    buf
}

#[test]
fn forwarded_writes_are_read_from_the_remote_log_and_reclaimed_to_their_endpoint() {
    let s = setup();
    let a = ctx(&s.backing, Some("a"), "/v");
    // E is slow: the controller puts the forwarding log in a's route.
    s.sw.set_rules(rules(&s.e, true), &[forward_log(&s.f, None)])
        .unwrap();
    s.sw.write(&a, &[2u8; 2 * 4096], 4096).unwrap();
    s.sw.write(&a, &[3u8; 4096], 3 * 4096).unwrap();
    // E did not see them; F's log holds them (appended: the log is longer than the data).
    let on_e = std::fs::read(s.e_root.join("ep/v")).unwrap();
    assert_eq!(on_e, vec![1u8; 3 * 4096]);
    let log = std::fs::metadata(s.f_root.join("fwd/a/stage.log")).unwrap();
    assert!(log.len() > 3 * 4096, "{}", log.len());
    assert_eq!(log_counters(&s.sw), (3 * 4096, 3 * 4096, 0));
    let mut want = vec![1u8; 4096];
    want.extend([2u8; 2 * 4096]);
    want.extend([3u8; 4096]);
    assert_eq!(read_all(&s, 4 * 4096), want);

    // E recovered: reclaim at 8 KiB/s. A round worth one second copies 8 KiB, the next the rest.
    s.sw.set_rules(rules(&s.e, true), &[forward_log(&s.f, Some(2 * 4096))])
        .unwrap();
    s.sw.reclaim(Duration::from_secs(1)).unwrap();
    assert_eq!(log_counters(&s.sw), (3 * 4096, 4096, 2 * 4096));
    assert_eq!(read_all(&s, 4 * 4096), want);
    // While reclaiming, new writes go straight to E and replace what the log held there.
    s.sw.write(&a, &[4u8; 100], 3 * 4096).unwrap();
    assert_eq!(log_counters(&s.sw), (3 * 4096, 4096 - 100, 2 * 4096));
    want[3 * 4096..3 * 4096 + 100].fill(4);
    s.sw.reclaim(Duration::from_secs(1)).unwrap();
    assert_eq!(log_counters(&s.sw), (3 * 4096, 0, 3 * 4096 - 100));
    assert_eq!(std::fs::read(s.e_root.join("ep/v")).unwrap(), want);
    assert_eq!(read_all(&s, 4 * 4096), want);

    // Reclaimed: the controller takes the stage out; reads go to E alone, nothing lost.
    s.sw.set_rules(rules(&s.e, false), &[]).unwrap();
    assert!(s.sw.stage_stats().is_empty());
    assert_eq!(read_all(&s, 4 * 4096), want);
    let log_len = std::fs::metadata(s.f_root.join("fwd/a/stage.log"))
        .unwrap()
        .len();
    s.sw.write(&a, &[5u8; 4096], 0).unwrap();
    want[..4096].fill(5);
    assert_eq!(std::fs::read(s.e_root.join("ep/v")).unwrap(), want);
    assert_eq!(
        std::fs::metadata(s.f_root.join("fwd/a/stage.log"))
            .unwrap()
            .len(),
        log_len,
        "nothing goes to the log once it is out of the route"
    );
}

#[test]
fn a_forwarding_log_taken_out_before_reclaim_writes_everything_back() {
    let s = setup();
    let a = ctx(&s.backing, Some("a"), "/v");
    s.sw.set_rules(rules(&s.e, true), &[forward_log(&s.f, None)])
        .unwrap();
    s.sw.write(&a, &[7u8; 4096], 4096).unwrap();
    // Without a reclaim rate the background reclaim copies nothing.
    s.sw.reclaim(Duration::from_secs(10)).unwrap();
    assert_eq!(log_counters(&s.sw), (4096, 4096, 0));
    // A controller that lost its state ships the route without the log: the retired log
    // writes all it holds back to E at once, then goes.
    s.sw.set_rules(rules(&s.e, false), &[]).unwrap();
    let mut want = vec![1u8; 3 * 4096];
    want[4096..8192].fill(7);
    assert_eq!(std::fs::read(s.e_root.join("ep/v")).unwrap(), want);
    assert_eq!(read_all(&s, 3 * 4096), want);
}

#[test]
fn a_restarted_switch_replays_the_remote_log() {
    let s = setup();
    let a = ctx(&s.backing, Some("a"), "/v");
    s.sw.set_rules(rules(&s.e, true), &[forward_log(&s.f, None)])
        .unwrap();
    s.sw.write(&a, &[8u8; 4096], 0).unwrap();
    s.sw.sync(&a).unwrap();
    let state = s._t.path().join("s");
    let again = Switch::new(SwitchOptions {
        state_dir: state,
        rules: rules(&s.e, true),
        stages: vec![forward_log(&s.f, None)],
        devices: Default::default(),
        roots: Default::default(),
        remote: Default::default(),
    })
    .unwrap();
    let z = ctx(&s.backing, Some("z"), "/v");
    let mut buf = vec![0u8; 2 * 4096];
    again.read(&z, &mut buf, 0).unwrap();
    assert_eq!(&buf[..4096], &[8u8; 4096]);
    assert_eq!(&buf[4096..], &[1u8; 4096]);
    let c = again
        .stage_stats()
        .into_iter()
        .find(|s| s.name == "fwd/a")
        .unwrap();
    assert_eq!(c.dirty_bytes, 4096);
}

#[test]
fn a_second_forwarding_into_the_same_log_starts_empty_and_brings_nothing_old_back() {
    let s = setup();
    let a = ctx(&s.backing, Some("a"), "/v");
    // Episode 1: block 1 forwarded, reclaimed, the log taken out of the route.
    s.sw.set_rules(rules(&s.e, true), &[forward_log(&s.f, None)])
        .unwrap();
    s.sw.write(&a, &[2u8; 4096], 4096).unwrap();
    s.sw.set_rules(rules(&s.e, true), &[forward_log(&s.f, Some(1 << 20))])
        .unwrap();
    s.sw.reclaim(Duration::from_secs(1)).unwrap();
    assert_eq!(log_counters(&s.sw), (4096, 0, 4096));
    s.sw.set_rules(rules(&s.e, false), &[]).unwrap();
    assert_eq!(
        std::fs::metadata(s.f_root.join("fwd/a/stage.log"))
            .unwrap()
            .len(),
        0,
        "a forwarding log that holds nothing is cut"
    );
    // Normal: block 1 written again, to E.
    s.sw.write(&a, &[5u8; 4096], 4096).unwrap();
    // Episode 2 into the same log: it holds only what episode 2 writes, and its reclaim
    // leaves E with the newest bytes of every block.
    s.sw.set_rules(rules(&s.e, true), &[forward_log(&s.f, None)])
        .unwrap();
    assert_eq!(log_counters(&s.sw), (0, 0, 0));
    s.sw.write(&a, &[6u8; 4096], 2 * 4096).unwrap();
    assert_eq!(log_counters(&s.sw), (4096, 4096, 0));
    s.sw.set_rules(rules(&s.e, true), &[forward_log(&s.f, Some(1 << 20))])
        .unwrap();
    s.sw.reclaim(Duration::from_secs(1)).unwrap();
    assert_eq!(log_counters(&s.sw), (4096, 0, 4096));
    let mut want = vec![1u8; 3 * 4096];
    want[4096..8192].fill(5);
    want[8192..].fill(6);
    assert_eq!(std::fs::read(s.e_root.join("ep/v")).unwrap(), want);
    assert_eq!(read_all(&s, 3 * 4096), want);
}

#[test]
fn a_switch_restarted_mid_forwarding_reclaims_everything_it_held_paced() {
    let s = setup();
    let a = ctx(&s.backing, Some("a"), "/v");
    let w = ctx(&s.backing, Some("a"), "/w");
    s.sw.set_rules(rules(&s.e, true), &[forward_log(&s.f, None)])
        .unwrap();
    s.sw.write(&a, &[2u8; 2 * 4096], 4096).unwrap();
    s.sw.write(&w, &[3u8; 4096], 0).unwrap();
    s.sw.sync(&a).unwrap();
    drop((a, w));
    drop(s.sw);
    // The agent restarts: its switch is made again from the same state directory and the
    // desired state it had (the controller meanwhile says reclaim at 8 KiB/s). No file is
    // open in it; the mount tells it where the namespace's files live.
    let again = Switch::new(SwitchOptions {
        state_dir: s._t.path().join("s"),
        rules: rules(&s.e, true),
        stages: vec![forward_log(&s.f, Some(2 * 4096))],
        devices: Default::default(),
        roots: Default::default(),
        remote: Default::default(),
    })
    .unwrap();
    again.set_backing_root(&s.backing);
    let held = |sw: &Switch| {
        let c = sw
            .stage_stats()
            .into_iter()
            .find(|s| s.name == "fwd/a")
            .unwrap();
        (c.dirty_bytes, c.reclaimed_bytes)
    };
    assert_eq!(held(&again), (3 * 4096, 0));
    // Paced: a round worth one second copies 8 KiB (files in id order), the next the rest.
    again.reclaim(Duration::from_secs(1)).unwrap();
    assert_eq!(held(&again), (4096, 2 * 4096));
    again.reclaim(Duration::from_secs(1)).unwrap();
    assert_eq!(held(&again), (0, 3 * 4096));
    let mut want_v = vec![1u8; 3 * 4096];
    want_v[4096..].fill(2);
    assert_eq!(std::fs::read(s.e_root.join("ep/v")).unwrap(), want_v);
    assert_eq!(
        std::fs::read(s.e_root.join("ep/w")).unwrap(),
        vec![3u8; 4096]
    );
}
