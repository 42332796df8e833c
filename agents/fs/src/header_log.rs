//! `{what: header, to: {kind: file, target: F}}`: sRoute's "send the header to a file", an
//! audit/trace log of a flow. Each matching IO appends one JSON line to F.
//!
//! Lines are written with one `write` on an `O_APPEND` file under a per-file mutex (files are
//! shared by every rule naming them, see `route::StageRegistry`), so they never interleave.
//! No fsync per line: an audit line must not cost the IO it describes a disk flush; a crash
//! may lose the last lines, as it may lose unsynced data.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use lachesis_switch::Op;
use serde::Serialize;

pub struct HeaderLog {
    path: PathBuf,
    file: Mutex<File>,
    /// Lines appended and lines lost to a failed write (reported in the stats).
    pub appended: AtomicU64,
    pub failed: AtomicU64,
    /// Whether the last append failed: a broken log is reported once, not per IO.
    broken: AtomicBool,
}

#[derive(Serialize)]
struct Line<'a> {
    time: String,
    tenant: Option<&'a str>,
    op: Op,
    path: &'a str,
    offset: u64,
    length: u64,
    rule: &'a str,
}

impl HeaderLog {
    /// Opens (creating it if missing, 0600) the log file `target`, an absolute local path
    /// under `roots`; remote (`tcp://`) header targets are refused.
    pub fn open(target: &str, roots: &crate::confine::Roots) -> Result<HeaderLog, String> {
        if target.starts_with("tcp://") {
            return Err(format!(
                "header log {target:?}: sending headers to a remote file is not supported; use an absolute local path"
            ));
        }
        let path = Path::new(target);
        if !path.is_absolute() {
            return Err(format!(
                "header log {target:?}: expected an absolute local file path"
            ));
        }
        roots.check("header log", target)?;
        if let Some(dir) = path.parent() {
            if !dir.exists() {
                crate::private::create_dir(dir)
                    .map_err(|e| format!("header log {target:?}: {e}"))?;
            }
        }
        let file =
            crate::private::open_append(path).map_err(|e| format!("header log {target:?}: {e}"))?;
        Ok(HeaderLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            appended: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            broken: AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one IO's header. A failed append is logged (once until the log works again)
    /// and counted; the IO goes on: the log describes the flow, it does not carry its data.
    pub fn append(
        &self,
        rule: &str,
        tenant: Option<&str>,
        op: Op,
        path: &str,
        offset: u64,
        length: u64,
    ) {
        let time = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let line = Line {
            time,
            tenant,
            op,
            path,
            offset,
            length,
            rule,
        };
        let mut bytes = serde_json::to_vec(&line).expect("a header serialises");
        bytes.push(b'\n');
        let res = self
            .file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .write_all(&bytes);
        match res {
            Ok(()) => {
                self.appended.fetch_add(1, Ordering::Relaxed);
                self.broken.store(false, Ordering::Relaxed);
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if !self.broken.swap(true, Ordering::Relaxed) {
                    tracing::error!(log = %self.path.display(), rule, "header log append failed: {e}");
                }
            }
        }
    }
}
