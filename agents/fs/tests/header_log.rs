//! `header -> file` detours append each matching IO's header to the file while the IO goes on
//! to its data destination; header detours the switch cannot honour are refused, not dropped.

mod common;
use common::ctx;

use std::path::Path;
use std::sync::Arc;

use lachesis_fs::{config, Switch, SwitchOptions};

fn switch(state: &Path, rules: &str) -> Result<Switch, String> {
    Switch::new(SwitchOptions {
        state_dir: state.to_path_buf(),
        rules: config::parse_rules(rules).unwrap(),
        stages: vec![],
        devices: Default::default(),
        roots: Default::default(),
        remote: Default::default(),
    })
}

fn lines(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn matching_io_headers_are_appended_and_the_io_reaches_its_endpoint() {
    let t = tempfile::tempdir().unwrap();
    let (b, ep) = (t.path().join("b"), t.path().join("ep"));
    std::fs::create_dir_all(&b).unwrap();
    // The log's directory does not exist yet: it is created.
    let log = t.path().join("audit/flow.jsonl");
    let rules = format!(
        r#"[{{"name": "audit", "priority": 1, "match": {{"tenant": "t1", "path_prefix": "/logged"}},
             "detours": [{{"what": "header", "to": {{"kind": "file", "target": "{log}"}}}},
                         {{"what": "io", "to": {{"kind": "file", "target": "{ep}"}}}}]}}]"#,
        log = log.display(),
        ep = ep.display()
    );
    let sw = switch(&t.path().join("s"), &rules).unwrap();
    std::fs::create_dir_all(b.join("logged")).unwrap();
    let c = ctx(&b, Some("t1"), "/logged/f");
    sw.write(&c, &[7u8; 8192], 4096).unwrap();
    // A read of the written range (it follows its delegate) and one of a range never
    // written (matched against the rules): both are logged.
    let mut buf = [0u8; 100];
    assert_eq!(sw.read(&c, &mut buf, 4096).unwrap(), 100);
    assert_eq!(buf, [7u8; 100]);
    assert_eq!(sw.read(&c, &mut buf, 0).unwrap(), 100);
    assert_eq!(buf, [0u8; 100]);
    // The data went where the io detour says.
    assert_eq!(
        std::fs::read(ep.join("logged/f")).unwrap()[4096..],
        [7u8; 8192]
    );
    // IO the rule does not match (other path, other tenant) leaves no line.
    sw.write(&ctx(&b, Some("t1"), "/other"), b"x", 0).unwrap();
    sw.write(&ctx(&b, Some("t2"), "/logged/f"), b"y", 0)
        .unwrap();

    let got = lines(&log);
    assert_eq!(got.len(), 3, "{got:?}");
    let (w, r) = (&got[0], &got[1]);
    assert_eq!(w["op"], "write");
    assert_eq!(w["tenant"], "t1");
    assert_eq!(w["path"], "/logged/f");
    assert_eq!(w["offset"], 4096);
    assert_eq!(w["length"], 8192);
    assert_eq!(w["rule"], "audit");
    assert_eq!(
        (&r["op"], &r["offset"], &r["length"]),
        (&"read".into(), &4096.into(), &100.into())
    );
    assert_eq!(
        (&got[2]["op"], &got[2]["offset"]),
        (&"read".into(), &0.into())
    );
    for l in &got {
        let ts = l["time"].as_str().unwrap();
        time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|e| panic!("time {ts:?} is not RFC 3339: {e}"));
    }
    // Appends, never truncates: a new switch on the same log keeps the old lines.
    drop(sw);
    let sw = switch(&t.path().join("s2"), &rules).unwrap();
    sw.write(&ctx(&b, Some("t1"), "/logged/g"), b"z", 0)
        .unwrap();
    assert_eq!(lines(&log).len(), 4);
    assert_eq!(sw.stats()["header_logs"][0]["appended"], 1);
}

#[test]
fn concurrent_appends_never_interleave() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let log = t.path().join("h.jsonl");
    // Two rules name the same log: they share one writer.
    let rules = format!(
        r#"[{{"name": "a", "priority": 1, "match": {{"tenant": "a"}},
             "detours": [{{"what": "header", "to": {{"kind": "file", "target": "{log}"}}}},
                         {{"what": "io", "to": {{"kind": "file", "target": "{ep}"}}}}]}},
            {{"name": "b", "priority": 2, "match": {{"tenant": "b"}},
             "detours": [{{"what": "io", "to": {{"kind": "file", "target": "{ep}"}}}},
                         {{"what": "header", "to": {{"kind": "file", "target": "{log}"}}}}]}}]"#,
        log = log.display(),
        ep = t.path().join("ep").display()
    );
    let sw = Arc::new(switch(&t.path().join("s"), &rules).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (sw, b) = (sw.clone(), b.clone());
            std::thread::spawn(move || {
                let tenant = if i % 2 == 0 { "a" } else { "b" };
                let c = ctx(&b, Some(tenant), &format!("/f{i}"));
                for k in 0..200u64 {
                    sw.write(&c, b"d", k).unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let got = lines(&log); // every line parses: none interleaved
    assert_eq!(got.len(), 800);
    for rule in ["a", "b"] {
        assert_eq!(got.iter().filter(|l| l["rule"] == rule).count(), 400);
    }
}

#[test]
fn header_detours_to_stages_and_remote_files_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let rule = |to: &str| {
        format!(
            r#"[{{"name": "h", "priority": 1, "match": {{}},
                 "detours": [{{"what": "io", "to": {{"kind": "file", "target": "{ep}"}}}},
                             {{"what": "header", "to": {to}}}]}}]"#,
            ep = t.path().join("ep").display()
        )
    };
    let cases = [
        (
            r#"{"kind": "stage", "target": "cache:mode=write-through,capacity=1MiB"}"#,
            "stages take IO",
        ),
        (
            r#"{"kind": "file", "target": "tcp://127.0.0.1:9/logs"}"#,
            "remote file is not supported",
        ),
        (r#"{"kind": "file", "target": "rel/log"}"#, "absolute"),
    ];
    for (to, why) in cases {
        let err = match switch(&t.path().join("s"), &rule(to)) {
            Ok(_) => panic!("{to} accepted"),
            Err(e) => e,
        };
        assert!(err.contains("rule \"h\""), "{err}");
        assert!(err.contains("detours[1]"), "{err}");
        assert!(err.contains(why), "{err}");
    }
    // A running switch keeps its rules when a refused table is offered.
    let log = t.path().join("ok.jsonl");
    let sw = switch(
        &t.path().join("s"),
        &rule(&format!(
            r#"{{"kind": "file", "target": "{}"}}"#,
            log.display()
        )),
    )
    .unwrap();
    let bad = config::parse_rules(&rule(cases[0].0)).unwrap();
    assert!(sw.set_rules(bad, &[]).is_err());
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    sw.write(&ctx(&b, None, "/f"), b"x", 0).unwrap();
    assert_eq!(lines(&log).len(), 1, "the old header log still works");
}
