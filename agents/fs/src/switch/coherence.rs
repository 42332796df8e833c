//! Coherence of the stages with every way a file changes besides the switch's own reads and
//! writes: fallocate, a truncate, a copy into it made on the backing file, an open the kernel
//! serves itself (passthrough), an unlink, and whatever happened while no switched handle had
//! the file open.
//!
//! Stages key a file's blocks by its identity (the backing inode number), so the names of a
//! file (hard links) share its cached blocks. Three rules keep them right:
//!
//! - **Changes made on the backing file** ([`Switch::alter`], [`Switch::truncate`]) run with
//!   every block lock taken (no user-space IO in flight), after every stage wrote back what it
//!   holds of the file, and every stage drops its clean copies after. A change of bytes on a
//!   file whose newest bytes live off the backing file (an endpoint, a local log) cannot be
//!   honoured there and fails with `EOPNOTSUPP`, changing nothing.
//! - **Close-to-open**: when the last switched handle of a file closes, its backing file's
//!   change stamp (ctime, mtime, size) is kept; the next switched open of a file whose stamp
//!   differs, or was never kept, drops its clean copies first (passthrough writes, other
//!   programs on the backing directory, a reused inode number after an unlink).
//! - **Passthrough opens** write back and drop what the stages hold of the file before the
//!   kernel does its IO without the switch.

use std::collections::HashMap;
use std::fs::{Metadata, OpenOptions};
use std::io;
use std::num::NonZeroUsize;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{FileCtx, Switch};
use crate::route::under;
use crate::stage::Stage;

/// How many closed files' stamps are kept; a file whose stamp was dropped starts cold at its
/// next open (a cost, never a wrong byte).
const STAMPS: usize = 1 << 16;

/// What a change made on the backing file does to its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Bytes stay what they were (fallocate's allocate and keep-size modes).
    Keeps,
    /// Bytes change or move (punch, zero, collapse, insert, a copy into the file).
    Bytes,
}

/// The backing file's change stamp: equal stamps mean no change the switch did not see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ctime: (i64, i64),
    mtime: (i64, i64),
    size: u64,
}

impl Stamp {
    fn of(m: &Metadata) -> Self {
        Stamp {
            ctime: (m.ctime(), m.ctime_nsec()),
            mtime: (m.mtime(), m.mtime_nsec()),
            size: m.size(),
        }
    }
}

/// Switched handles open per file, and the stamps of files no switched handle has open.
pub(super) struct Watch {
    open: Mutex<HashMap<u64, usize>>,
    stamps: Mutex<lru::LruCache<u64, Stamp>>,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            open: Mutex::new(HashMap::new()),
            stamps: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(STAMPS).expect("nonzero"),
            )),
        }
    }
}

impl Watch {
    fn open(&self) -> MutexGuard<'_, HashMap<u64, usize>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stamps(&self) -> MutexGuard<'_, lru::LruCache<u64, Stamp>> {
        self.stamps.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `EOPNOTSUPP`, what a file system answers for a mode it does not have; why, in the log.
fn unsupported(path: &str, why: &str) -> io::Error {
    tracing::info!(path, "refused with EOPNOTSUPP: {why}");
    io::Error::from_raw_os_error(libc::EOPNOTSUPP)
}

impl Switch {
    /// Runs `change` on the backing file of `path` (file id `id`) with no user-space IO in
    /// flight: the stages first write back what they hold of the file, then drop every clean
    /// copy of it once `change` ran (whether or not it succeeded). A change of bytes on a
    /// file whose newest bytes live off the backing file fails with `EOPNOTSUPP`.
    pub fn alter<T>(
        &self,
        path: &str,
        id: u64,
        kind: Change,
        change: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        self.recover_all_held();
        // `held` before the block locks, as a write takes them.
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        let _blocks = self.blocks.write(id, 0, u64::MAX);
        self.write_back_file(&held, id)?;
        if kind == Change::Bytes && self.lives_off_backing(path, id) {
            return Err(unsupported(
                path,
                "the file's newest bytes live off the backing file (an endpoint or a log stage)",
            ));
        }
        let out = change();
        self.forget_clean(id);
        out
    }

    /// The file at `path` is truncated to `size` by `cut` (on the backing file): the stages
    /// write back first (a block the new end falls in is in the backing file whole), then
    /// endpoints, stages and delegates drop what lies past `size`.
    pub fn truncate(
        &self,
        path: &str,
        id: u64,
        size: u64,
        cut: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        self.recover_all_held();
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        let _blocks = self.blocks.write(id, 0, u64::MAX);
        self.write_back_file(&held, id)?;
        drop(held);
        cut()?;
        self.truncated(path, id, size)
    }

    /// A switched handle of the file was opened (`m`: its backing file now). The first one
    /// since the file was last closed drops the stages' clean copies unless the file is
    /// unchanged since then.
    pub fn opened(&self, id: u64, m: &Metadata) {
        let mut open = self.watch.open();
        let n = open.entry(id).or_insert(0);
        if *n == 0 {
            let kept = self.watch.stamps().pop(&id);
            if kept != Some(Stamp::of(m)) {
                self.forget_clean(id);
            }
        }
        *n += 1;
    }

    /// A switched handle of the file was released (after [`Switch::closed`] wrote back what
    /// the stages held of it); `m`: the backing file now.
    pub fn released(&self, id: u64, m: io::Result<Metadata>) {
        let mut open = self.watch.open();
        let last = match open.get_mut(&id) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => {
                open.remove(&id);
                true
            }
        };
        if last {
            if let Ok(m) = m {
                self.watch.stamps().put(id, Stamp::of(&m));
            }
        }
    }

    /// Whether a switched handle of the file is open.
    pub fn is_open(&self, id: u64) -> bool {
        self.watch.open().contains_key(&id)
    }

    /// The file is about to be opened with kernel passthrough (IO the stages will not see):
    /// what they hold of it is written back and their copies dropped.
    pub fn opening_passthrough(&self, path: &str, id: u64) -> io::Result<()> {
        let c = self.current();
        let any = c.stages.iter().any(|s| s.dirty_files().contains(&id));
        drop(c);
        if any {
            self.alter(path, id, Change::Keeps, || Ok(()))
        } else {
            self.forget_clean(id);
            Ok(())
        }
    }

    /// The name `path` of file `id` was removed; `last`: it was the file's last name. The
    /// stages drop the file only once nobody can reach it: not while another name or an
    /// open switched handle can still read it.
    pub fn unlinked(&self, path: &str, id: u64, last: bool) -> io::Result<()> {
        if last && !self.is_open(id) {
            self.truncated(path, id, 0)?;
            self.held
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            self.watch.stamps().pop(&id);
        } else {
            // Delegates and endpoint copies go by name: the name's are gone.
            let c = self.current();
            for d in &c.endpoint_dirs {
                let p = crate::route::under(d, path);
                if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&p) {
                    f.set_len(0)?;
                }
            }
            self.delegates.truncate(path, 0)?;
        }
        self.forget_endpoint_files();
        for d in &self.current().endpoint_dirs {
            let _ = std::fs::remove_file(crate::route::under(d, path));
        }
        Ok(())
    }

    /// Whether a name of this file may be added (a hard link): not while its newest bytes
    /// live off the backing file, where endpoint copies and delegates go by name.
    pub fn can_link(&self, path: &str, id: u64) -> bool {
        !self.lives_off_backing(path, id)
    }

    /// Whether some of the file's newest bytes are not in its backing file even after every
    /// stage wrote back: a delegated range whose route ends at an endpoint or keeps data in a
    /// stage (a local log), or a stage that could not write back.
    fn lives_off_backing(&self, path: &str, id: u64) -> bool {
        let delegated = self
            .delegates
            .segments(path, 0, u64::MAX)
            .is_some_and(|segs| {
                segs.into_iter()
                    .filter_map(|s| s.2)
                    .any(|r| !r.endpoints.is_empty() || r.stages.iter().any(|s| s.keeps_data()))
            });
        delegated
            || self
                .current()
                .stages
                .iter()
                .any(|s| s.dirty_files().contains(&id))
    }

    /// Every stage drops its clean copies of the file.
    fn forget_clean(&self, id: u64) {
        for s in &self.current().stages {
            s.forget_clean(id);
        }
    }

    /// Files a replayed log holds go into `held` (a write-back needs their routes).
    fn recover_all_held(&self) {
        let stages: Vec<Arc<dyn Stage>> = self.current().stages.clone();
        for s in &stages {
            if s.holds_data() {
                self.recover_held(s);
            }
        }
    }

    /// Every stage of every route of the file writes back what it holds of it. Nothing to
    /// write back: no route is looked up.
    fn write_back_file(&self, held: &HashMap<u64, FileCtx>, id: u64) -> io::Result<()> {
        let c = self.current();
        if !c.stages.iter().any(|s| s.dirty_files().contains(&id)) {
            return Ok(());
        }
        drop(c);
        let ctx = held.get(&id).ok_or_else(|| {
            io::Error::other(format!("file {id} has data in a stage but no known route"))
        })?;
        self.each_stage_of_routes(ctx, |s, next| s.write_back_file(id, next))
    }
}

impl Switch {
    /// The file was truncated to `size` on the backing file system.
    pub fn truncated(&self, path: &str, id: u64, size: u64) -> io::Result<()> {
        let c = self.current();
        for s in &c.stages {
            s.truncate(id, size);
        }
        for d in &c.endpoint_dirs {
            let p = under(d, path);
            if let Ok(f) = OpenOptions::new().write(true).open(&p) {
                if f.metadata()?.len() > size {
                    f.set_len(size)?;
                }
            }
        }
        for r in &c.remotes {
            // Hygiene only: delegates past `size` are dropped below, so reads there no longer
            // go to the remote copy; an unreachable agent must not fail the truncate.
            let p = r.path_of(path);
            let res = r.client.getattr(&p).and_then(|s| {
                if s > size {
                    r.client.truncate(&p, size)
                } else {
                    Ok(())
                }
            });
            if let Err(e) = res {
                tracing::warn!("truncating {p} on {}: {e}", r.client.addr());
            }
        }
        self.delegates.truncate(path, size)
    }

    /// `from` was renamed to `to`; endpoint copies and delegates follow.
    pub fn renamed(&self, from: &str, to: &str) -> io::Result<()> {
        self.forget_endpoint_files();
        for ctx in self
            .held
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .values_mut()
        {
            if let Some(rest) = ctx.path.strip_prefix(from) {
                if rest.is_empty() || rest.starts_with('/') {
                    ctx.path = format!("{to}{rest}");
                }
            }
        }
        for d in &self.current().endpoint_dirs {
            let src = under(d, from);
            if src.exists() {
                let dst = under(d, to);
                if let Some(p) = dst.parent() {
                    std::fs::create_dir_all(p)?;
                }
                std::fs::rename(src, dst)?;
            }
        }
        // Delegates follow the name, so remote copies must too (or reads would miss them).
        for r in &self.current().remotes {
            r.client.rename(&r.path_of(from), &r.path_of(to))?;
        }
        self.delegates.rename(from, to)
    }
}
