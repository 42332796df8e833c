//! Files whose newest data a stage holds (write-back caches, logs): their routes are kept so
//! a stage that shrinks, goes or reclaims can write that data back, across restarts too.

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::{Arc, RwLockReadGuard};
use std::time::Duration;

use super::endpoints::End;
use super::{FileCtx, Switch};
use crate::route::{under, Route};
use crate::stage::{Chain, Stage};

impl Switch {
    /// Writes back to their routes the data `stage` holds of every file (no sync).
    pub(super) fn write_back_stage(&self, stage: &Arc<dyn Stage>) -> io::Result<()> {
        self.each_held_file(stage, |id, next| {
            stage.write_back_file(id, next).map(|_| false)
        })
    }

    /// Runs `f` on every file `stage` holds data of, with the rest of its route after the
    /// stage, until `f` says it is done (true). The first error is returned after the others
    /// ran.
    fn each_held_file(
        &self,
        stage: &Arc<dyn Stage>,
        mut f: impl FnMut(u64, &Chain) -> io::Result<bool>,
    ) -> io::Result<()> {
        self.recover_held(stage);
        // Before the list: a file is in `held` before it gets data in a stage, and is not
        // pruned while this is held.
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        let files = stage.dirty_files();
        let mut first_err = None;
        for id in files {
            let res = (|| {
                let ctx = held.get(&id).ok_or_else(|| {
                    io::Error::other(format!(
                        "file {id} has data in the stage but no known route"
                    ))
                })?;
                let (route, i) = self
                    .routes_of(ctx)
                    .into_iter()
                    .find_map(|r| {
                        let i = r.stages.iter().position(|s| Arc::ptr_eq(s, stage))?;
                        Some((r, i))
                    })
                    .ok_or_else(|| {
                        io::Error::other(format!("{}: no route runs through the stage", ctx.path))
                    })?;
                let end = End {
                    sw: self,
                    ctx,
                    route: &route,
                    read_from: 0,
                };
                f(
                    id,
                    &Chain {
                        stages: &route.stages[i + 1..],
                        end: &end,
                    },
                )
            })();
            match res {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// One round of the background reclaim: each stage with a reclaim rate copies back up to
    /// `elapsed` worth of its rate (files in id order), so reclaim is paced by the rate and
    /// not by the endpoint's speed alone. Not gated by quiesce, like sync.
    pub fn reclaim(&self, elapsed: Duration) -> io::Result<()> {
        let stages: Vec<Arc<dyn Stage>> = self
            .current()
            .stages
            .iter()
            .filter(|s| s.reclaim_rate().is_some())
            .cloned()
            .collect();
        if stages.is_empty() {
            return Ok(());
        }
        let mut first_err = None;
        for s in stages {
            let rate = s.reclaim_rate().unwrap_or(0);
            let mut budget = ((rate as f64) * elapsed.as_secs_f64()).max(1.0) as u64;
            let res = self.each_held_file(&s, |id, next| {
                budget -= s.reclaim_step(id, next, budget)?.min(budget);
                Ok(budget == 0)
            });
            if let Err(e) = res {
                first_err.get_or_insert(e);
            }
        }
        self.prune_held();
        first_err.map_or(Ok(()), Err)
    }

    /// Where the namespace's files live; with it, the data a stage holds from before a
    /// restart (a replayed log) is written back and reclaimed like the rest.
    pub fn set_backing_root(&self, root: &Path) {
        *self.backing_root.write().unwrap_or_else(|e| e.into_inner()) = Some(root.to_path_buf());
    }

    /// Puts in `held` the files `stage` holds data of that no write since the start put
    /// there (a log replayed after a restart): each path with a delegate through the stage
    /// is opened under the backing root and taken if it is one of them.
    pub(super) fn recover_held(&self, stage: &Arc<dyn Stage>) {
        let missing: HashSet<u64> = {
            let held = self.held.read().unwrap_or_else(|e| e.into_inner());
            stage
                .dirty_files()
                .into_iter()
                .filter(|id| !held.contains_key(id))
                .collect()
        };
        let root = self
            .backing_root
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(root) = root.filter(|_| !missing.is_empty()) else {
            return;
        };
        let through = |r: &Route| r.stages.iter().any(|s| Arc::ptr_eq(s, stage));
        for path in self.delegates.paths_through(through) {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(under(&root, &path));
            let Ok((file, id)) = file.and_then(|f| {
                let id = std::os::unix::fs::MetadataExt::ino(&f.metadata()?);
                Ok((f, id))
            }) else {
                continue;
            };
            if missing.contains(&id) {
                let ctx = FileCtx::new(None, path, id, file);
                self.held
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(id)
                    .or_insert(ctx);
            }
        }
    }

    /// `held`, shared, with `ctx` in it: taken by a write through a stage that holds data.
    pub(super) fn hold(&self, ctx: &FileCtx) -> RwLockReadGuard<'_, HashMap<u64, FileCtx>> {
        loop {
            let held = self.held.read().unwrap_or_else(|e| e.into_inner());
            if held.contains_key(&ctx.id) {
                return held;
            }
            drop(held);
            self.held
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .entry(ctx.id)
                .or_insert_with(|| ctx.clone());
        }
    }

    /// Forgets the files no stage has data of (`only`: just that one).
    pub(super) fn prune_held_of(&self, only: Option<u64>) {
        let stages = self.current().stages.clone();
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        let dirty: HashSet<u64> = stages.iter().flat_map(|s| s.dirty_files()).collect();
        held.retain(|id, _| dirty.contains(id) || only.is_some_and(|o| o != *id));
    }

    pub(super) fn prune_held(&self) {
        self.prune_held_of(None)
    }
}

/// The background reclaim of `switch` (see [`Switch::reclaim`]): a round every 100 ms until
/// the switch is dropped.
pub fn spawn_reclaimer(switch: &Arc<Switch>) {
    const TICK: Duration = Duration::from_millis(100);
    let weak = Arc::downgrade(switch);
    let spawned = std::thread::Builder::new()
        .name("lachesis-fs-reclaim".into())
        .spawn(move || {
            let mut last = std::time::Instant::now();
            loop {
                std::thread::sleep(TICK);
                let Some(sw) = weak.upgrade() else { return };
                let elapsed = last.elapsed();
                last = std::time::Instant::now();
                if let Err(e) = sw.reclaim(elapsed) {
                    tracing::warn!("reclaim: {e}");
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("no background reclaim: {e}");
    }
}
