//! `serve`'s rate limit (`--max-iops`, stages serve/limit.rs) on a real server over real connections
//! (its own test binary: the limit is process-wide), and the real binary refusing a zero
//! limit. Order and counts, not times: replies are numbered as they arrive.

use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use lachesis_fs::remote::frame::{Frame, Op};
use lachesis_fs::serve::limit::{self as qos, Limits};
use lachesis_fs::serve::server::{self, DirStore};

/// Connections, and requests each keeps outstanding (a connection's workers).
const CONNS: usize = 4;
const EACH: u64 = 4;

/// Sends `n` size lookups on a new connection; a thread numbers each reply as it arrives
/// (`seq`, shared by all connections) and hands (connection, number) to `tx`.
fn load(
    addr: &str,
    conn: usize,
    n: u64,
    seq: &Arc<AtomicUsize>,
    tx: &mpsc::Sender<(usize, usize)>,
) {
    let mut s = TcpStream::connect(addr).unwrap();
    for id in 1..=n {
        let mut f = Frame::request(Op::Getattr, "probe", 0, 0, vec![]);
        f.id = id;
        f.write_to(&mut s).unwrap();
    }
    let (seq, tx) = (seq.clone(), tx.clone());
    std::thread::spawn(move || {
        for _ in 0..n {
            let r = Frame::read_from(&mut s).unwrap();
            assert_eq!(r.status, 0);
            let _ = tx.send((conn, seq.fetch_add(1, Ordering::SeqCst) + 1));
        }
    });
}

#[test]
fn requests_over_the_limit_queue_in_arrival_order_across_connections() {
    // 5 a second: the 16 requests below take about 3 s to be let through.
    let limit = Arc::new(qos::RateLimit::new(
        Limits::new(Some(5), None).unwrap().unwrap(),
    ));
    let t = tempfile::tempdir().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let store = Arc::new(DirStore::new(t.path()).unwrap());
    let server_limit = limit.clone();
    std::thread::spawn(move || server::serve_limited(l, store, None, Some(server_limit)));
    let seq = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    for c in 0..CONNS {
        load(&addr, c, EACH, &seq, &tx);
    }
    let total = CONNS * EACH as usize;
    // Every request sent is booked into the schedule (counted poll; a hang guard, not a time).
    for poll in 0.. {
        if limit.booked() == total as u64 {
            break;
        }
        assert!(
            poll < 6000,
            "the server booked {} of {total}",
            limit.booked()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A request arriving now, on a connection of its own, queues behind all of them.
    let answered_when_sent = seq.load(Ordering::SeqCst);
    load(&addr, CONNS, 1, &seq, &tx);
    let mut marker = None;
    for _ in 0..=total {
        let (conn, n) = rx.recv().unwrap();
        if conn == CONNS {
            marker = Some(n);
        }
    }
    assert!(
        answered_when_sent < total,
        "queued, not answered at once: {answered_when_sent} of {total} answered"
    );
    assert_eq!(
        marker,
        Some(total + 1),
        "the later request is answered last"
    );
}

#[test]
fn a_zero_limit_is_refused_naming_the_flag() {
    let t = tempfile::tempdir().unwrap();
    for flag in ["--max-iops", "--max-bytes-per-s"] {
        let out = Command::new(env!("CARGO_BIN_EXE_lachesis-fs"))
            .args(["serve", "--listen", "127.0.0.1:0", "--root"])
            .arg(t.path())
            .args([flag, "0"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains(&format!("{flag} must be at least 1")), "{err}");
    }
}
