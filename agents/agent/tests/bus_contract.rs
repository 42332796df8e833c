//! The bus contract, checked against `api-schemas/`: every `fixtures/<message>/valid-*.json`
//! deserializes into the agent's types, serializes back to the same JSON, and validates
//! against its schema; every `invalid-*.json` is rejected by the schema and by serde.

use std::fs;
use std::path::{Path, PathBuf};

use jsonschema::{Registry, Validator};
use lachesis_agent::bus::{Ack, DesiredState, Heartbeat, Registration};
use lachesis_agent::telemetry::Telemetry;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

const COMMON_ID: &str = "https://lachesis.dev/schemas/bus/common.schema.json";

/// The messages: fixture folder, schema file.
const MESSAGES: [(&str, &str); 8] = [
    ("declared-io", "declared-io.schema.json"),
    ("registration", "registration.schema.json"),
    ("heartbeat", "heartbeat.schema.json"),
    ("desired-state", "desired-state.schema.json"),
    ("ack", "ack.schema.json"),
    ("telemetry", "telemetry.schema.json"),
    ("detour-request", "detour-request.schema.json"),
    ("detour-verdict", "detour-verdict.schema.json"),
];

fn api_schemas() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../api-schemas")
}

fn read_json(p: &Path) -> Value {
    let text = fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn validator(registry: &Registry<'_>, schema_file: &str) -> Validator {
    let schema = read_json(&api_schemas().join("bus").join(schema_file));
    jsonschema::options()
        .with_registry(registry)
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{schema_file}: {e}"))
}

fn registry() -> Registry<'static> {
    let common = read_json(&api_schemas().join("bus/common.schema.json"));
    assert_eq!(common["$id"], COMMON_ID);
    Registry::new()
        .add(COMMON_ID, common)
        .expect("common schema URI")
        .prepare()
        .expect("common schema registers")
}

/// `(name, path)` of the fixtures of one message whose name starts with `prefix`.
fn fixtures(message: &str, prefix: &str) -> Vec<(String, PathBuf)> {
    let dir = api_schemas().join("fixtures").join(message);
    let mut out: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            (name.starts_with(prefix) && name.ends_with(".json")).then_some((name, p))
        })
        .collect();
    out.sort();
    out
}

/// Serde round trip: JSON → type → JSON gives the same value. Returns an error text if the
/// type refuses the JSON.
fn round_trip<T: DeserializeOwned + Serialize>(v: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    Ok(serde_json::to_value(&typed).expect("serializes"))
}

fn serde_round_trip(message: &str, v: &Value) -> Result<Value, String> {
    match message {
        "registration" => round_trip::<Registration>(v),
        "heartbeat" => round_trip::<Heartbeat>(v),
        "desired-state" => round_trip::<DesiredState>(v),
        "ack" => round_trip::<Ack>(v),
        "telemetry" => round_trip::<Telemetry>(v),
        "detour-request" => round_trip::<lachesis_agent::detour_link::DetourRequest>(v),
        "detour-verdict" => round_trip::<lachesis_agent::detour_link::DetourVerdict>(v),
        "declared-io" => round_trip::<lachesis_declared::DeclaredIo>(v),
        other => panic!("no Rust type for message {other:?}: add it here"),
    }
}

#[test]
fn every_message_folder_is_covered() {
    let mut dirs: Vec<String> = fs::read_dir(api_schemas().join("fixtures"))
        .expect("fixtures dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        // Not bus messages: devsim-input (agents/device/tests/devsim_contract.rs), hash (the
        // splitmix64 cases lachesis-mrc and ebpf-metrics/tests/hash_c.rs run), rule-match (the
        // rule algebra's cases, agents/switch/tests).
        .filter(|d| !["devsim-input", "hash", "rule-match"].contains(&d.as_str()))
        .collect();
    dirs.sort();
    let mut known: Vec<String> = MESSAGES.iter().map(|(m, _)| m.to_string()).collect();
    known.sort();
    assert_eq!(
        dirs, known,
        "fixture folders and the messages this test knows differ"
    );
}

#[test]
fn valid_fixtures_validate_and_round_trip() {
    let registry = registry();
    let mut checked = 0;
    for (message, schema_file) in MESSAGES {
        let validator = validator(&registry, schema_file);
        let valid = fixtures(message, "valid-");
        assert!(!valid.is_empty(), "{message}: no valid fixtures");
        for (name, path) in valid {
            let v = read_json(&path);
            let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
            assert!(
                errors.is_empty(),
                "{message}/{name} fails its schema: {errors:?}"
            );
            let back = serde_round_trip(message, &v)
                .unwrap_or_else(|e| panic!("{message}/{name}: serde refuses it: {e}"));
            assert_eq!(back, v, "{message}/{name}: serde round trip changed it");
            // What the agent writes validates too.
            let errors: Vec<String> = validator
                .iter_errors(&back)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.is_empty(),
                "{message}/{name} after round trip: {errors:?}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} valid fixtures");
}

#[test]
fn invalid_fixtures_are_rejected_by_schema_and_serde() {
    let registry = registry();
    let mut checked = 0;
    for (message, schema_file) in MESSAGES {
        let validator = validator(&registry, schema_file);
        let invalid = fixtures(message, "invalid-");
        assert!(!invalid.is_empty(), "{message}: no invalid fixtures");
        for (name, path) in invalid {
            let v = read_json(&path);
            assert!(
                !validator.is_valid(&v),
                "{message}/{name}: the schema accepts it"
            );
            if let Ok(back) = serde_round_trip(message, &v) {
                panic!("{message}/{name}: serde accepts it as {back}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} invalid fixtures");
}

/// What the agent itself produces validates against the schemas.
#[test]
fn agent_made_messages_validate() {
    let registry = registry();
    let v = validator(&registry, "registration.schema.json");
    // As the agent registers with each set of data paths (none, a mount, the KV front end).
    for (fuse, kv) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut reg = lachesis_agent::registration("test-host", vec![]);
        reg.capabilities.data_paths = Some(lachesis_agent::caps::data_paths(fuse, kv));
        let reg = serde_json::to_value(&reg).unwrap();
        let errors: Vec<String> = v.iter_errors(&reg).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{reg}: {errors:?}");
    }

    let desired: DesiredState = serde_json::from_value(read_json(
        &api_schemas().join("fixtures/desired-state/valid-two-rules.json"),
    ))
    .unwrap();
    let mut state = lachesis_agent::state::AgentState::new("host-a");
    let ack_v = validator(&registry, "ack.schema.json");
    for g in [desired.generation, desired.generation, 1] {
        let msg = DesiredState {
            generation: g,
            ..desired.clone()
        };
        let (_, ack) = state.handle(&msg);
        let ack = serde_json::to_value(&ack).unwrap();
        let errors: Vec<String> = ack_v.iter_errors(&ack).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{ack}: {errors:?}");
    }
}

/// The telemetry the agent builds from eBPF counters and curves validates, and the schema and
/// serde agree that a curve needs one miss ratio per size only in serde (the schema cannot say it).
#[test]
fn agent_made_telemetry_validates() {
    use lachesis_agent::bus::Timestamp;
    use lachesis_agent::metrics_engine::{curve_sizes, tenant_curve, tenant_report};
    use lachesis_agent::telemetry::{DeviceTelemetry, TelemetrySchema};
    use lachesis_ebpf_metrics::TenantStats;

    let registry = registry();
    let v = validator(&registry, "telemetry.schema.json");
    let sizes = curve_sizes();
    let ratios: Vec<f64> = (0..sizes.len()).map(|i| 1.0 / (1.0 + i as f64)).collect();
    let curve = tenant_curve(&sizes, &ratios, 1234);
    assert!(curve.is_some());
    // With an allocated size, the shadow cache's counters go along.
    let mut web = tenant_report(
        "web",
        &TenantStats::default(),
        &TenantStats::default(),
        curve,
    );
    let mut shadow = lachesis_agent::metrics_engine::ShadowCache::new(1 << 20, 0.5);
    for k in 0..10 {
        shadow.access(k % 4, 0);
    }
    web.cache = Some(shadow.report());
    assert_eq!(web.cache.map(|c| (c.hits, c.misses)), Some((12, 8)));
    let msg = Telemetry {
        schema: TelemetrySchema,
        host_id: "host-a".into(),
        sent_at: Timestamp::now(),
        interval_s: 5.0,
        tenants: vec![
            web,
            tenant_report(
                "idle",
                &TenantStats::default(),
                &TenantStats::default(),
                None,
            ),
        ],
        devices: vec![DeviceTelemetry {
            name: "flash0".into(),
            host_bytes_written: 4096,
            media_bytes_written: None,
            kind: None,
            placement_handles: None,
            reclaim_unit_bytes: None,
            handles: None,
        }],
        stages: None,
        declared_io: None,
        endpoints: None,
    };
    let json = serde_json::to_value(&msg).unwrap();
    // The size of a report is a benchmark figure (docs/benchmarks/ebpf.md).
    let full = serde_json::to_string(&msg.tenants[0]).unwrap().len();
    let idle = serde_json::to_string(&msg.tenants[1]).unwrap().len();
    eprintln!(
        "telemetry: {} bytes in all; per tenant {full} bytes with a {}-point curve, {idle} without",
        serde_json::to_string(&msg).unwrap().len(),
        sizes.len()
    );
    let errors: Vec<String> = v.iter_errors(&json).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{json}: {errors:?}");
    let back: Telemetry = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, msg);

    let mut bad = json;
    bad["tenants"][0]["curve"]["miss_ratios"] = serde_json::json!([0.5]);
    assert!(v.is_valid(&bad), "the schema cannot check lengths");
    assert!(serde_json::from_value::<Telemetry>(bad).is_err());
}
