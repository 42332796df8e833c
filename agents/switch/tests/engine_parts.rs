//! The engines and their write streams (parts) as the stage contract says them once
//! (`api-schemas/bus/common.schema.json`: the `engine` enum's `x-parts`, the placement `part`
//! enum's `x-write-pattern`; the controller's `contracts/engine_parts.py` is generated from the
//! same file): every engine and part the contract names is one the agent decodes to itself,
//! and an engine has parts on flash exactly when the agent runs it on flash.

use std::fs;
use std::path::Path;

use lachesis_switch::{CacheEngine, EnginePart};
use serde_json::Value;

fn contract() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../api-schemas/bus/common.schema.json");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first object under `v` that has `key`.
fn find<'a>(v: &'a Value, key: &str) -> Option<&'a serde_json::Map<String, Value>> {
    match v {
        Value::Object(m) if m.contains_key(key) => Some(m),
        Value::Object(m) => m.values().find_map(|c| find(c, key)),
        Value::Array(a) => a.iter().find_map(|c| find(c, key)),
        _ => None,
    }
}

#[test]
fn every_engine_and_part_of_the_contract_is_the_agents() {
    let c = contract();
    let engine = find(&c, "x-parts").expect("the engine enum's x-parts");
    let part = find(&c, "x-write-pattern").expect("the part enum's x-write-pattern");
    let enum_of = |m: &serde_json::Map<String, Value>| -> Vec<String> {
        m["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let parts = engine["x-parts"].as_object().unwrap();
    assert_eq!(
        enum_of(engine)
            .iter()
            .collect::<std::collections::BTreeSet<_>>(),
        parts.keys().collect::<std::collections::BTreeSet<_>>(),
        "x-parts names every engine"
    );
    for (name, its_parts) in parts {
        let e: CacheEngine = serde_json::from_value(Value::String(name.clone()))
            .unwrap_or_else(|err| panic!("engine {name:?}: {err}"));
        assert_eq!(
            serde_json::to_value(e).unwrap(),
            Value::String(name.clone())
        );
        let its_parts = its_parts.as_array().unwrap();
        assert_eq!(
            e.on_flash(),
            !its_parts.is_empty(),
            "engine {name:?}: parts on flash iff on flash"
        );
        for p in its_parts {
            assert!(
                part["x-write-pattern"].get(p.as_str().unwrap()).is_some(),
                "{name}: part {p}"
            );
        }
    }
    for name in enum_of(part) {
        let p: EnginePart = serde_json::from_value(Value::String(name.clone()))
            .unwrap_or_else(|err| panic!("part {name:?}: {err}"));
        assert_eq!(
            serde_json::to_value(p).unwrap(),
            Value::String(name.clone())
        );
        let pattern = &part["x-write-pattern"][&name];
        assert!(
            pattern == "sequential" || pattern == "random",
            "part {name:?}: {pattern}"
        );
    }
}
