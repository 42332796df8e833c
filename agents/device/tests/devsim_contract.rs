//! The devsim input contract, checked against `api-schemas/devsim-input.schema.json`: every
//! `fixtures/devsim-input/valid-*.json` validates against the schema and is accepted by
//! [`Input::parse`] and [`Input::plan`]; every `invalid-*.json` is rejected by both the schema
//! and the parser. The controller's `test_placement_devsim_contract.py` runs the same files.

use std::fs;
use std::path::{Path, PathBuf};

use lachesis_device::sim::input::Input;
use serde_json::Value;

fn api_schemas() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../api-schemas")
}

fn validator() -> jsonschema::Validator {
    let path = api_schemas().join("devsim-input.schema.json");
    let schema: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(name, text)` of the fixtures whose name starts with `prefix`.
fn fixtures(prefix: &str) -> Vec<(String, String)> {
    let dir = api_schemas().join("fixtures/devsim-input");
    let mut out: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            (name.starts_with(prefix) && name.ends_with(".json"))
                .then(|| (name, fs::read_to_string(&p).unwrap()))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn valid_fixtures_validate_and_plan() {
    let schema = validator();
    let valid = fixtures("valid-");
    assert!(valid.len() >= 3, "only {} valid fixtures", valid.len());
    for (name, text) in valid {
        let json: Value = serde_json::from_str(&text).unwrap();
        let errors: Vec<String> = schema.iter_errors(&json).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{name}: schema says {errors:?}");
        let input = Input::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let plan = input.plan().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(plan.measure_pages > 0 && plan.turn_pages > 0, "{name}");
    }
}

#[test]
fn invalid_fixtures_are_rejected_by_schema_and_parser() {
    let schema = validator();
    let invalid = fixtures("invalid-");
    assert!(
        invalid.len() >= 8,
        "only {} invalid fixtures",
        invalid.len()
    );
    for (name, text) in invalid {
        let json: Value = serde_json::from_str(&text).unwrap();
        assert!(!schema.is_valid(&json), "{name}: the schema accepted it");
        let err = Input::parse(&text)
            .err()
            .unwrap_or_else(|| panic!("{name}: the parser accepted it"));
        assert!(!err.is_empty(), "{name}");
    }
}

#[test]
fn a_simulated_run_of_a_valid_fixture_measures_dlwa() {
    // The smallest valid fixture, run briefly: the plan is what the binary runs.
    let (_, text) = fixtures("valid-defaults").remove(0);
    let mut input = Input::parse(&text).unwrap();
    input.warmup_turns = 0.0;
    input.measure_turns = 0.25;
    let mut plan = input.plan().unwrap();
    let m = lachesis_device::sim::workload::measure(
        &mut plan.ssd,
        &mut plan.mix,
        0,
        plan.measure_pages,
        |_| {},
    )
    .unwrap();
    assert!(m.dlwa >= 1.0, "DLWA {}", m.dlwa);
    assert_eq!(m.host_pages, plan.measure_pages);
}
