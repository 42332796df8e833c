//! A standalone `lachesis-fs serve` (the real binary) with its server-level flags: the
//! second level of a two-level cache on a storage server without an agent. Its stats file
//! shows the stage hit, the store spared and a demotion taken; bad flags exit 2 naming them.
//! Waits are counted polls (of a connection, of a stats snapshot), never timed assertions.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use lachesis_fs::remote::Client;

const BIN: &str = env!("CARGO_BIN_EXE_lachesis-fs");

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// The stats file's first snapshot taken after `seen` was read: two past it.
fn stats_after(path: &Path, seen: Option<u64>) -> serde_json::Value {
    for _ in 0..2000 {
        if let Some(v) = std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        {
            let n = v["snapshot"].as_u64().unwrap();
            if seen.is_none_or(|s| n >= s + 2) {
                return v;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("no stats snapshot in {}", path.display());
}

/// A client of the server at `addr` once it answers (a counted poll of the connection).
fn up(addr: &str) -> Client {
    let c = Client::new(addr, Duration::from_secs(60));
    for _ in 0..2000 {
        if c.getattr(".probe").is_ok() {
            return c;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("serve did not come up on {addr}");
}

#[test]
fn a_standalone_server_runs_the_server_level_from_its_flags() {
    let t = tempfile::tempdir().unwrap();
    let (root, stats) = (t.path().join("root"), t.path().join("stats.json"));
    std::fs::create_dir_all(root.join("media")).unwrap();
    std::fs::write(root.join("media/f"), vec![5u8; 8 * 4096]).unwrap();
    let addr = free_addr();
    let _serve = Serve(
        Command::new(BIN)
            .args(["serve", "--listen", &addr, "--root"])
            .arg(&root)
            .args([
                "--cache-bytes",
                "1048576",
                "--cache-serves",
                "media",
                "--cache-exclusive",
                "--stats",
            ])
            .arg(&stats)
            .spawn()
            .unwrap(),
    );
    let c = up(&addr);
    let mut buf = vec![0u8; 4096];
    let before = stats_after(&stats, None);
    assert_eq!(before["stages"]["cache/serve"]["exclusive"], true);
    // A level 1 that demotes reads block 0 (lent), then demotes it; the next such read
    // takes it from the server level, not the store.
    let (n, token) = c.read_lent("media/f", &mut buf, 0).unwrap();
    assert_eq!((n, buf[0]), (4096, 5));
    assert!(token > 0);
    assert!(c.demote("media/f", 0, token, &buf).unwrap());
    let (_, again) = c.read_lent("media/f", &mut buf, 0).unwrap();
    assert!(again > 0 && buf == vec![5u8; 4096]);
    // A plain reader's reads fill it (inclusive for readers that do not demote).
    c.read("media/f", &mut buf, 4096).unwrap();
    c.read("media/f", &mut buf, 4096).unwrap();
    let seen = before["snapshot"].as_u64();
    let after = stats_after(&stats, seen);
    let st = &after["stages"]["cache/serve"];
    assert_eq!(
        (st["demoted_blocks"].as_u64(), st["demotion_hits"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        (st["hits"].as_u64(), st["misses"].as_u64()),
        (Some(2), Some(2))
    );
    // Block 0 once, block 1 once: the hits spared the store.
    assert_eq!(after["store"]["bytes_read"].as_u64(), Some(2 * 4096));
}

#[test]
fn without_a_server_level_the_stats_file_counts_what_reached_the_store() {
    let t = tempfile::tempdir().unwrap();
    let (root, stats) = (t.path().join("root"), t.path().join("stats.json"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("f"), vec![5u8; 4096]).unwrap();
    let addr = free_addr();
    let _serve = Serve(
        Command::new(BIN)
            .args(["serve", "--listen", &addr, "--root"])
            .arg(&root)
            .arg("--stats")
            .arg(&stats)
            .spawn()
            .unwrap(),
    );
    let c = up(&addr);
    let before = stats_after(&stats, None);
    let mut buf = vec![0u8; 4096];
    c.read("f", &mut buf, 0).unwrap();
    c.read("f", &mut buf, 0).unwrap();
    let after = stats_after(&stats, before["snapshot"].as_u64());
    assert_eq!(after["store"]["bytes_read"].as_u64(), Some(2 * 4096));
    assert_eq!(after["stages"], serde_json::json!({}));
}

#[test]
fn bad_server_level_flags_exit_2_naming_the_flag() {
    let t = tempfile::tempdir().unwrap();
    for (extra, want) in [
        (
            vec!["--cache-exclusive"],
            "--cache-exclusive needs --cache-bytes",
        ),
        (
            vec!["--cache-bytes", "1048576", "--cache-engine", "ssd"],
            "expected dram",
        ),
        (
            vec!["--cache-bytes", "1048576", "--cache-engine", "loc"],
            "needs a --device",
        ),
        (
            vec!["--cache-bytes", "1048576", "--cache-serves", "../x"],
            "--cache-serves",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:1", "--root"])
            .arg(t.path())
            .args(&extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
    }
}
