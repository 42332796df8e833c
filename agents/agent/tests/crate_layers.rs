//! The workspace's layering, as a test (like the controller's `tests/test_layers.py`): the
//! crates' dependencies on each other are what `agents/README.md`'s table says, no front end
//! of the data path depends on another (the FUSE switch `lachesis-fs` and the memcached front
//! end `lachesis-kv` share the stages through `lachesis-stages`), and only the crates that
//! assemble front ends (the agent, the fuzz targets) depend on them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

const FRONT_ENDS: [&str; 2] = ["lachesis-fs", "lachesis-kv"];
const ASSEMBLERS: [&str; 2] = ["lachesis-agent", "lachesis-fuzz"];

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Crate -> the workspace crates it depends on (normal dependencies; not dev or build).
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|n| names.contains(n))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn no_front_end_depends_on_another_and_only_assemblers_depend_on_them() {
    for (name, deps) in dependencies() {
        for fe in FRONT_ENDS {
            if deps.contains(fe) {
                assert!(
                    ASSEMBLERS.contains(&name.as_str()),
                    "{name} depends on the front end {fe}: what it needs of it belongs in a crate \
                     below both (lachesis-stages)"
                );
            }
        }
    }
}

#[test]
fn the_readme_table_says_what_each_crate_depends_on() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let mut table = BTreeMap::new();
    for line in readme.lines().filter(|l| l.starts_with("| `lachesis-")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_string();
        let deps: BTreeSet<String> = cells[3]
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty() && *d != "–")
            .map(|d| format!("lachesis-{d}"))
            .collect();
        table.insert(name, deps);
    }
    let actual = dependencies();
    assert_eq!(
        table.keys().collect::<Vec<_>>(),
        actual.keys().collect::<Vec<_>>(),
        "agents/README.md lists every crate of the workspace"
    );
    for (name, deps) in &actual {
        assert_eq!(
            &table[name], deps,
            "{name}'s dependencies in agents/README.md"
        );
    }
}
