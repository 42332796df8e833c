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

/// The modules of `lachesis-stages`, lowest first: a module may use modules of a lower
/// layer only, so none of its folders imports another that imports it back (the forwarding
/// server runs stages, stages use the remote client and the scheduler, not the other way).
const STAGES_LAYERS: [&[&str]; 4] = [
    &["private", "rangemap"],
    &["qos", "remote"],
    &["stage"],
    &["serve"],
];

/// The `crate::<module>` paths a source file names in code, outside its unit tests (`mod
/// tests`).
fn crate_paths(source: &str) -> BTreeSet<String> {
    let code: String = source
        .split("mod tests {")
        .next()
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end > 0 {
            out.insert(rest[..end].to_string());
        }
    }
    out
}

/// Every `.rs` file of module `name` under `src` (`name.rs`, or the folder `name/`).
fn module_files(src: &Path, name: &str) -> Vec<std::path::PathBuf> {
    let file = src.join(format!("{name}.rs"));
    if file.is_file() {
        return vec![file];
    }
    let mut out = Vec::new();
    let mut dirs = vec![src.join(name)];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn the_stages_crate_modules_import_only_lower_layers() {
    let src = workspace().join("stages/src");
    let layer_of = |m: &str| STAGES_LAYERS.iter().position(|l| l.contains(&m));
    for e in std::fs::read_dir(&src).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        let module = name.trim_end_matches(".rs");
        if module == "lib" {
            continue;
        }
        let layer = layer_of(module).unwrap_or_else(|| {
            panic!("stages/src/{name} is in no layer of STAGES_LAYERS: say where it belongs")
        });
        for file in module_files(&src, module) {
            let text = std::fs::read_to_string(&file).unwrap();
            for used in crate_paths(&text) {
                let Some(l) = layer_of(&used) else { continue };
                assert!(
                    used == module || l < layer,
                    "{} uses crate::{used}, which is not below {module} \
                     (layers, lowest first: {STAGES_LAYERS:?})",
                    file.display()
                );
            }
        }
    }
}
