//! Bad flags stop the agent before it touches the bus: exit 2 and a message naming the flag.

mod common;
use common::run_agent_offline as run_agent;

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
