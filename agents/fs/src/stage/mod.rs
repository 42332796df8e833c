//! Waypoint stages: an IO passes through the route's stages in order before it reaches its
//! endpoint. Each stage sees the IO and a `next` backend standing for the rest of the route.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

pub mod cache;
pub mod logwriter;
pub mod mem_engine;
pub mod ratelimit;

/// The rest of a route, as a stage sees it. `file` is a stable file id (the backing inode).
pub trait Backend: Sync {
    /// Fills `buf` from `off`; returns fewer bytes only at end of file.
    fn read_at(&self, file: u64, buf: &mut [u8], off: u64) -> io::Result<usize>;
    fn write_at(&self, file: u64, data: &[u8], off: u64) -> io::Result<()>;
    /// Makes everything written so far durable.
    fn sync(&self, file: u64) -> io::Result<()>;
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
    /// dirty_expire write-back).
    fn flush_expired(
        &self,
        _file: u64,
        _max_age: std::time::Duration,
        _next: &dyn Backend,
    ) -> io::Result<()> {
        Ok(())
    }
    /// Another route wrote `[off, off+len)` of `file`: drop what this stage keeps of it.
    fn invalidate(&self, _file: u64, _off: u64, _len: u64) {}
    /// The file was truncated to `size`.
    fn truncate(&self, _file: u64, _size: u64) {}
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

/// A stage target of a rule: `KIND[:key=value,...]`, e.g. `cache:mode=write-back,capacity=64MiB`,
/// `ratelimit:bytes_per_sec=10MiB,burst=1MiB`, `log:dir=/var/lib/lachesis/log1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageSpec {
    pub kind: String,
    pub params: HashMap<String, String>,
}

impl StageSpec {
    pub fn parse(target: &str) -> Result<Self, String> {
        let (kind, rest) = target.split_once(':').unwrap_or((target, ""));
        let mut params = HashMap::new();
        for kv in rest.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("stage {target:?}: parameter {kv:?} is not key=value"))?;
            params.insert(k.to_string(), v.to_string());
        }
        Ok(StageSpec {
            kind: kind.to_string(),
            params,
        })
    }

    fn allow_only(&self, keys: &[&str]) -> Result<(), String> {
        for k in self.params.keys() {
            if !keys.contains(&k.as_str()) {
                return Err(format!(
                    "stage {}: unknown parameter {k:?} (known: {})",
                    self.kind,
                    keys.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// A size parameter like `64MiB`, `4KiB`, `1GiB` or plain bytes.
    pub fn size(&self, key: &str, default: u64) -> Result<u64, String> {
        match self.params.get(key) {
            None => Ok(default),
            Some(v) => parse_size(v).ok_or_else(|| {
                format!("stage {}: {key}={v:?} is not a size like 64MiB", self.kind)
            }),
        }
    }

    /// Builds the stage this spec describes.
    pub fn build(&self) -> Result<Arc<dyn Stage>, String> {
        match self.kind.as_str() {
            "ratelimit" => {
                self.allow_only(&["bytes_per_sec", "burst"])?;
                let rate = self.size("bytes_per_sec", 0)?;
                if rate == 0 {
                    return Err("stage ratelimit: bytes_per_sec must be set and above 0".into());
                }
                let burst = self.size("burst", rate.max(1 << 20))?;
                Ok(Arc::new(ratelimit::RateLimit::new(rate, burst)))
            }
            "log" => {
                self.allow_only(&["dir"])?;
                let dir = self
                    .params
                    .get("dir")
                    .ok_or("stage log: dir=PATH is required")?;
                Ok(Arc::new(
                    logwriter::LogWriter::open(std::path::Path::new(dir))
                        .map_err(|e| format!("stage log: {dir}: {e}"))?,
                ))
            }
            "cache" => {
                self.allow_only(&["mode", "capacity", "max_dirty", "engine", "device"])?;
                let mode: cache::Mode = self
                    .params
                    .get("mode")
                    .map(String::as_str)
                    .unwrap_or("write-through")
                    .parse()?;
                let capacity = self.size("capacity", 64 << 20)?;
                let max_dirty = self.size("max_dirty", 16 << 20)?;
                let engine: Box<dyn lachesis_cache::Engine> = match self
                    .params
                    .get("engine")
                    .map(String::as_str)
                    .unwrap_or("dram")
                {
                    "dram" => Box::new(mem_engine::MemEngine::new(capacity as usize)),
                    "flash" => {
                        let dev = self.params.get("device").ok_or(
                            "stage cache: engine=flash needs device=PATH (a file or block device)",
                        )?;
                        flash_engine(Path::new(dev), capacity)
                            .map_err(|e| format!("stage cache: device {dev}: {e}"))?
                    }
                    e => return Err(format!("stage cache: engine {e:?} is not dram or flash")),
                };
                Ok(Arc::new(cache::CacheStage::new(engine, mode, max_dirty)))
            }
            k => Err(format!(
                "unknown stage kind {k:?} (known: cache, ratelimit, log)"
            )),
        }
    }
}

/// The large-object log engine of `lachesis-cache` on a file or block device through the
/// io_uring device layer (O_DIRECT).
fn flash_engine(path: &Path, capacity: u64) -> Result<Box<dyn lachesis_cache::Engine>, String> {
    use lachesis_device::uring::{UringConfig, UringDevice};
    let dev = UringDevice::open(
        path,
        UringConfig {
            create_size: Some(capacity),
            // FUSE worker threads take turns on the engine (under its lock), so the ring must
            // not belong to the first thread that submits.
            single_issuer: false,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let span = lachesis_cache::Span {
        device: lachesis_cache::share(dev),
        offset: 0,
        len: capacity,
    };
    let mut cfg = lachesis_cache::LocConfig::new(span, lachesis_device::PlacementHandle(0));
    // At least eight regions, so eviction (a whole region at a time) keeps most of the cache.
    cfg.region_bytes = (capacity / 8 / 4096 * 4096).clamp(256 << 10, 16 << 20);
    Ok(Box::new(
        lachesis_cache::Loc::new(cfg).map_err(|e| e.to_string())?,
    ))
}

pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let mul: u64 = match unit {
        "" | "B" => 1,
        "KiB" | "K" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
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

    #[test]
    fn stage_specs_parse_and_refuse_bad_input() {
        let s = StageSpec::parse("cache:mode=write-back,capacity=8MiB").unwrap();
        assert_eq!(s.kind, "cache");
        assert_eq!(s.size("capacity", 0).unwrap(), 8 << 20);
        assert!(s.build().is_ok());
        for (t, why) in [
            ("cache:mode=sideways", "mode"),
            ("cache:capacity=lots", "not a size"),
            ("cache:colour=red", "unknown parameter"),
            ("ratelimit", "bytes_per_sec"),
            ("log", "dir=PATH"),
            ("teleport", "unknown stage kind"),
            ("cache:mode", "not key=value"),
            ("cache:engine=tape", "not dram or flash"),
            ("cache:engine=flash", "needs device=PATH"),
        ] {
            let e = StageSpec::parse(t)
                .and_then(|s| s.build().map(|_| ()))
                .unwrap_err();
            assert!(e.contains(why), "{t}: {e}");
        }
        assert_eq!(parse_size("4KiB"), Some(4096));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("1TiB"), None);
    }
}
