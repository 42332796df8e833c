//! Bad flags stop the agent before it touches the bus: exit 2 and a message naming the flag.

mod common;
use common::run_agent_offline as run_agent;

#[test]
fn a_missing_forward_key_file_is_a_usage_error() {
    let (code, err) = run_agent(&["--forward-key-file", "/nonexistent/lachesis.key"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--forward-key-file") && err.contains("/nonexistent/lachesis.key"),
        "{err}"
    );
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

#[test]
fn a_taken_kv_address_is_a_usage_error_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = run_agent(&["--kv-listen", &addr]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--kv-listen") && err.contains(&addr), "{err}");
}

#[test]
fn a_bad_kv_tenant_port_is_a_usage_error() {
    let (code, err) = run_agent(&[
        "--kv-listen",
        "127.0.0.1:0",
        "--kv-tenant-port",
        "catalog=0",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--kv-tenant-port") && err.contains("not a port"),
        "{err}"
    );
    // A tenant port needs the front end.
    let (code, err) = run_agent(&["--kv-tenant-port", "catalog=11400"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--kv-listen"), "{err}");
}
