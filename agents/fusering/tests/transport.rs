//! Both transports against the kernel: a FUSE connection mounted with each, its file read
//! back, and the counters saying which path the requests took. Needs root, /dev/fuse and a
//! kernel with FUSE over io_uring (6.14+, `CONFIG_FUSE_IO_URING`); without them the test is
//! skipped, except under CI, where it fails.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use lachesis_fusering::probe::{byte_at, ProbeFs, NAME};
use lachesis_fusering::{Counters, Session, SessionConfig, Transport};

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
const SIZE: u64 = 64 << 20;

fn prerequisites() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse".into());
    }
    if !Path::new(PARAM).exists() {
        return Err(format!("no {PARAM}: the kernel has no FUSE over io_uring"));
    }
    Ok(())
}

/// Sets the module parameter for the test and puts the old value back after it.
struct Param(String);

impl Param {
    fn set(v: &str) -> Self {
        let old = std::fs::read_to_string(PARAM).expect("read enable_uring");
        std::fs::write(PARAM, v).expect("write enable_uring");
        Param(old.trim().to_string())
    }
}

impl Drop for Param {
    fn drop(&mut self) {
        let _ = std::fs::write(PARAM, &self.0);
    }
}

/// Reads `data` at offsets that cross blocks and its end, and checks every byte.
fn read_back(mnt: &Path) -> u64 {
    let f = File::open(mnt.join(NAME)).expect("open data");
    let mut reads = 0;
    for (off, len) in [
        (0u64, 4096usize),
        (5 * 4096 + 100, 8192),
        (SIZE - 10, 4096),
        (1 << 20, 1 << 20),
    ] {
        let mut buf = vec![0u8; len];
        let n = f.read_at(&mut buf, off).expect("read");
        assert_eq!(
            n as u64,
            (len as u64).min(SIZE - off),
            "short read at {off}"
        );
        for (i, &b) in buf[..n].iter().enumerate() {
            assert_eq!(
                b,
                byte_at(off + i as u64),
                "byte {} of the read at {off}",
                i
            );
        }
        reads += 1;
    }
    reads
}

fn mounted(transport: Transport, run: impl FnOnce(&Path, &Counters)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = SessionConfig {
        transport,
        name: "fusering-test".into(),
        ..Default::default()
    };
    let session = Session::start(dir.path(), cfg, Arc::new(ProbeFs { size: SIZE })).expect("mount");
    run(dir.path(), session.counters());
    drop(session);
}

#[test]
fn both_transports_answer_and_io_uring_falls_back_when_refused() {
    if let Err(why) = prerequisites() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "under CI: {why}"
        );
        eprintln!("skipped: {why}");
        return;
    }
    // One test, so that the module parameter is not changed under another's mount.

    // /dev/fuse only.
    mounted(Transport::Dev { threads: 2 }, |mnt, c| {
        read_back(mnt);
        assert!(c.dev_requests.load(Ordering::Relaxed) > 0);
        assert_eq!(c.ring_requests.load(Ordering::Relaxed), 0);
    });

    // io_uring on: once `start` returns every request goes through the queues.
    {
        let _on = Param::set("Y");
        mounted(
            Transport::Uring {
                depth: 4,
                threads: 1,
            },
            |mnt, c| {
                assert!(c.uring_offered.load(Ordering::Relaxed));
                assert_eq!(c.ring_error(), None);
                assert!(c.ring_entries.load(Ordering::Relaxed) >= 4);
                let dev_before = c.dev_requests.load(Ordering::Relaxed);
                let reads = read_back(mnt);
                // Each read_at is at least one READ; open, lookup and getattr come on top.
                assert!(c.ring_requests.load(Ordering::Relaxed) >= reads);
                assert_eq!(c.dev_requests.load(Ordering::Relaxed), dev_before);
            },
        );
    }

    // io_uring off in the kernel: the connection is not offered it and /dev/fuse serves.
    {
        let _off = Param::set("N");
        mounted(
            Transport::Uring {
                depth: 4,
                threads: 1,
            },
            |mnt, c| {
                assert!(!c.uring_offered.load(Ordering::Relaxed));
                assert!(c.ring_error().is_some());
                read_back(mnt);
                assert_eq!(c.ring_requests.load(Ordering::Relaxed), 0);
                assert!(c.dev_requests.load(Ordering::Relaxed) > 0);
            },
        );
    }
}
