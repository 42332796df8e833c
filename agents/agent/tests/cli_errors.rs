//! Bad flags stop the agent before it touches the bus: exit 2 and a message naming the flag.

use std::process::Command;

fn run_agent(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lachesis-agent"))
        .arg("run")
        .args(args)
        // Nothing listens here: a bad flag must be refused before any connection attempt.
        .args(["--host-id", "cli-test", "--redis-url", "redis://127.0.0.1:1/", "--no-ebpf"])
        .output()
        .expect("run lachesis-agent");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_missing_forward_key_file_is_a_usage_error() {
    let (code, err) = run_agent(&["--forward-key-file", "/nonexistent/lachesis.key"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--forward-key-file") && err.contains("/nonexistent/lachesis.key"), "{err}");
}

#[test]
fn a_too_short_forward_key_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("short.key");
    std::fs::write(&key, b"abc\n").unwrap();
    let (code, err) = run_agent(&["--forward-key-file", key.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("at least"), "{err}");
}
