//! Helpers shared by the switch's integration tests.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use lachesis_fs::switch::FileCtx;

/// An open file of `backing` as the FUSE front end would hand it to the switch.
pub fn ctx(backing: &Path, tenant: Option<&str>, path: &str) -> FileCtx {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(backing.join(path.trim_start_matches('/')))
        .unwrap();
    let id = f.metadata().unwrap().ino();
    FileCtx::new(tenant.map(str::to_string), path.to_string(), id, f)
}

/// A switch with the rules (and stages) of a rules file's text, writing only under `roots`.
#[allow(dead_code)] // not every test binary builds switches this way
pub fn switch_of(
    state: &Path,
    rules: &str,
    roots: lachesis_fs::confine::Roots,
) -> Result<lachesis_fs::Switch, String> {
    switch_reaching(state, rules, roots, Default::default())
}

/// The same, its remote endpoints reached as `remote` says (a test's own timeout).
#[allow(dead_code)]
pub fn switch_reaching(
    state: &Path,
    rules: &str,
    roots: lachesis_fs::confine::Roots,
    remote: lachesis_fs::route::RemoteOptions,
) -> Result<lachesis_fs::Switch, String> {
    let f = lachesis_fs::config::parse(rules).unwrap();
    lachesis_fs::Switch::new(lachesis_fs::SwitchOptions {
        state_dir: state.to_path_buf(),
        rules: f.rules,
        stages: f.stages,
        devices: Default::default(),
        roots,
        remote,
    })
}
