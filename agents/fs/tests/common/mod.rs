//! Helpers shared by the switch's integration tests.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

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
    FileCtx {
        tenant: tenant.map(str::to_string),
        path: path.to_string(),
        id: f.metadata().unwrap().ino(),
        backing: Arc::new(f),
    }
}
