//! The server level of two-level caches (Moirai §5.3.5): cache stages in front of the store
//! of a forwarding server (`lachesis-fs serve`, or the agent's `--serve-listen`), each caching
//! the reads forwarded to files under its directories (the stage contract's `serves`).
//!
//! A request goes through the stage whose directory is the longest prefix of its path, or
//! straight to the store when none serves it. The stages are the FUSE switch's cache stages
//! ([`CacheStage`]), over the store seen as a [`Backend`] whose file ids are the paths'.
//! What reaches the store is counted, so a run shows the bytes the server level saved.
//!
//! The level caches the level-1 misses it sees (inclusive): level-1 evictions are not
//! demoted to it, so it holds what the hosts fetched last, some of which they still hold.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use lachesis_switch::{CacheConfig, WriteMode};
use serde::Serialize;

use super::server::Store;
use crate::stage::cache::CacheStage;
use crate::stage::{Backend, Devices, Stage, StageStats};

struct ServerStage {
    config: CacheConfig,
    stage: Arc<CacheStage>,
}

/// Counters of what reached the store under the stages (reads the server level missed, and
/// reads of paths no stage serves).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreCounters {
    pub reads: u64,
    pub bytes_read: u64,
}

/// A [`Store`] with server-level cache stages in front of it.
pub struct CachedStore {
    store: Arc<dyn Store>,
    devices: Devices,
    stages: RwLock<Vec<ServerStage>>,
    /// Path -> the file id the stages key its blocks by. A renamed or truncated-away path
    /// gets a new id, so blocks cached under the old one are never read again.
    ids: Mutex<HashMap<String, u64>>,
    next_id: AtomicU64,
    reads: AtomicU64,
    bytes_read: AtomicU64,
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
        }
    }

    fn store_read(&self, path: &str, off: u64, len: usize) -> io::Result<Vec<u8>> {
        let d = self.store.read(path, off, len)?;
        self.reads.fetch_add(1, Relaxed);
        self.bytes_read.fetch_add(d.len() as u64, Relaxed);
        Ok(d)
    }

    /// Replaces the stages with `configs` (each with `serves`): a stage whose size alone
    /// changed is resized in place and stays warm, any other change builds it anew. All or
    /// nothing: a stage that cannot be built or grown leaves the stages as they were.
    pub fn set_stages(&self, configs: &[CacheConfig]) -> Result<(), String> {
        let mut stages = self.stages.write().unwrap_or_else(|e| e.into_inner());
        let mut next = Vec::with_capacity(configs.len());
        let mut resizes = Vec::new();
        for c in configs {
            if c.serves.is_none() {
                return Err(format!("stage {:?}: not a server-level stage (no serves)", c.name));
            }
            if c.write_mode == WriteMode::Back {
                return Err(format!(
                    "stage {:?}: a server-level stage caches reads; write_mode back is not \
                     supported (the server acknowledges writes once its store has them)",
                    c.name
                ));
            }
            let old = stages.iter().find(|s| s.config.name == c.name);
            let stage = match old {
                Some(s) if s.config == *c => s.stage.clone(),
                Some(s) if s.config.same_but_size(c) => {
                    let reserved = s.stage.reserve(c.size_bytes).map_err(|e| {
                        format!("stage {:?}: growing to {} bytes: {e}", c.name, c.size_bytes)
                    })?;
                    resizes.push((s.stage.clone(), c.size_bytes, reserved));
                    s.stage.clone()
                }
                _ => Arc::new(CacheStage::from_config(c, &self.devices)?),
            };
            next.push(ServerStage {
                config: c.clone(),
                stage,
            });
        }
        for (stage, size, reserved) in resizes {
            stage.resize(size, reserved)?;
        }
        *stages = next;
        Ok(())
    }

    /// The stage serving `path`: the one with the longest matching directory.
    fn stage_of(&self, path: &str) -> Option<Arc<CacheStage>> {
        let stages = self.stages.read().unwrap_or_else(|e| e.into_inner());
        stages
            .iter()
            .flat_map(|s| {
                s.config.serves.iter().flatten().filter(|d| under(path, d)).map(move |d| (d.len(), s))
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, s)| s.stage.clone())
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
                ..s.stage.counters()
            })
            .collect()
    }

    /// What reached the store of reads.
    pub fn store_counters(&self) -> StoreCounters {
        StoreCounters {
            reads: self.reads.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
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
        let n = stage.read(self.id(path), &mut buf, off, &PathBackend { cs: self, path })?;
        buf.truncate(n);
        Ok(buf)
    }
    fn write(&self, path: &str, off: u64, data: &[u8]) -> io::Result<()> {
        match self.stage_of(path) {
            Some(stage) => stage.write(self.id(path), data, off, &PathBackend { cs: self, path }),
            None => self.store.write(path, off, data),
        }
    }
    fn sync(&self, path: &str) -> io::Result<()> {
        self.store.sync(path)
    }
    fn truncate(&self, path: &str, size: u64) -> io::Result<()> {
        if let Some(stage) = self.stage_of(path) {
            stage.truncate(self.id(path), size);
        }
        self.store.truncate(path, size)
    }
    fn size(&self, path: &str) -> io::Result<u64> {
        self.store.size(path)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        // Both names start afresh: what was cached under either is never read again.
        self.forget(from);
        self.forget(to);
        self.store.rename(from, to)
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
        }
    }

    fn store() -> (tempfile::TempDir, CachedStore) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("t/a")).unwrap();
        std::fs::write(d.path().join("t/a/f"), vec![7u8; 64 << 10]).unwrap();
        std::fs::write(d.path().join("other"), vec![9u8; 8192]).unwrap();
        let s = CachedStore::new(Arc::new(DirStore::new(d.path()).unwrap()), Devices::default());
        (d, s)
    }

    #[test]
    fn reads_under_a_served_directory_hit_the_second_time_and_spare_the_store() {
        let (_d, s) = store();
        s.set_stages(&[config("cache/a-l2", 1 << 20, &["t/a"])]).unwrap();
        assert_eq!(s.read("t/a/f", 0, 16384).unwrap(), vec![7u8; 16384]);
        assert_eq!(s.store_counters().bytes_read, 16384);
        assert_eq!(s.read("/t/a/f", 0, 16384).unwrap(), vec![7u8; 16384]);
        assert_eq!(s.store_counters().bytes_read, 16384, "the second read is the stage's");
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
        s.set_stages(&[config("cache/a-l2", 1 << 20, &["t"])]).unwrap();
        s.read("t/a/f", 0, 8192).unwrap();
        s.set_stages(&[config("cache/a-l2", 2 << 20, &["t"])]).unwrap();
        let st = &s.stage_stats()[0];
        assert_eq!((st.size_bytes, st.installed_bytes), (2 << 20, 2 << 20));
        s.read("t/a/f", 0, 8192).unwrap();
        assert_eq!(s.stage_stats()[0].hits, 2, "resized in place, still warm");
        let mut back = config("cache/b", 1 << 20, &["x"]);
        back.write_mode = WriteMode::Back;
        let e = s.set_stages(&[back]).unwrap_err();
        assert!(e.contains("cache/b") && e.contains("write_mode back"), "{e}");
        let mut flash = config("cache/c", 1 << 20, &["x"]);
        flash.engine = CacheEngine::Loc;
        let e = s.set_stages(&[flash]).unwrap_err();
        assert!(e.contains("cache/c"), "{e}");
        // Refused whole: the stage in force is still there and warm.
        assert_eq!(s.stage_stats().len(), 1);
        assert_eq!(s.stage_stats()[0].name, "cache/a-l2");
    }

    #[test]
    fn the_longest_directory_wins() {
        let (_d, s) = store();
        s.set_stages(&[config("cache/all", 1 << 20, &[""]), config("cache/a", 1 << 20, &["t/a"])])
            .unwrap();
        s.read("t/a/f", 0, 4096).unwrap();
        s.read("other", 0, 4096).unwrap();
        let by: HashMap<String, u64> =
            s.stage_stats().into_iter().map(|st| (st.name, st.misses)).collect();
        assert_eq!(by["cache/a"], 1);
        assert_eq!(by["cache/all"], 1);
        assert!(!under("t/ab/f", "t/a"));
    }
}
