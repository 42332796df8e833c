//! The stage contract against `api-schemas/fixtures/desired-state/`: the stages of every
//! `valid-*.json` deserialize and pass `check_stages`; those of every `invalid-stage-*.json`
//! are refused by one or the other, as the schema refuses them (the agent's bus contract
//! test checks the schema side of the same files).

use std::fs;
use std::path::{Path, PathBuf};

use lachesis_switch::{check_stages, host_path_error, StageConfig};
use serde_json::Value;

fn fixtures(prefix: &str) -> Vec<PathBuf> {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../api-schemas/fixtures/desired-state");
    let mut out: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with(prefix) && name.ends_with(".json")
        })
        .collect();
    out.sort();
    assert!(
        !out.is_empty(),
        "no {prefix}* fixtures in {}",
        dir.display()
    );
    out
}

fn stages_of(path: &Path) -> Option<Value> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    v.get("stages").cloned()
}

fn accept(stages: Value) -> Result<(), String> {
    let typed: Vec<StageConfig> = serde_json::from_value(stages).map_err(|e| e.to_string())?;
    check_stages(&typed)
}

#[test]
fn valid_fixtures_stages_are_accepted() {
    for path in fixtures("valid-") {
        if let Some(stages) = stages_of(&path) {
            accept(stages).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}

#[test]
fn invalid_stage_fixtures_are_refused() {
    for path in fixtures("invalid-stage-") {
        let stages = stages_of(&path).unwrap_or_else(|| panic!("{}: no stages", path.display()));
        assert!(accept(stages).is_err(), "{} was accepted", path.display());
    }
}

#[test]
fn host_paths_are_absolute_and_normal() {
    for good in ["/var/lib/lachesis/log", "/a", "/...", "/.hidden/x", "/a..b"] {
        assert_eq!(host_path_error(good), None, "{good}");
    }
    for bad in [
        "",
        "/",
        "relative/dir",
        "/a/../etc",
        "/a/./b",
        "/a//b",
        "/a/",
        "/a\0b",
        "/a\nb",
    ] {
        assert!(host_path_error(bad).is_some(), "{bad:?} was accepted");
    }
    assert!(host_path_error(&format!("/{}", "a".repeat(4096))).is_some());
}
