//! libmemcached's conformance tester, `memccapable -a`, against the `lachesis-kv` binary:
//! every one of its ASCII tests must pass, as they do against memcached.

mod common;

use std::process::Command;

fn run_memccapable(port: u16) -> (bool, String) {
    let out = Command::new("memccapable")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-a",
            "-v",
            "-t",
            "10",
        ])
        .output()
        .expect("run memccapable");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn check(args: &[&str]) {
    if !common::have("memccapable") {
        return;
    }
    let server = common::Server::start(args);
    let (ok, text) = run_memccapable(server.port());
    let passed = text.matches("[pass]").count();
    assert!(
        ok && passed == 27 && !text.contains("[FAIL]"),
        "memccapable -a: {passed} of 27 passed\n{text}"
    );
}

#[test]
fn memccapable_ascii_passes_in_full_on_dram() {
    check(&[]);
}

#[test]
fn memccapable_ascii_passes_in_full_on_a_hybrid_flash_cache() {
    let dir = tempfile::tempdir().unwrap();
    let dev = format!("flash0={}:64MiB", dir.path().join("flash0").display());
    check(&["--device", &dev, "--cache-mib", "32", "--dram-mib", "1"]);
}
