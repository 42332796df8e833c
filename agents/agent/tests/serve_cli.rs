//! The forwarding server's flags: bad ones stop the agent before it touches the bus (exit 2,
//! naming the flag).

mod common;
use common::run_agent_offline as run_agent;

#[test]
fn serve_flags_go_together_and_a_taken_address_or_missing_root_is_a_usage_error() {
    let (code, err) = run_agent(&["--serve-listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--serve-root"), "{err}");
    let (code, err) = run_agent(&["--serve-root", "/tmp"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--serve-listen"), "{err}");
    let (code, err) = run_agent(&[
        "--serve-listen",
        "127.0.0.1:0",
        "--serve-root",
        "/nonexistent/lachesis-serve",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--serve-root") && err.contains("/nonexistent/lachesis-serve"),
        "{err}"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = run_agent(&["--serve-listen", &addr, "--serve-root", "/tmp"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--serve-listen") && err.contains(&addr),
        "{err}"
    );
}
