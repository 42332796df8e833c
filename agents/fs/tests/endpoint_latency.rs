//! The per-endpoint latency monitor against a real `serve` whose test delay hook makes it
//! slow and fast again (its own test binary: the hook is process-wide). Counts, not times:
//! the assertions are on request counts and the slow flag the window gives.

use std::net::TcpListener;
use std::sync::Arc;

use lachesis_fs::confine::Roots;
use lachesis_fs::remote::latency::WINDOW;
use lachesis_fs::serve::server::{self, test_delay, DirStore};

mod common;

#[test]
fn a_delayed_endpoint_shows_slow_and_recovers() {
    let t = tempfile::tempdir().unwrap();
    let delay = t.path().join("delay");
    test_delay::set_file(delay.clone());
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let store = Arc::new(DirStore::new(&root).unwrap());
    std::thread::spawn(move || server::serve(l, store, None));
    let rules = format!(
        r#"[{{"name": "a", "priority": 1, "match": {{"tenant": "a"}},
             "detours": [{{"what": "io", "to": {{"kind": "file", "target": "tcp://{addr}/ep"}}}}]}}]"#
    );
    let sw = common::switch_of(&t.path().join("s"), &rules, Roots::anywhere()).unwrap();
    // Listed from the start, probed only once IO reached it (one write here).
    assert_eq!(sw.endpoint_latency().pop().unwrap().requests, 0);
    let backing = t.path().join("b");
    std::fs::create_dir_all(&backing).unwrap();
    sw.write(&common::ctx(&backing, Some("a"), "/f"), b"x", 0)
        .unwrap();
    // Each report probes it once: a fast baseline of 3 windows.
    let mut last = None;
    for _ in 0..3 * WINDOW - 1 {
        last = sw.endpoint_latency().pop();
    }
    let r = last.clone().unwrap();
    assert_eq!(
        (r.addr.as_str(), r.requests),
        (addr.as_str(), 3 * WINDOW as u64)
    );
    assert!(!r.slow, "{r:?}");
    // 20 ms per request (far above a loopback round trip): one window of them is slow.
    std::fs::write(&delay, "20000").unwrap();
    test_delay::reload();
    for _ in 0..WINDOW {
        last = sw.endpoint_latency().pop();
    }
    let r = last.clone().unwrap();
    assert!(r.slow && r.recent_us > 2.0 * r.mean_us, "{r:?}");
    // Fast again: one window of fast requests clears it.
    std::fs::remove_file(&delay).unwrap();
    test_delay::reload();
    for _ in 0..WINDOW {
        last = sw.endpoint_latency().pop();
    }
    let r = last.clone().unwrap();
    assert!(!r.slow, "{r:?}");
    assert_eq!(r.requests, 5 * WINDOW as u64);
}
