//! The server level of two-level caches (Moirai §5.3.5): cache stages in front of the store
//! of a forwarding server (`lachesis-fs serve`, or the agent's `--serve-listen`), each caching
//! the reads forwarded to files under its directories (the stage contract's `serves`).
//!
//! A request goes through the stage whose directory is the longest prefix of its path, or
//! straight to the store when none serves it. The stages are the FUSE switch's cache stages
//! ([`CacheStage`]), over the store seen as a [`Backend`] whose file ids are the paths'.
//! What reaches the store is counted, so a run shows the bytes the server level saved.
//!
//! A stage caches the level-1 misses it sees (inclusive), so it holds what the hosts fetched
//! last, some of which they still hold. An `exclusive` stage is Moirai's global LRU instead:
//! a read from a level 1 that demotes (`frame::READ_LEND`) takes the block out on a hit and
//! fills nothing on a miss, and lends it (a token); when level 1 evicts the block clean it
//! comes back (`Op::Demote`) and is taken while the lend stands. A write, truncate or rename
//! of the file ends its lends, under the same per-file lock a demotion is taken under, so a
//! demotion never puts back bytes older than the store's.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use lachesis_switch::{CacheConfig, StageChange, WriteMode};
use serde::Serialize;

use super::server::Store;
use crate::stage::cache::{CacheStage, BLOCK};
use crate::stage::resizes::{resize_all, Resize};
use crate::stage::{Backend, Devices, Stage, StageError, StageStats};

struct ServerStage {
    config: CacheConfig,
    stage: Arc<CacheStage>,
    demotion: Arc<DemotionCounters>,
}

/// An exclusive stage's demotion counters (kept across resizes, like the stage's).
#[derive(Default)]
struct DemotionCounters {
    /// Demoted blocks taken.
    taken: AtomicU64,
    /// Hits on blocks held since a demotion.
    hits: AtomicU64,
}

/// Most lends (and demoted-block marks) remembered: 4 GiB of level-1 blocks. An older lend
/// forgotten makes its demotion refused, nothing worse.
const LENDS: usize = 1 << 20;

/// Remembers `k`, forgetting the least recently used beyond [`LENDS`] (the maps grow with
/// use; an `LruCache` of that capacity would allocate all of it up front, in every agent).
fn remember<V>(c: &mut lru::LruCache<(u64, u64), V>, k: (u64, u64), v: V) {
    c.put(k, v);
    if c.len() > LENDS {
        c.pop_lru();
    }
}

/// The lends in force and each file's write count (a lend granted across a write is not).
struct Lends {
    /// (file id, block) -> token.
    tokens: lru::LruCache<(u64, u64), u64>,
    /// (file id, block) of blocks held because they were demoted (for `demotion_hits`).
    demoted: lru::LruCache<(u64, u64), ()>,
    writes: HashMap<u64, u64>,
    next_token: u64,
}

/// Counters of what reached the store under the stages (reads the server level missed, and
/// reads of paths no stage serves).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreCounters {
    pub reads: u64,
    pub bytes_read: u64,
    /// Demotions not taken: the lend no longer stood (written since), or no exclusive
    /// stage serves the path.
    pub demotions_refused: u64,
}

/// A [`Store`] with server-level cache stages in front of it.
pub struct CachedStore {
    store: Arc<dyn Store>,
    devices: Devices,
    stages: RwLock<Vec<Arc<ServerStage>>>,
    /// Path -> the file id the stages key its blocks by. A renamed or truncated-away path
    /// gets a new id, so blocks cached under the old one are never read again.
    ids: Mutex<HashMap<String, u64>>,
    next_id: AtomicU64,
    reads: AtomicU64,
    bytes_read: AtomicU64,
    refused: AtomicU64,
    lends: Mutex<Lends>,
    /// Per-file (by id) locks a write and a demotion of the file take in turn.
    file_locks: Vec<Mutex<()>>,
}

/// The store as a stage's `next`, for one path.
struct PathBackend<'a> {
    cs: &'a CachedStore,
    path: &'a str,
}

impl Backend for PathBackend<'_> {
    fn read_at(&self, _file: u64, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let d = self.cs.store_read(self.path, off, buf.len())?;
        buf[..d.len()].copy_from_slice(&d);
        Ok(d.len())
    }
    fn write_at(&self, _file: u64, data: &[u8], off: u64) -> io::Result<()> {
        self.cs.store.write(self.path, off, data)
    }
    fn sync(&self, _file: u64) -> io::Result<()> {
        self.cs.store.sync(self.path)
    }
}

/// Whether `path` (relative, as requests name it) lies under `dir` ("" is everything).
fn under(path: &str, dir: &str) -> bool {
    let p = path.trim_start_matches('/');
    dir.is_empty() || p == dir || p.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

impl CachedStore {
    /// `store` with no stage yet; flash engines take their space on `devices`.
    pub fn new(store: Arc<dyn Store>, devices: Devices) -> Self {
        CachedStore {
            store,
            devices,
            stages: RwLock::new(Vec::new()),
            ids: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            reads: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            lends: Mutex::new(Lends {
                tokens: lru::LruCache::unbounded(),
                demoted: lru::LruCache::unbounded(),
                writes: HashMap::new(),
                next_token: 1,
            }),
            file_locks: (0..64).map(|_| Mutex::new(())).collect(),
        }
    }

    fn lends(&self) -> std::sync::MutexGuard<'_, Lends> {
        self.lends.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn file_lock(&self, id: u64) -> std::sync::MutexGuard<'_, ()> {
        self.file_locks[(id % self.file_locks.len() as u64) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the lends of the file's blocks in `[off, off + len)` (all of them: `None`) and
    /// counts a write, so a lend read across it is not granted. Called once the change is
    /// in the store and the stage, under the file's lock (a demotion waits for it).
    fn end_lends(&self, id: u64, range: Option<(u64, u64)>) {
        let mut l = self.lends();
        *l.writes.entry(id).or_insert(0) += 1;
        let doomed: Vec<(u64, u64)> = match range {
            Some((off, len)) => (off / BLOCK..(off + len).div_ceil(BLOCK))
                .map(|b| (id, b))
                .collect(),
            None => l
                .tokens
                .iter()
                .map(|(k, _)| *k)
                .filter(|k| k.0 == id)
                .collect(),
        };
        for k in doomed {
            l.tokens.pop(&k);
            l.demoted.pop(&k);
        }
    }

    /// An exclusive read of one whole block: the stage's copy taken out on a hit, the
    /// store's (nothing filled) on a miss; lent when whole and no write of the file came
    /// between the start of the read and the grant.
    fn lend_block(&self, s: &ServerStage, path: &str, off: u64) -> io::Result<(Vec<u8>, u64)> {
        let (id, b) = (self.id(path), off / BLOCK);
        let writes = self.lends().writes.get(&id).copied();
        let data = match s.stage.take_block(id, b, BLOCK)? {
            Some(d) => {
                if self.lends().demoted.pop(&(id, b)).is_some() {
                    s.demotion.hits.fetch_add(1, Relaxed);
                }
                d
            }
            None => {
                let d = self.store_read(path, off, BLOCK as usize)?;
                s.stage.count_miss(d.len() as u64);
                d
            }
        };
        if data.len() != BLOCK as usize {
            return Ok((data, 0));
        }
        let mut l = self.lends();
        if l.writes.get(&id).copied() != writes {
            return Ok((data, 0));
        }
        let token = l.next_token;
        l.next_token += 1;
        remember(&mut l.tokens, (id, b), token);
        Ok((data, token))
    }

    fn store_read(&self, path: &str, off: u64, len: usize) -> io::Result<Vec<u8>> {
        let d = self.store.read(path, off, len)?;
        self.reads.fetch_add(1, Relaxed);
        self.bytes_read.fetch_add(d.len() as u64, Relaxed);
        Ok(d)
    }

    /// Replaces the stages with `configs` (each with `serves`): a stage whose size alone
    /// changed is resized in place and stays warm, any other change builds it anew. Stages
    /// that shrink do first, so the space they free is there for those that grow and those
    /// built anew (an allocation moving space from one tenant's server level to another's is
    /// one change). All or nothing: a stage that cannot be built or grown leaves the stages
    /// as they were (those already resized go back to their sizes, cold where they shrank).
    pub fn set_stages(&self, configs: &[CacheConfig]) -> Result<(), StageError> {
        let mut stages = self.stages.write().unwrap_or_else(|e| e.into_inner());
        for c in configs {
            if c.serves.is_none() {
                return Err(
                    format!("stage {:?}: not a server-level stage (no serves)", c.name).into(),
                );
            }
            if c.write_mode == WriteMode::Back {
                return Err(format!(
                    "stage {:?}: a server-level stage caches reads; write_mode back is not \
                     supported (the server acknowledges writes once its store has them)",
                    c.name
                )
                .into());
            }
        }
        let old_of = |c: &CacheConfig| stages.iter().find(|s| s.config.name == c.name).cloned();
        let resizes = configs
            .iter()
            .filter_map(|c| {
                let s = old_of(c)?;
                match s.config.change_to(c) {
                    StageChange::Resize { from, to } => Some(Resize {
                        stage: s.stage.clone(),
                        from,
                        to,
                    }),
                    _ => None,
                }
            })
            .collect();
        let resized = resize_all(resizes, |stage: &Arc<CacheStage>, to| {
            stage.reserve(to).and_then(|r| stage.resize(to, r))
        })?;
        let mut next = Vec::with_capacity(configs.len());
        for c in configs {
            let old = old_of(c);
            let stage = match &old {
                Some(s)
                    if matches!(
                        s.config.change_to(c),
                        StageChange::Keep | StageChange::Resize { .. }
                    ) =>
                {
                    s.stage.clone()
                }
                _ => match CacheStage::from_config(c, &self.devices) {
                    Ok(s) => Arc::new(s),
                    Err(e) => {
                        resized.undo();
                        return Err(e);
                    }
                },
            };
            let demotion = match &old {
                Some(s) if Arc::ptr_eq(&s.stage, &stage) => s.demotion.clone(),
                _ => Arc::default(),
            };
            next.push(Arc::new(ServerStage {
                config: c.clone(),
                stage,
                demotion,
            }));
        }
        *stages = next;
        Ok(())
    }

    /// The stage serving `path`: the one with the longest matching directory.
    fn stage_of(&self, path: &str) -> Option<Arc<CacheStage>> {
        self.server_stage_of(path).map(|s| s.stage.clone())
    }

    fn server_stage_of(&self, path: &str) -> Option<Arc<ServerStage>> {
        let stages = self.stages.read().unwrap_or_else(|e| e.into_inner());
        stages
            .iter()
            .flat_map(|s| {
                s.config
                    .serves
                    .iter()
                    .flatten()
                    .filter(|d| under(path, d))
                    .map(move |d| (d.len(), s))
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, s)| s.clone())
    }

    fn id(&self, path: &str) -> u64 {
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        *ids.entry(path.trim_start_matches('/').to_string())
            .or_insert_with(|| self.next_id.fetch_add(1, Relaxed))
    }

    fn forget(&self, path: &str) {
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        ids.remove(path.trim_start_matches('/'));
    }

    /// Every stage's counters, named and owned as configured.
    pub fn stage_stats(&self) -> Vec<StageStats> {
        let stages = self.stages.read().unwrap_or_else(|e| e.into_inner());
        stages
            .iter()
            .map(|s| StageStats {
                name: s.config.name.clone(),
                owner: s.config.owner.clone(),
                demoted_blocks: s.demotion.taken.load(Relaxed),
                demotion_hits: s.demotion.hits.load(Relaxed),
                ..s.stage.counters()
            })
            .collect()
    }

    /// What reached the store of reads.
    pub fn store_counters(&self) -> StoreCounters {
        StoreCounters {
            reads: self.reads.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            demotions_refused: self.refused.load(Relaxed),
        }
    }

    /// The stats file's form: the store's counters and every stage's.
    pub fn stats(&self) -> serde_json::Value {
        let stages = self.stages.read().unwrap_or_else(|e| e.into_inner());
        let by_name: serde_json::Map<String, serde_json::Value> = stages
            .iter()
            .map(|s| {
                let mut v = s.stage.stats();
                v["name"] = s.config.name.clone().into();
                v["owner"] = s.config.owner.clone().into();
                v["serves"] = s.config.serves.clone().into();
                v["exclusive"] = s.config.exclusive.into();
                v["demoted_blocks"] = s.demotion.taken.load(Relaxed).into();
                v["demotion_hits"] = s.demotion.hits.load(Relaxed).into();
                (s.config.name.clone(), v)
            })
            .collect();
        serde_json::json!({"store": self.store_counters(), "stages": by_name})
    }
}

impl Store for CachedStore {
    fn read(&self, path: &str, off: u64, len: usize) -> io::Result<Vec<u8>> {
        let Some(stage) = self.stage_of(path) else {
            return self.store_read(path, off, len);
        };
        let mut buf = vec![0u8; len];
        let n = stage.read(
            self.id(path),
            &mut buf,
            off,
            &PathBackend { cs: self, path },
        )?;
        buf.truncate(n);
        Ok(buf)
    }
    fn write(&self, path: &str, off: u64, data: &[u8]) -> io::Result<()> {
        let id = self.id(path);
        let _file = self.file_lock(id);
        let written = match self.stage_of(path) {
            Some(stage) => stage.write(id, data, off, &PathBackend { cs: self, path }),
            None => self.store.write(path, off, data),
        };
        // After the bytes changed (even in part, on an error): a lend granted before now
        // may stand for the old bytes.
        self.end_lends(id, Some((off, data.len() as u64)));
        written
    }
    fn sync(&self, path: &str) -> io::Result<()> {
        self.store.sync(path)
    }
    fn truncate(&self, path: &str, size: u64) -> io::Result<()> {
        let id = self.id(path);
        let _file = self.file_lock(id);
        if let Some(stage) = self.stage_of(path) {
            stage.truncate(id, size);
        }
        let truncated = self.store.truncate(path, size);
        self.end_lends(id, None);
        truncated
    }
    fn read_lent(&self, path: &str, off: u64, len: usize) -> io::Result<(Vec<u8>, u64)> {
        match self.server_stage_of(path) {
            Some(s) if s.config.exclusive && off.is_multiple_of(BLOCK) && len as u64 == BLOCK => {
                self.lend_block(&s, path, off)
            }
            _ => self.read(path, off, len).map(|d| (d, 0)),
        }
    }
    fn demote(&self, path: &str, off: u64, token: u64, data: &[u8]) -> io::Result<bool> {
        if !off.is_multiple_of(BLOCK) || data.len() as u64 != BLOCK {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let taken = self.take_demoted(path, off, token, data)?;
        if !taken {
            self.refused.fetch_add(1, Relaxed);
        }
        Ok(taken)
    }
    fn size(&self, path: &str) -> io::Result<u64> {
        self.store.size(path)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        // Both names start afresh: what was cached (or lent) under either is never read (or
        // taken back) again.
        self.forget(from);
        self.forget(to);
        self.store.rename(from, to)
    }
}

impl CachedStore {
    fn take_demoted(&self, path: &str, off: u64, token: u64, data: &[u8]) -> io::Result<bool> {
        let Some(s) = self.server_stage_of(path).filter(|s| s.config.exclusive) else {
            return Ok(false);
        };
        let (id, b) = (self.id(path), off / BLOCK);
        let _file = self.file_lock(id);
        {
            let mut l = self.lends();
            if l.tokens.peek(&(id, b)) != Some(&token) {
                return Ok(false);
            }
            l.tokens.pop(&(id, b));
        }
        if !s.stage.put_block(id, b, data)? {
            return Ok(false);
        }
        remember(&mut self.lends().demoted, (id, b), ());
        s.demotion.taken.fetch_add(1, Relaxed);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::server::DirStore;
    use super::*;
    use lachesis_switch::{CacheEngine, Eviction};

    fn config(name: &str, size: u64, serves: &[&str]) -> CacheConfig {
        CacheConfig {
            name: name.into(),
            owner: Some("a".into()),
            engine: CacheEngine::Dram,
            size_bytes: size,
            write_mode: WriteMode::Through,
            eviction: Eviction::Lru,
            max_dirty_bytes: 1 << 20,
            device: None,
            placement: vec![],
            next: None,
            serves: Some(serves.iter().map(|s| s.to_string()).collect()),
            exclusive: false,
        }
    }

    fn store() -> (tempfile::TempDir, CachedStore) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("t/a")).unwrap();
        std::fs::write(d.path().join("t/a/f"), vec![7u8; 64 << 10]).unwrap();
        std::fs::write(d.path().join("other"), vec![9u8; 8192]).unwrap();
        let s = CachedStore::new(
            Arc::new(DirStore::new(d.path()).unwrap()),
            Devices::default(),
        );
        (d, s)
    }

    #[test]
    fn reads_under_a_served_directory_hit_the_second_time_and_spare_the_store() {
        let (_d, s) = store();
        s.set_stages(&[config("cache/a-l2", 1 << 20, &["t/a"])])
            .unwrap();
        assert_eq!(s.read("t/a/f", 0, 16384).unwrap(), vec![7u8; 16384]);
        assert_eq!(s.store_counters().bytes_read, 16384);
        assert_eq!(s.read("/t/a/f", 0, 16384).unwrap(), vec![7u8; 16384]);
        assert_eq!(
            s.store_counters().bytes_read,
            16384,
            "the second read is the stage's"
        );
        let st = &s.stage_stats()[0];
        assert_eq!((st.name.as_str(), st.hits, st.misses), ("cache/a-l2", 4, 4));
        // A path no stage serves goes to the store every time.
        s.read("other", 0, 4096).unwrap();
        s.read("other", 0, 4096).unwrap();
        assert_eq!(s.store_counters().bytes_read, 16384 + 8192);
        // A write through the stage is read back from it, and the store has it.
        s.write("t/a/f", 0, &[1u8; 4096]).unwrap();
        assert_eq!(s.read("t/a/f", 0, 4096).unwrap(), vec![1u8; 4096]);
        assert_eq!(s.store_counters().bytes_read, 16384 + 8192);
        assert_eq!(s.store.read("t/a/f", 0, 4096).unwrap(), vec![1u8; 4096]);
        // A rename starts the names afresh: the renamed file is read from the store.
        s.rename("t/a/f", "t/a/g").unwrap();
        assert_eq!(s.read("t/a/g", 0, 4096).unwrap(), vec![1u8; 4096]);
        assert_eq!(s.store_counters().bytes_read, 16384 + 8192 + 4096);
    }

    #[test]
    fn stages_resize_in_place_and_refuse_what_they_cannot_run() {
        let (_d, s) = store();
        s.set_stages(&[config("cache/a-l2", 1 << 20, &["t"])])
            .unwrap();
        s.read("t/a/f", 0, 8192).unwrap();
        s.set_stages(&[config("cache/a-l2", 2 << 20, &["t"])])
            .unwrap();
        let st = &s.stage_stats()[0];
        assert_eq!((st.size_bytes, st.installed_bytes), (2 << 20, 2 << 20));
        s.read("t/a/f", 0, 8192).unwrap();
        assert_eq!(s.stage_stats()[0].hits, 2, "resized in place, still warm");
        let mut back = config("cache/b", 1 << 20, &["x"]);
        back.write_mode = WriteMode::Back;
        let e = s.set_stages(&[back]).unwrap_err().to_string();
        assert!(
            e.contains("cache/b") && e.contains("write_mode back"),
            "{e}"
        );
        let mut flash = config("cache/c", 1 << 20, &["x"]);
        flash.engine = CacheEngine::Loc;
        let e = s.set_stages(&[flash]).unwrap_err().to_string();
        assert!(e.contains("cache/c"), "{e}");
        // Refused whole: the stage in force is still there and warm.
        assert_eq!(s.stage_stats().len(), 1);
        assert_eq!(s.stage_stats()[0].name, "cache/a-l2");
    }

    #[test]
    fn space_moves_between_flash_stages_in_one_change_and_a_refused_change_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let (dev, _) = crate::stage::space::testing::sim(16);
        let devices = Devices::new(vec![("flash0".into(), dev)]).unwrap();
        let pool = devices.get(None).unwrap();
        let s = CachedStore::new(Arc::new(DirStore::new(d.path()).unwrap()), devices);
        let flash = |name: &str, mib: u64, dir: &str| {
            let mut c = config(name, mib << 20, &[dir]);
            c.engine = CacheEngine::Loc;
            c
        };
        let installed = |s: &CachedStore| {
            let mut v: Vec<(String, u64)> = s
                .stage_stats()
                .into_iter()
                .map(|st| (st.name, st.installed_bytes))
                .collect();
            v.sort();
            v
        };
        s.set_stages(&[flash("cache/a", 10, "a"), flash("cache/b", 4, "b")])
            .unwrap();
        assert!(
            pool.free_regions() < 6,
            "{} regions free",
            pool.free_regions()
        );
        // b takes what a gives up, in one change: a shrinks first.
        s.set_stages(&[flash("cache/a", 4, "a"), flash("cache/b", 10, "b")])
            .unwrap();
        assert_eq!(
            installed(&s),
            [("cache/a".into(), 4 << 20), ("cache/b".into(), 10 << 20)]
        );
        // More than the device holds: refused whole, a's shrink undone, both as they were.
        let free = pool.free_regions();
        let e = s
            .set_stages(&[flash("cache/a", 2, "a"), flash("cache/b", 64, "b")])
            .unwrap_err();
        assert!(e.is_device_full(), "{e}");
        assert_eq!(
            installed(&s),
            [("cache/a".into(), 4 << 20), ("cache/b".into(), 10 << 20)]
        );
        assert_eq!(pool.free_regions(), free);
        // A new stage the device cannot hold: refused whole as well.
        let e = s
            .set_stages(&[
                flash("cache/a", 2, "a"),
                flash("cache/b", 10, "b"),
                flash("cache/c", 32, "c"),
            ])
            .unwrap_err();
        assert!(
            e.is_device_full() && e.to_string().contains("cache/c"),
            "{e}"
        );
        assert_eq!(
            installed(&s),
            [("cache/a".into(), 4 << 20), ("cache/b".into(), 10 << 20)]
        );
        assert_eq!(pool.free_regions(), free);
    }

    #[test]
    fn an_exclusive_stage_lends_reads_and_takes_back_only_demotions_whose_lend_stands() {
        let (_d, s) = store();
        let mut c = config("cache/a-l2", 1 << 20, &["t/a"]);
        c.exclusive = true;
        s.set_stages(&[c]).unwrap();
        // A lend read misses, fills nothing and lends the block.
        let (d, t0) = s.read_lent("t/a/f", 0, 4096).unwrap();
        assert_eq!((d, t0 > 0), (vec![7u8; 4096], true));
        let (_, t1) = s.read_lent("t/a/f", 4096, 4096).unwrap();
        let st = &s.stage_stats()[0];
        assert_eq!(
            (st.hits, st.misses, s.store_counters().bytes_read),
            (0, 2, 8192)
        );
        // Level 1 evicts block 0 clean: taken; the next lend read hits it, takes it out and
        // counts a hit on a demoted block.
        assert!(s.demote("t/a/f", 0, t0, &[7u8; 4096]).unwrap());
        assert!(
            !s.demote("t/a/f", 0, t0, &[7u8; 4096]).unwrap(),
            "a lend is taken back once"
        );
        let (d, t2) = s.read_lent("t/a/f", 0, 4096).unwrap();
        assert_eq!((d, t2 > 0), (vec![7u8; 4096], true));
        let st = &s.stage_stats()[0];
        assert_eq!((st.hits, st.demoted_blocks, st.demotion_hits), (1, 1, 1));
        assert_eq!(
            s.store_counters().bytes_read,
            8192,
            "the hit spared the store"
        );
        let (_, t2b) = s.read_lent("t/a/f", 0, 4096).unwrap();
        assert_eq!(
            s.stage_stats()[0].misses,
            3,
            "taken out on the hit: the next read misses"
        );
        // A write of block 1 ends its lend: the old bytes level 1 demotes are refused.
        s.write("t/a/f", 4096 + 100, b"new").unwrap();
        assert!(!s.demote("t/a/f", 4096, t1, &[7u8; 4096]).unwrap());
        // A truncate ends every lend of the file, a rename every lend of both names.
        s.truncate("t/a/f", 64 << 10).unwrap();
        assert!(!s.demote("t/a/f", 0, t2b, &[7u8; 4096]).unwrap());
        let (_, t3) = s.read_lent("t/a/f", 8192, 4096).unwrap();
        s.rename("t/a/f", "t/a/g").unwrap();
        assert!(!s.demote("t/a/f", 8192, t3, &[7u8; 4096]).unwrap());
        assert_eq!(s.stage_stats()[0].demoted_blocks, 1);
        // A plain read (a level 1 that does not demote) fills as before; a short or
        // unaligned lend read is a plain read, not lent.
        s.read("t/a/g", 0, 4096).unwrap();
        assert_eq!(s.read_lent("t/a/g", 100, 4096).unwrap().1, 0);
        let (_, t4) = s.read_lent("t/a/g", 0, 4096).unwrap();
        assert!(t4 > 0);
        assert_eq!(
            s.stage_stats()[0].hits,
            3,
            "the plain read filled, the lend read took it"
        );
        // A demotion that is not one block is bad input; one to an inclusive stage or a path
        // no stage serves is not taken.
        let e = s.demote("t/a/g", 0, t4, &[7u8; 100]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert!(!s.demote("other", 0, 1, &[7u8; 4096]).unwrap());
        s.set_stages(&[config("cache/a-l2", 1 << 20, &["t/a"])])
            .unwrap();
        assert!(!s.demote("t/a/g", 0, t4, &[7u8; 4096]).unwrap());
        assert_eq!(
            s.read_lent("t/a/g", 0, 4096).unwrap().1,
            0,
            "inclusive: nothing lent"
        );
    }

    #[test]
    fn the_longest_directory_wins() {
        let (_d, s) = store();
        s.set_stages(&[
            config("cache/all", 1 << 20, &[""]),
            config("cache/a", 1 << 20, &["t/a"]),
        ])
        .unwrap();
        s.read("t/a/f", 0, 4096).unwrap();
        s.read("other", 0, 4096).unwrap();
        let by: HashMap<String, u64> = s
            .stage_stats()
            .into_iter()
            .map(|st| (st.name, st.misses))
            .collect();
        assert_eq!(by["cache/a"], 1);
        assert_eq!(by["cache/all"], 1);
        assert!(!under("t/ab/f", "t/a"));
    }
}
