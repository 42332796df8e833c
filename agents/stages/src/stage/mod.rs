//! Waypoint stages: an IO passes through the route's stages in order before it reaches its
//! endpoint. Each stage sees the IO and a `next` backend standing for the rest of the route.
//!
//! Stages are built from the stage contract ([`StageConfig`], desired-state `stages`):
//! [`build`] makes one instance per declared stage; rules name them by name.

#[cfg(test)]
use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use lachesis_switch::{CacheEngine, StageConfig};
use serde::{Deserialize, Serialize};

pub mod cache;
pub mod engines;
pub mod error;
pub mod logwriter;
pub mod mem_engine;
pub mod qos;
pub mod resizes;
pub mod space;

pub use error::StageError;
pub use space::Devices;

pub use crate::Clock;

/// A stage's counters for telemetry (cache statistics, Moirai's getCacheStats). Byte and
/// block counters are cumulative since the stage was built; `size_bytes` is the size asked
/// for, `installed_bytes` what its engine may use now (see `engines.rs` for the rounding).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageStats {
    pub name: String,
    /// `cache`, `ratelimit` or `log`.
    pub kind: String,
    pub owner: Option<String>,
    /// Cache stages: the engine.
    pub engine: Option<CacheEngine>,
    pub size_bytes: u64,
    pub installed_bytes: u64,
    /// Block reads served by the stage / sent on.
    pub hits: u64,
    pub misses: u64,
    /// Bytes of reads served by the stage / sent on.
    pub bytes_read_hit: u64,
    pub bytes_read_miss: u64,
    /// Bytes written through the stage.
    pub bytes_written: u64,
    /// Cache stages: bytes of objects the engine was asked to store, and bytes it wrote to
    /// its device (`EngineStats`; their ratio is the engine's ALWA).
    pub app_bytes_written: u64,
    pub flash_bytes_written: u64,
    pub evictions: u64,
    /// Bytes acknowledged and not yet written back (write-back caches).
    pub dirty_bytes: u64,
    /// Blocks written back.
    pub writebacks: u64,
    /// Log stages: bytes copied back to the rest of the route (reclaim).
    #[serde(default)]
    pub reclaimed_bytes: u64,
    /// Two-level caches with demotion: a level-1 stage's clean evictions queued for the
    /// server level; a server-level stage's demoted blocks taken.
    #[serde(default)]
    pub demoted_blocks: u64,
    /// A server-level stage's hits on blocks it holds because level 1 demoted them.
    #[serde(default)]
    pub demotion_hits: u64,
    /// Qos stages: what the IO scheduler dispatched of the stage's class.
    #[serde(default)]
    pub qos: Option<crate::qos::Counters>,
}

/// What [`Backend::read_lent`] returns: the bytes read, and the lease of a lent block.
pub type LentRead = io::Result<(usize, Option<crate::remote::demote::Lease>)>;

/// The rest of a route, as a stage sees it. `file` is a stable file id (the backing inode).
pub trait Backend: Sync {
    /// Fills `buf` from `off`; returns fewer bytes only at end of file.
    fn read_at(&self, file: u64, buf: &mut [u8], off: u64) -> io::Result<usize>;
    fn write_at(&self, file: u64, data: &[u8], off: u64) -> io::Result<()>;
    /// Makes everything written so far durable.
    fn sync(&self, file: u64) -> io::Result<()>;
    /// A read of one block by a level-1 cache that keeps it and demotes it on eviction: the
    /// bytes, and the lease when the rest of the route lent the block (a remote endpoint
    /// whose server level is exclusive, `remote/frame.rs`). By default a plain read.
    fn read_lent(&self, file: u64, buf: &mut [u8], off: u64) -> LentRead {
        self.read_at(file, buf, off).map(|n| (n, None))
    }
}

/// A user-level stage of the data path (rate limiter, log writer, cache).
pub trait Stage: Send + Sync {
    fn read(&self, file: u64, buf: &mut [u8], off: u64, next: &dyn Backend) -> io::Result<usize>;
    fn write(&self, file: u64, data: &[u8], off: u64, next: &dyn Backend) -> io::Result<()>;
    fn sync(&self, file: u64, next: &dyn Backend) -> io::Result<()> {
        next.sync(file)
    }
    /// Whether this stage can hold the newest bytes of a range that are not yet in `next`
    /// (then reads of written ranges must come back through it: a delegate is recorded).
    fn holds_data(&self) -> bool {
        false
    }
    /// Writes back to `next` what this stage has held of `file` for longer than `max_age`
    /// (the background flusher's call; nothing is made durable, as with the kernel's
    /// dirty_expire write-back). The age is measured on the stage's clock.
    fn flush_expired(
        &self,
        _file: u64,
        _max_age: std::time::Duration,
        _next: &dyn Backend,
    ) -> io::Result<()> {
        Ok(())
    }
    /// Writes back to `next` everything this stage holds of `file` that `next` does not
    /// have yet (no sync): before the stage shrinks or goes away.
    fn write_back_file(&self, _file: u64, _next: &dyn Backend) -> io::Result<()> {
        Ok(())
    }
    /// Whether the stage holds more unwritten data than its limit even after the writing
    /// file's went on: the switch then writes back every file's.
    fn over_dirty_limit(&self) -> bool {
        false
    }
    /// Files of which this stage holds bytes `next` does not have yet (that
    /// [`Stage::write_back_file`] can write back).
    fn dirty_files(&self) -> Vec<u64> {
        Vec::new()
    }
    /// The change that built this stage is being made: called by the reconciler after the
    /// change was checked and before any IO reaches the stage, so that what a stage changes
    /// outside itself (a qos stage's class in the shared scheduler) is not changed by a
    /// change that is then refused.
    fn put_in_force(&self) {}
    /// The stage was replaced or removed from the switch's stages: from now on it keeps no
    /// new data of its own (a write-back cache passes writes on), so one last write-back
    /// empties it.
    fn retire(&self) {}
    /// Log stages: copy what the stage holds back to the route at this rate (None: hold it).
    fn set_reclaim(&self, _bytes_per_s: Option<u64>) {}
    /// The reclaim rate in force, if any (the switch's reclaimer serves these stages).
    fn reclaim_rate(&self) -> Option<u64> {
        None
    }
    /// Copies up to `limit` bytes the stage holds of `file` back to `next`; the bytes copied.
    fn reclaim_step(&self, _file: u64, _next: &dyn Backend, _limit: u64) -> io::Result<u64> {
        Ok(0)
    }
    /// Another route wrote `[off, off+len)` of `file`: drop what this stage keeps of it.
    fn invalidate(&self, _file: u64, _off: u64, _len: u64) {}
    /// The file was truncated to `size`.
    fn truncate(&self, _file: u64, _size: u64) {}
    /// The file's bytes may have changed by a way the stage did not see (fallocate, a copy
    /// into it, a passthrough open, a change while it was closed): drop every clean copy of
    /// it. Data not written back yet stays (the switch writes it back first).
    fn forget_clean(&self, _file: u64) {}
    /// Whether the stage keeps written bytes as their only copy even after a write-back (a
    /// log stage that does not write back): the backing file then lacks them, so a change
    /// made to the backing file alone cannot be honoured.
    fn keeps_data(&self) -> bool {
        false
    }
    /// Counters for telemetry; the switch fills in name and owner.
    fn counters(&self) -> StageStats;
    /// Counters for the stats file.
    fn stats(&self) -> serde_json::Value;
}

/// A route's stages in front of its endpoint, itself a [`Backend`].
pub struct Chain<'a> {
    pub stages: &'a [Arc<dyn Stage>],
    pub end: &'a dyn Backend,
}

impl Backend for Chain<'_> {
    fn read_at(&self, file: u64, buf: &mut [u8], off: u64) -> io::Result<usize> {
        match self.stages.split_first() {
            None => self.end.read_at(file, buf, off),
            Some((s, rest)) => s.read(
                file,
                buf,
                off,
                &Chain {
                    stages: rest,
                    end: self.end,
                },
            ),
        }
    }

    fn write_at(&self, file: u64, data: &[u8], off: u64) -> io::Result<()> {
        match self.stages.split_first() {
            None => self.end.write_at(file, data, off),
            Some((s, rest)) => s.write(
                file,
                data,
                off,
                &Chain {
                    stages: rest,
                    end: self.end,
                },
            ),
        }
    }

    /// Lent only by an endpoint right behind the caller (a stage between would see none of
    /// the blocks demoted past it).
    fn read_lent(&self, file: u64, buf: &mut [u8], off: u64) -> LentRead {
        match self.stages.is_empty() {
            true => self.end.read_lent(file, buf, off),
            false => self.read_at(file, buf, off).map(|n| (n, None)),
        }
    }

    fn sync(&self, file: u64) -> io::Result<()> {
        match self.stages.split_first() {
            None => self.end.sync(file),
            Some((s, rest)) => s.sync(
                file,
                &Chain {
                    stages: rest,
                    end: self.end,
                },
            ),
        }
    }
}

/// A stage built from its config: the instance routes use, and the cache stage behind it
/// (for resizes) when it is one.
pub struct Built {
    pub stage: Arc<dyn Stage>,
    pub cache: Option<Arc<cache::CacheStage>>,
}

/// What building a stage takes besides its config.
pub struct Resources<'a> {
    /// The flash devices cache engines take their space on.
    pub devices: &'a Devices,
    /// The data path's IO scheduler: a qos stage is one of its classes.
    pub scheduler: &'a Arc<crate::qos::Gate>,
    /// The connection to the agent at HOST:PORT, for a log stage on another agent.
    pub remote: &'a dyn Fn(&str) -> Arc<crate::remote::Client>,
}

/// Builds the stage `config` declares (the one place a stage kind is built): flash cache
/// engines take their space on the devices, a qos stage is a class of the scheduler, a log
/// with `remote` writes through the connection to that agent.
pub fn build(config: &StageConfig, with: &Resources<'_>) -> Result<Built, StageError> {
    let (stage, cache): (Arc<dyn Stage>, _) = match config {
        StageConfig::Cache(c) => {
            let s = Arc::new(cache::CacheStage::from_config(c, with.devices)?);
            (s.clone(), Some(s))
        }
        StageConfig::RateLimit(r) => (
            Arc::new(qos::QosStage::new(r, with.scheduler.clone())?),
            None,
        ),
        StageConfig::Log(l) => {
            let log = match l.remote.as_deref() {
                Some(addr) => {
                    let client = (with.remote)(addr.trim_start_matches("tcp://"));
                    logwriter::LogWriter::open_remote(client, &l.dir)
                        .map_err(|e| format!("log stage {:?}: {addr}{}: {e}", l.name, l.dir))?
                }
                None => logwriter::LogWriter::open(std::path::Path::new(&l.dir))
                    .map_err(|e| format!("log stage {:?}: {}: {e}", l.name, l.dir))?,
            };
            log.set_reclaim(l.reclaim_bytes_per_s);
            (Arc::new(log), None)
        }
    };
    Ok(Built { stage, cache })
}

/// A file-like backend over a `HashMap`, for the stage unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    pub struct MemFiles {
        pub files: Mutex<HashMap<u64, Vec<u8>>>,
        pub reads: std::sync::atomic::AtomicU64,
        pub writes: std::sync::atomic::AtomicU64,
        pub syncs: std::sync::atomic::AtomicU64,
    }

    impl Backend for MemFiles {
        fn read_at(&self, file: u64, buf: &mut [u8], off: u64) -> io::Result<usize> {
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let files = self.files.lock().unwrap();
            let f = files.get(&file).map(Vec::as_slice).unwrap_or(&[]);
            let off = off as usize;
            if off >= f.len() {
                return Ok(0);
            }
            let n = buf.len().min(f.len() - off);
            buf[..n].copy_from_slice(&f[off..off + n]);
            Ok(n)
        }
        fn write_at(&self, file: u64, data: &[u8], off: u64) -> io::Result<()> {
            self.writes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut files = self.files.lock().unwrap();
            let f = files.entry(file).or_default();
            let end = off as usize + data.len();
            if f.len() < end {
                f.resize(end, 0);
            }
            f[off as usize..end].copy_from_slice(data);
            Ok(())
        }
        fn sync(&self, _file: u64) -> io::Result<()> {
            self.syncs
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    }

    impl MemFiles {
        pub fn content(&self, file: u64) -> Vec<u8> {
            self.files
                .lock()
                .unwrap()
                .get(&file)
                .cloned()
                .unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_switch::{LogConfig, RateLimitConfig};

    /// The stages of the contract's fixture, as the controller ships them.
    pub(crate) fn fixture_stages() -> Vec<StageConfig> {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../api-schemas/fixtures/desired-state/valid-stages.json"
        ))
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        serde_json::from_value(v["stages"].clone()).unwrap()
    }

    /// Builds `config` on `devices`, with a scheduler of its own and no other agent.
    fn build_on(config: &StageConfig, devices: &Devices) -> Result<Built, StageError> {
        let scheduler = Arc::new(crate::qos::Gate::new(
            crate::qos::DEPTH,
            Arc::new(std::time::Instant::now),
        ));
        build(
            config,
            &Resources {
                devices,
                scheduler: &scheduler,
                remote: &|addr| unreachable!("no log on another agent here ({addr})"),
            },
        )
    }

    #[test]
    fn every_kind_builds_from_its_config() {
        let d = tempfile::tempdir().unwrap();
        let (dev, _) = space::testing::sparse(2 << 30);
        let devices = Devices::new(vec![("flash0".into(), dev)]).unwrap();
        let mut kinds = Vec::new();
        for mut s in fixture_stages() {
            if let StageConfig::Log(l) = &mut s {
                // The fixture's directory is the agent's; build it under a temp dir here.
                l.dir = d.path().join("log").display().to_string();
            }
            let b = build_on(&s, &devices).unwrap();
            assert_eq!(b.cache.is_some(), s.kind() == "cache");
            let c = b.stage.counters();
            assert_eq!(c.kind, s.kind());
            if let StageConfig::Cache(cc) = &s {
                assert_eq!(c.engine, Some(cc.engine));
                assert_eq!(
                    (c.size_bytes, c.installed_bytes),
                    (cc.size_bytes, cc.size_bytes)
                );
                assert_eq!(
                    b.stage.holds_data(),
                    cc.write_mode == lachesis_switch::WriteMode::Back
                );
            }
            kinds.push(s.kind());
        }
        assert_eq!(kinds, ["cache", "cache", "ratelimit", "log"]);
        // Without a device a flash cache is refused, naming the stage; a DRAM cache needs none.
        let StageConfig::Cache(mut c) = fixture_stages().remove(0) else {
            unreachable!()
        };
        let e = build_on(&StageConfig::Cache(c.clone()), &Devices::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cache/alpha") && e.contains("--device"), "{e}");
        c.engine = CacheEngine::Dram;
        assert!(build_on(&StageConfig::Cache(c), &Devices::default()).is_ok());
        let e = build_on(
            &StageConfig::Log(LogConfig::local("log/x", None, "/proc/lachesis-no/such")),
            &devices,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("log/x"), "{e}");
        let r = build_on(
            &StageConfig::RateLimit(RateLimitConfig {
                name: "qos/x".into(),
                owner: None,
                iops: None,
                bytes_per_s: Some(1 << 20),
                min_bytes_per_s: None,
                priority: None,
            }),
            &devices,
        )
        .unwrap();
        assert_eq!(r.stage.stats()["bytes_per_sec"], 1 << 20);
    }
}
