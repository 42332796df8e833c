//! Warm restart of the `lachesis-kv` binary on a flash device: after a clean shutdown
//! (SIGTERM) the flash cache comes back with its objects; after a crash (SIGKILL), even one
//! following a warm start, it comes back empty. With Kangaroo and with FairyWREN as the
//! small-object engine.

mod common;

use common::Server;

fn args<'a>(dev: &'a str, state: &'a str, small: &'a str) -> [&'a str; 12] {
    // No DRAM front: every object read is read from flash, before and after the restart.
    [
        "--small-engine",
        small,
        "--device",
        dev,
        "--cache-mib",
        "32",
        "--dram-mib",
        "0",
        "--state-dir",
        state,
        "--small-fraction",
        "0.5",
    ]
}

fn term(mut s: Server) {
    let pid = s.child.id().to_string();
    let st = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(st.success());
    let exit = s.child.wait().unwrap();
    assert!(exit.success(), "clean shutdown: {exit:?}");
}

fn hits(s: &Server, n: usize) -> usize {
    let mut c = s.client();
    (0..n)
        .filter(|i| match c.get(&format!("key:{i}")) {
            Some(v) => {
                assert_eq!(v, value(*i), "key:{i} came back with other bytes");
                true
            }
            None => false,
        })
        .count()
}

fn value(i: usize) -> Vec<u8> {
    // Small objects (Kangaroo) and large ones (the log).
    let len = if i.is_multiple_of(10) {
        5000
    } else {
        100 + i % 200
    };
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

#[test]
fn a_clean_shutdown_comes_back_warm_and_a_crash_cold() {
    restart("kangaroo");
}

#[test]
fn fairywren_small_comes_back_warm_and_a_crash_cold() {
    restart("fairywren");
}

fn restart(small: &str) {
    let dir = tempfile::tempdir().unwrap();
    let dev = format!("flash0={}:128MiB", dir.path().join("flash0").display());
    let state = dir.path().join("state").display().to_string();
    let args = |dev, state| args(dev, state, small);
    let n = 3000;
    let s = Server::start(&args(&dev, &state));
    let mut c = s.client();
    for i in 0..n {
        assert_eq!(c.set(&format!("key:{i}"), &value(i)), "STORED");
    }
    let before = hits(&s, n);
    assert!(
        before > n / 4,
        "{small}: {before} of {n} on flash before the restart"
    );
    // The small-object engine reports itself, its objects and its index's DRAM.
    let mut c = s.client();
    let stat =
        |c: &mut common::Client, f: &str| c.stat("lachesis", &format!("stage:cache/default:{f}"));
    let engine = if small == "fairywren" {
        "hybrid-fairywren"
    } else {
        "hybrid"
    };
    assert_eq!(stat(&mut c, "engine").as_deref(), Some(engine));
    let num = |v: Option<String>| v.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    assert!(
        num(stat(&mut c, &format!("{small}:objects"))) > 0,
        "{small} holds objects"
    );
    assert!(
        num(stat(&mut c, &format!("{small}:dram_bytes"))) > 0,
        "{small}: its index's DRAM"
    );
    assert!(
        num(stat(&mut c, "loc:dram_bytes")) > 0,
        "the log's index DRAM"
    );
    term(s);

    let s = Server::start(&args(&dev, &state));
    let after = hits(&s, n);
    assert_eq!(
        after, before,
        "every object on flash at the shutdown comes back"
    );
    assert!(
        std::fs::read_dir(&state).unwrap().next().is_none(),
        "the state is removed once read"
    );
    // A crash: nothing was saved, the next start is cold (never an index of an older device).
    let mut c = s.client();
    assert_eq!(c.set("key:0", b"newer"), "STORED");
    drop(s);

    let s = Server::start(&args(&dev, &state));
    assert_eq!(hits(&s, n), 0, "after a crash the cache starts empty");
    assert_eq!(s.client().get("key:0"), None);
}
