//! Agent-to-agent forwarding over real TCP sockets on loopback: pipelining by request id,
//! timeouts, reconnects, ack-after-durable, and the switch routing a tenant's writes to a
//! remote endpoint with delegates.

mod common;
use common::ctx;

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use lachesis_fs::remote::frame::Frame;
use lachesis_fs::remote::Client;
use lachesis_fs::serve::server::{self, DirStore, Store};
use lachesis_fs::{config, Switch, SwitchOptions};

/// Bounds the waits that only turn a hang into a failure, and the client timeouts of tests
/// that are not about the timeout.
const GUARD: Duration = Duration::from_secs(60);

fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap().to_string();
    (l, a)
}

fn real_server(store: Arc<dyn Store>) -> String {
    let (l, a) = listener();
    std::thread::spawn(move || server::serve(l, store, None));
    a
}

#[test]
fn replies_out_of_order_reach_the_request_with_their_id() {
    const N: usize = 8;
    let (l, addr) = listener();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let reqs: Vec<Frame> = (0..N).map(|_| Frame::read_from(&mut r).unwrap()).collect();
        // Every request is in flight before any reply: they were pipelined on one connection.
        let mut w = s;
        for q in reqs.iter().rev() {
            let body = format!("data of {}", q.path).into_bytes();
            Frame::reply(q.id, 0, body.len() as u64, body)
                .write_to(&mut w)
                .unwrap();
        }
        // Keep the connection until the client closes it (it sends nothing more).
        assert!(Frame::read_from(&mut r).is_err());
    });
    let c = Arc::new(Client::new(&addr, GUARD));
    let threads: Vec<_> = (0..N)
        .map(|i| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64];
                let n = c.read(&format!("/f{i}"), &mut buf, 0).unwrap();
                String::from_utf8(buf[..n].to_vec()).unwrap()
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        assert_eq!(t.join().unwrap(), format!("data of /f{i}"));
    }
}

#[test]
fn an_unanswered_request_fails_with_eio_after_the_timeout() {
    let (l, addr) = listener();
    let (got, requests) = mpsc::channel();
    std::thread::spawn(move || {
        // Accepts and reads, never answers, never hangs up.
        let mut held: Vec<TcpStream> = vec![];
        for s in l.incoming() {
            let s = s.unwrap();
            let got = got.clone();
            let r = s.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut r = BufReader::new(r);
                while let Ok(q) = Frame::read_from(&mut r) {
                    let _ = got.send(q.path);
                }
            });
            held.push(s);
        }
    });
    let c = Client::new(&addr, Duration::from_millis(300));
    // On a thread, so a client that waits for ever fails the test instead of hanging it.
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || done.send(c.write("/f", b"x", 0)).unwrap());
    let e = result
        .recv_timeout(GUARD)
        .expect("the client hung")
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    // The request reached the server, whose connection stayed up: the error is the
    // unanswered request's, not a failed connection's.
    assert_eq!(requests.recv_timeout(GUARD).unwrap(), "/f");
    // Nothing listening at all: EIO too, not a hang.
    let (l2, gone) = listener();
    drop(l2);
    let c = Client::new(&gone, Duration::from_millis(300));
    assert_eq!(c.getattr("/f").unwrap_err().raw_os_error(), Some(libc::EIO));
}

#[test]
fn a_dropped_connection_is_replaced_and_a_corrupted_frame_drops_it() {
    let d = tempfile::tempdir().unwrap();
    let store = Arc::new(DirStore::new(d.path()).unwrap());
    let (l, addr) = listener();
    let s2 = store.clone();
    std::thread::spawn(move || {
        let mut conns = l.incoming();
        // First connection: take one request and hang up without answering.
        let s = conns.next().unwrap().unwrap();
        Frame::read_from(&mut BufReader::new(&s)).unwrap();
        drop(s);
        // Second: answer one request, then send a corrupted reply (one flipped data bit).
        let mut s = conns.next().unwrap().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let q = Frame::read_from(&mut r).unwrap();
        server::answer(&*s2, q).write_to(&mut s).unwrap();
        let q = Frame::read_from(&mut r).unwrap();
        let mut bytes = server::answer(&*s2, q).encode();
        *bytes.last_mut().unwrap() ^= 1;
        s.write_all(&bytes).unwrap();
        // Then answer properly, like the real server.
        for s in conns {
            let mut s = s.unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            while let Ok(q) = Frame::read_from(&mut r) {
                server::answer(&*s2, q).write_to(&mut s).unwrap();
            }
        }
    });
    let c = Client::new(&addr, GUARD);
    // The write lost with the first connection is sent again on a new one.
    c.write("/a", b"hello", 0).unwrap();
    assert_eq!(std::fs::read(d.path().join("a")).unwrap(), b"hello");
    // The corrupted reply is never delivered as data: the read is retried on a new connection.
    let mut buf = [0u8; 5];
    assert_eq!(c.read("/a", &mut buf, 0).unwrap(), 5);
    assert_eq!(&buf, b"hello");
}

/// A store whose sync is slow and that logs what happened, in order; the test adds when
/// the client saw the acknowledgement.
struct SlowSync {
    inner: DirStore,
    log: Mutex<Vec<&'static str>>,
}

impl Store for SlowSync {
    fn read(&self, p: &str, off: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.inner.read(p, off, len)
    }
    fn write(&self, p: &str, off: u64, data: &[u8]) -> std::io::Result<()> {
        self.log.lock().unwrap().push("write");
        self.inner.write(p, off, data)
    }
    fn sync(&self, p: &str) -> std::io::Result<()> {
        // Slow, so that a server acknowledging before the sync returned would be caught:
        // the order of the log decides, this delay only widens that window (a correct
        // server passes however long or short it is).
        std::thread::sleep(Duration::from_millis(300));
        let r = self.inner.sync(p);
        self.log.lock().unwrap().push("synced");
        r
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

#[test]
fn a_write_is_acknowledged_only_after_it_is_durable() {
    let d = tempfile::tempdir().unwrap();
    let store = Arc::new(SlowSync {
        inner: DirStore::new(d.path()).unwrap(),
        log: Mutex::new(vec![]),
    });
    let addr = real_server(store.clone());
    let c = Client::new(&addr, GUARD);
    c.write("/w", &[7u8; 4096], 8192).unwrap();
    store.log.lock().unwrap().push("acked");
    assert_eq!(
        *store.log.lock().unwrap(),
        ["write", "synced", "acked"],
        "acknowledged before the data was synced"
    );
    assert_eq!(c.getattr("/w").unwrap(), 12288);
    // Errors on the remote come back as their errno.
    assert_eq!(
        c.getattr("/../x").unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
}

#[test]
fn a_tenants_writes_go_to_the_remote_and_reads_of_them_follow() {
    let t = tempfile::tempdir().unwrap();
    let (b, root) = (t.path().join("b"), t.path().join("remote"));
    std::fs::create_dir_all(&b).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(b.join("f"), vec![1u8; 3 * 4096]).unwrap();
    let addr = real_server(Arc::new(DirStore::new(&root).unwrap()));
    let rules = format!(
        r#"[{{"name": "off", "priority": 1, "match": {{"tenant": "a", "ops": ["write"]}},
             "detours": [{{"what": "io", "to": {{"kind": "file", "target": "tcp://{addr}/ep"}}}}]}}]"#
    );
    let sw = Switch::new(SwitchOptions {
        state_dir: t.path().join("s"),
        rules: config::parse_rules(&rules).unwrap(),
        stages: vec![],
        devices: Default::default(),
        roots: Default::default(),
        remote: Default::default(),
    })
    .unwrap();
    let a = ctx(&b, Some("a"), "/f");
    sw.write(&a, &[9u8; 4096], 4096).unwrap();
    // The bytes are on the remote, not in the backing file.
    let remote = std::fs::read(root.join("ep/f")).unwrap();
    assert_eq!(&remote[4096..8192], &[9u8; 4096]);
    assert_eq!(
        &std::fs::read(b.join("f")).unwrap()[4096..8192],
        &[1u8; 4096]
    );
    // Any tenant's read of the written range follows it; the other ranges stay local.
    let other = ctx(&b, Some("z"), "/f");
    let mut buf = vec![0u8; 3 * 4096];
    assert_eq!(sw.read(&other, &mut buf, 0).unwrap(), 3 * 4096);
    assert_eq!(&buf[..4096], &[1u8; 4096]);
    assert_eq!(&buf[4096..8192], &[9u8; 4096]);
    assert_eq!(&buf[8192..], &[1u8; 4096]);
    // A write past the end extends the namespace (the backing file keeps the size).
    sw.write(&a, b"tail", 5 * 4096).unwrap();
    assert_eq!(std::fs::metadata(b.join("f")).unwrap().len(), 5 * 4096 + 4);
    sw.sync(&a).unwrap();
    // Rename: the remote copy follows the name, so the delegate still finds its bytes.
    sw.renamed("/f", "/g").unwrap();
    std::fs::rename(b.join("f"), b.join("g")).unwrap();
    let g = ctx(&b, None, "/g");
    let mut buf = vec![0u8; 4096];
    sw.read(&g, &mut buf, 4096).unwrap();
    assert_eq!(buf, vec![9u8; 4096]);
    // A write set naming one copy twice is refused, changing nothing.
    let bad = format!(
        r#"[{{"name": "x", "priority": 1, "match": {{}},
             "detours": [{{"what": "io", "to": {{"kind": "file", "target": "tcp://{addr}/ep"}}}},
                         {{"what": "io", "to": {{"kind": "file", "target": "tcp://{addr}/ep/"}}}}]}}]"#
    );
    let e = sw
        .set_rules(config::parse_rules(&bad).unwrap(), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("named twice"), "{e}");
    assert_eq!(sw.rules().len(), 1);
}

#[test]
fn scatter_over_two_agents_and_a_local_directory() {
    let t = tempfile::tempdir().unwrap();
    let (b, ra, rb, loc) = (
        t.path().join("b"),
        t.path().join("ra"),
        t.path().join("rb"),
        t.path().join("loc"),
    );
    for d in [&b, &ra, &rb] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(b.join("f"), vec![1u8; 4 * 4096]).unwrap();
    let (la, a) = listener();
    let (lb, bb) = listener();
    for (l, root) in [(la, ra.clone()), (lb, rb.clone())] {
        let store = Arc::new(DirStore::new(&root).unwrap());
        std::thread::spawn(move || server::serve(l, store, None));
    }
    let rules = format!(
        r#"[{{"name": "w", "priority": 1, "match": {{"ops": ["write"]}},
             "detours": [{{"what": "io", "to": {{"kind": "file", "target": "tcp://{a}/ep"}}}},
                         {{"what": "io", "to": {{"kind": "file", "target": "{}"}}}},
                         {{"what": "io", "to": {{"kind": "file", "target": "tcp://{bb}/ep"}}}}]}}]"#,
        loc.display()
    );
    // Process-wide, and the tests run in parallel: every test sets the same generous value.
    let sw = Switch::new(SwitchOptions {
        state_dir: t.path().join("s"),
        rules: config::parse_rules(&rules).unwrap(),
        stages: vec![],
        devices: Default::default(),
        roots: Default::default(),
        // A held remote request must not fail on the client's timeout while the test holds it.
        remote: lachesis_fs::route::RemoteOptions {
            timeout: GUARD,
            key: None,
        },
    })
    .unwrap();
    let c = ctx(&b, None, "/f");
    sw.write(&c, &[7u8; 8192], 4096).unwrap();
    // Acknowledged: on every replica of the write set, none of it in the backing file.
    for copy in [ra.join("ep/f"), loc.join("f"), rb.join("ep/f")] {
        let got = std::fs::read(&copy).unwrap();
        assert_eq!(&got[4096..12288], &[7u8; 8192], "{}", copy.display());
    }
    assert_eq!(std::fs::read(b.join("f")).unwrap(), vec![1u8; 4 * 4096]);
    // Reads of the written range come from the primary (agent A): change its copy to see.
    std::fs::write(ra.join("ep/f"), vec![5u8; 3 * 4096]).unwrap();
    let mut buf = vec![0u8; 4 * 4096];
    sw.read(&c, &mut buf, 0).unwrap();
    assert_eq!(&buf[..4096], &[1u8; 4096]);
    assert_eq!(&buf[4096..12288], &[5u8; 8192]);
    assert_eq!(&buf[12288..], &[1u8; 4096]);
    sw.sync(&c).unwrap();
}

#[test]
fn an_unreachable_remote_fails_the_io_with_eio() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let (l, addr) = listener();
    drop(l);
    let rules = format!(
        r#"[{{"name": "off", "priority": 1, "match": {{}},
             "detours": [{{"what": "io", "to": {{"kind": "file", "target": "tcp://{addr}/ep"}}}}]}}]"#
    );
    // Refused at once (nothing listens): the timeout is not what ends it.
    let sw = Switch::new(SwitchOptions {
        state_dir: t.path().join("s"),
        rules: config::parse_rules(&rules).unwrap(),
        stages: vec![],
        devices: Default::default(),
        roots: Default::default(),
        // A held remote request must not fail on the client's timeout while the test holds it.
        remote: lachesis_fs::route::RemoteOptions {
            timeout: GUARD,
            key: None,
        },
    })
    .unwrap();
    let c = ctx(&b, None, "/f");
    let e = sw.write(&c, b"x", 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
}

#[test]
fn a_client_with_the_wrong_key_is_refused_and_writes_nothing() {
    use lachesis_fs::remote::auth::Key;
    let d = tempfile::tempdir().unwrap();
    let (l, addr) = listener();
    let store = Arc::new(DirStore::new(d.path()).unwrap());
    let key = Key::from_bytes(b"the-shared-forwarding-key").unwrap();
    let k = key.clone();
    std::thread::spawn(move || server::serve(l, store, Some(k)));
    let t = GUARD;
    let wrong = Client::with_key(
        &addr,
        t,
        Some(Key::from_bytes(b"not-the-shared-key!!").unwrap()),
    );
    let e = wrong.write("f", b"secret", 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    let keyless = Client::new(&addr, t);
    assert!(keyless.write("f", b"secret", 0).is_err());
    assert!(
        !d.path().join("f").exists(),
        "nothing of a refused peer was written"
    );
    // The right key gets through, and a server without the key is refused by the client.
    let right = Client::with_key(&addr, t, Some(key.clone()));
    right.write("f", b"hello", 0).unwrap();
    assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"hello");
    let open = real_server(Arc::new(DirStore::new(d.path()).unwrap()));
    let to_open = Client::with_key(&open, Duration::from_millis(500), Some(key));
    assert!(
        to_open.write("g", b"x", 0).is_err(),
        "a keyless server does not pass"
    );
    assert!(!d.path().join("g").exists());
}

/// A store that, once armed, writes the first half of a write, says so, and writes the
/// second half only when the test lets it: a read in between would see part of each
/// version of the block.
struct HalfWrites {
    inner: DirStore,
    armed: AtomicBool,
    halfway: Mutex<mpsc::Sender<()>>,
    go_on: Mutex<mpsc::Receiver<()>>,
}

impl Store for HalfWrites {
    fn read(&self, p: &str, off: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.inner.read(p, off, len)
    }
    fn write(&self, p: &str, off: u64, data: &[u8]) -> std::io::Result<()> {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return self.inner.write(p, off, data);
        }
        let half = data.len() / 2;
        self.inner.write(p, off, &data[..half])?;
        self.halfway.lock().unwrap().send(()).unwrap();
        self.go_on.lock().unwrap().recv().unwrap();
        self.inner.write(p, off + half as u64, &data[half..])
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

#[test]
fn a_read_racing_a_write_of_its_block_sees_the_block_whole() {
    let t = tempfile::tempdir().unwrap();
    let (b, root) = (t.path().join("b"), t.path().join("remote"));
    std::fs::create_dir_all(&b).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(b.join("f"), vec![0u8; 4096]).unwrap();
    let (halfway_tx, halfway) = mpsc::channel();
    let (go_on, go_on_rx) = mpsc::channel();
    let store = Arc::new(HalfWrites {
        inner: DirStore::new(&root).unwrap(),
        armed: AtomicBool::new(false),
        halfway: Mutex::new(halfway_tx),
        go_on: Mutex::new(go_on_rx),
    });
    let addr = real_server(store.clone());
    let rules = format!(
        r#"[{{"name": "off", "priority": 1, "match": {{"tenant": "a", "ops": ["write"]}},
             "detours": [{{"what": "io", "to": {{"kind": "file", "target": "tcp://{addr}/ep"}}}}]}}]"#
    );
    let sw = Switch::new(SwitchOptions {
        state_dir: t.path().join("s"),
        rules: config::parse_rules(&rules).unwrap(),
        stages: vec![],
        devices: Default::default(),
        roots: Default::default(),
        // A held remote request must not fail on the client's timeout while the test holds it.
        remote: lachesis_fs::route::RemoteOptions {
            timeout: GUARD,
            key: None,
        },
    })
    .unwrap();
    let a = ctx(&b, Some("a"), "/f");
    sw.write(&a, &[1u8; 4096], 0).unwrap();
    let reader = ctx(&b, None, "/f");
    let mut buf = vec![0u8; 4096];
    let read_done = AtomicBool::new(false);
    let waits = || sw.stats()["block_lock_waits"].as_u64().unwrap();
    let waits_before = waits();
    store.armed.store(true, Ordering::SeqCst);
    std::thread::scope(|s| {
        s.spawn(|| sw.write(&a, &[2u8; 4096], 0).unwrap());
        // The remote holds half of the new bytes; the read starts now and the write goes on
        // once the read is either blocked on the block's lock or (a torn read) done.
        halfway.recv_timeout(GUARD).unwrap();
        let read = s.spawn(|| {
            sw.read(&reader, &mut buf, 0).unwrap();
            read_done.store(true, Ordering::SeqCst);
        });
        let mut polls = 0u32;
        while waits() == waits_before && !read_done.load(Ordering::SeqCst) {
            polls += 1;
            assert!(
                polls < 60_000,
                "the read neither waited nor finished ({polls} polls)"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        go_on.send(()).unwrap();
        read.join().unwrap();
    });
    assert!(
        buf.iter().all(|x| *x == buf[0]) && buf[0] != 0,
        "torn read: {} bytes of 1, {} of 2",
        buf.iter().filter(|x| **x == 1).count(),
        buf.iter().filter(|x| **x == 2).count()
    );
}
