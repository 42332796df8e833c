//! A bad OTLP setting stops the agent before it touches the bus: exit 2 and a message naming
//! the variable (`src/otel.rs`).

use std::process::Command;

fn run_agent_with(var: &str, value: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lachesis-agent"))
        .args(["run", "--host-id", "otel-test", "--no-ebpf"])
        // Nothing listens here: the setting must be refused before any connection attempt.
        .args(["--redis-url", "redis://127.0.0.1:1/"])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env(var, value)
        .output()
        .expect("run lachesis-agent");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_otlp_settings_are_refused_by_name() {
    for (var, value, says) in [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "collector:4318",
            "http:// or https://",
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "http/protobuf only"),
    ] {
        let (code, err) = run_agent_with(var, value);
        assert_eq!(code, Some(2), "{var}: {err}");
        assert!(
            err.contains(var) && err.contains(value) && err.contains(says),
            "{err}"
        );
    }
}
