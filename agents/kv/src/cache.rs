//! The caches a key's items live in: [`DramCache`] (memcached-like, a tenant with no cache
//! stage) and [`FlashCache`] (a cache stage: `lachesis_cache::Hybrid` with a DRAM front, a
//! small-object engine for objects under 2 KiB and the log for the rest, on regions of one of
//! the agent's devices, each part writing with the stage's placement handle for it). The
//! small-object engine is FairyWREN for the engines `fairywren` and `hybrid-fairywren`
//! (erase units of the device's reclaim unit), Kangaroo for the other flash engines.

use std::sync::{Mutex, MutexGuard, RwLock};

use lachesis_cache::dram::DramLru;
use lachesis_cache::fairywren::{FairyWren, FairyWrenConfig, MIN_EUS};
use lachesis_cache::hybrid::SmallFactory;
use lachesis_cache::kangaroo::{Kangaroo, KangarooConfig};
use lachesis_cache::{Engine, EngineStats, Hybrid, HybridConfig, LocConfig, RegionEviction, Span};
use lachesis_device::PlacementHandle;
use lachesis_stages::stage::space::{Devices, Space};
use lachesis_stages::stage::StageError;
use lachesis_switch::{CacheConfig, CacheEngine, EnginePart, Eviction};
use serde::Serialize;

/// Objects (key + value + headers) below this go to Kangaroo, the rest to the log (CacheLib's
/// default small-item threshold).
pub const SMALL_THRESHOLD: usize = 2048;
/// Fewest regions a flash cache installs: the log needs two, Kangaroo one.
const MIN_REGIONS: u32 = 3;

/// One part of an engine, for the stats: the engine's own counters and the DRAM its index
/// and buffers take now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PartStats {
    #[serde(flatten)]
    pub engine: EngineStats,
    pub dram_bytes: u64,
}

/// What a cache reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// `dram`, `hybrid` or `hybrid-fairywren`.
    pub engine: &'static str,
    pub total: EngineStats,
    /// Per engine part (`kangaroo` or `fairywren`, then `loc`); empty for DRAM.
    pub parts: Vec<(String, PartStats)>,
    pub flash_bytes: u64,
    pub dram_bytes: u64,
    /// The device the flash lives on.
    pub device: Option<String>,
}

/// A thread-safe key-value cache of raw values (the items' encoded form).
pub trait Cache: Send + Sync {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;
    fn set(&self, key: &[u8], value: &[u8]) -> Result<bool, String>;
    fn delete(&self, key: &[u8]) -> Result<bool, String>;
    fn stats(&self) -> CacheStats;
    /// Changes the size (bytes of flash, or of DRAM for a DRAM cache); a flash cache is
    /// rebuilt empty, as the file cache stages' hybrid is.
    fn resize(&self, bytes: u64) -> Result<(), StageError>;
    /// The flash cache inside, for warm restart.
    fn flash(&self) -> Option<&FlashCache> {
        None
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

const SHARDS: usize = 16;

/// LRU in DRAM, sharded by key; what it evicts is gone.
pub struct DramCache {
    shards: Vec<Mutex<DramLru>>,
    counters: Mutex<EngineStats>,
    bytes: Mutex<u64>,
}

impl DramCache {
    pub fn new(bytes: u64) -> DramCache {
        DramCache {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(DramLru::new(bytes as usize / SHARDS)))
                .collect(),
            counters: Mutex::new(EngineStats::default()),
            bytes: Mutex::new(bytes),
        }
    }

    fn shard(&self, key: &[u8]) -> &Mutex<DramLru> {
        &self.shards[(lachesis_cache::object::key_hash(key) >> 56) as usize % SHARDS]
    }
}

impl Cache for DramCache {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let v = locked(self.shard(key)).get(key);
        let mut c = locked(&self.counters);
        c.gets += 1;
        c.hits += u64::from(v.is_some());
        Ok(v)
    }

    fn set(&self, key: &[u8], value: &[u8]) -> Result<bool, String> {
        let out = locked(self.shard(key)).insert(key, value, false);
        let stored = !out.iter().any(|e| e.key == key);
        let mut c = locked(&self.counters);
        c.sets += 1;
        c.app_bytes_written += (key.len() + value.len()) as u64;
        c.evictions += out.iter().filter(|e| e.key != key).count() as u64;
        c.rejected_sets += u64::from(!stored);
        Ok(stored)
    }

    fn delete(&self, key: &[u8]) -> Result<bool, String> {
        let found = locked(self.shard(key)).remove(key).is_some();
        locked(&self.counters).deletes += 1;
        Ok(found)
    }

    fn stats(&self) -> CacheStats {
        let mut total = locked(&self.counters).clone();
        total.objects = self.shards.iter().map(|s| locked(s).len() as u64).sum();
        CacheStats {
            engine: "dram",
            total: total.clone(),
            parts: Vec::new(),
            flash_bytes: 0,
            dram_bytes: *locked(&self.bytes),
            device: None,
        }
    }

    fn resize(&self, bytes: u64) -> Result<(), StageError> {
        let mut evicted = 0;
        for s in &self.shards {
            evicted += locked(s).set_capacity(bytes as usize / SHARDS).len() as u64;
        }
        locked(&self.counters).evictions += evicted;
        *locked(&self.bytes) = bytes;
        Ok(())
    }
}

/// What a clean shutdown saves of a flash cache: the pool regions it held, in order, and
/// its engine's index.
pub type Saved = (Vec<u32>, Vec<u8>);

/// How a flash cache is laid out besides its stage's config.
#[derive(Clone, Debug)]
pub struct FlashLayout {
    /// The DRAM front's bytes; `None`: 1/32 of the flash, as the file stages' hybrid.
    pub dram_bytes: Option<u64>,
    /// Share of the flash for Kangaroo.
    pub small_fraction: f64,
}

impl Default for FlashLayout {
    fn default() -> Self {
        FlashLayout {
            dram_bytes: None,
            small_fraction: 0.5,
        }
    }
}

/// The engine in place and what it replaced.
struct Engines {
    /// `None`: below [`MIN_REGIONS`], nothing on flash (every read misses).
    hybrid: Option<Hybrid>,
    installed: u64,
    retired: EngineStats,
    retired_small: EngineStats,
    retired_loc: EngineStats,
    /// Saved for a warm restart: the cache serves nothing more and keeps its regions.
    saved: bool,
}

/// A cache stage of a KV tenant.
pub struct FlashCache {
    config: CacheConfig,
    layout: FlashLayout,
    engines: RwLock<Engines>,
    /// Always `Some` until dropped: then, after a [`FlashCache::save`], the regions are kept
    /// as they are (not trimmed back into the pool), for the next start to restore.
    space: Option<Space>,
}

impl Drop for FlashCache {
    fn drop(&mut self) {
        let e = self.engines.get_mut().unwrap_or_else(|p| p.into_inner());
        let saved = e.saved;
        // The engine goes before its regions.
        e.hybrid = None;
        if saved {
            std::mem::forget(self.space.take());
        }
    }
}

impl FlashCache {
    /// Builds the cache `config` asks for on `devices`, at `config.size_bytes`. With `warm`
    /// (the regions and index a clean shutdown saved), the cache comes back with its objects
    /// if it got the very same regions and the index restores; otherwise it starts empty.
    /// Returns whether it came back warm.
    pub fn build(
        config: &CacheConfig,
        devices: &Devices,
        layout: FlashLayout,
        warm: Option<Saved>,
    ) -> Result<(FlashCache, bool), StageError> {
        let what = |e: StageError| e.context(format!("cache stage {:?}", config.name));
        let pool = devices.get(config.device.as_deref()).map_err(what)?;
        for p in &config.placement {
            pool.geometry()
                .check_handle(PlacementHandle(p.handle))
                .map_err(|e| what(format!("placement {:?}: {e}", p.part).into()))?;
        }
        let fc = FlashCache {
            config: config.clone(),
            layout,
            engines: RwLock::new(Engines {
                hybrid: None,
                installed: 0,
                retired: EngineStats::default(),
                retired_small: EngineStats::default(),
                retired_loc: EngineStats::default(),
                saved: false,
            }),
            space: Some(Space::new(pool)),
        };
        let warm = fc.rebuild(config.size_bytes, warm).map_err(what)?;
        Ok((fc, warm))
    }

    /// The pool regions this cache holds, and its index (the DRAM front written to flash
    /// first), for a warm restart; `None` when nothing is on flash. From then on the cache
    /// serves nothing (a later write would make the index stale) and, dropped, leaves its
    /// regions as they are.
    pub fn save(&self) -> Result<Option<Saved>, String> {
        let mut e = self.engines.write().unwrap_or_else(|p| p.into_inner());
        let Some(h) = e.hybrid.take() else {
            return Ok(None);
        };
        let mut index = Vec::new();
        h.save(&mut index).map_err(|e| e.to_string())?;
        drop(h);
        e.saved = true;
        Ok(Some((self.space().region_numbers(), index)))
    }

    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    pub fn space(&self) -> &Space {
        self.space
            .as_ref()
            .expect("a cache has its space until dropped")
    }

    /// Whether the small-object engine is FairyWREN.
    fn fairywren(&self) -> bool {
        matches!(
            self.config.engine,
            CacheEngine::Fairywren | CacheEngine::HybridFairywren
        )
    }

    /// FairyWREN's erase unit: the device's reclaim unit, or the region where it has none.
    fn erase_unit(&self) -> u64 {
        let pool = self.space().pool();
        match pool.geometry().reclaim_unit_bytes {
            0 => pool.region_bytes(),
            ru => ru,
        }
    }

    fn regions_for(&self, bytes: u64) -> u32 {
        let rb = self.space().pool().region_bytes();
        let n = u32::try_from(bytes / rb).unwrap_or(u32::MAX);
        // FairyWREN's erase units and the log's two regions.
        let least = if self.fairywren() {
            u32::try_from((MIN_EUS * self.erase_unit()).div_ceil(rb)).unwrap_or(u32::MAX) + 2
        } else {
            MIN_REGIONS
        };
        if n < least {
            0
        } else {
            n
        }
    }

    /// Replaces the engine by an empty one of `bytes` (rounded down to whole regions), taking
    /// the regions it needs first so a full device changes nothing; or, with `warm` and the
    /// same regions, by the saved one. Returns whether it restored.
    fn rebuild(&self, bytes: u64, warm: Option<Saved>) -> Result<bool, StageError> {
        let n = self.regions_for(bytes);
        let have = self.space().regions();
        let reserved = if n > have {
            Some(self.space().pool().reserve(n - have)?)
        } else {
            None
        };
        let mut e = self.engines.write().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = e.hybrid.take() {
            let (small, loc) = old.engine_stats();
            e.retired += &EngineStats {
                objects: 0,
                ..old.stats()
            };
            e.retired_small += &EngineStats {
                objects: 0,
                ..small
            };
            e.retired_loc += &EngineStats { objects: 0, ..loc };
        }
        e.installed = 0;
        if let Some(r) = reserved {
            self.space().grow(r);
        }
        self.space().shrink_to(n);
        if n == 0 {
            return Ok(false);
        }
        let len = u64::from(n) * self.space().pool().region_bytes();
        let span = self.span(len);
        let restored = warm
            .filter(|(regions, _)| *regions == self.space().region_numbers())
            .and_then(|(_, index)| {
                Hybrid::restore(self.hybrid_config(span.clone(), len), &mut index.as_slice())
                    .map_err(|err| tracing::info!(stage = self.config.name, "cold start: {err}"))
                    .ok()
            });
        let warm = restored.is_some();
        e.hybrid = Some(match restored {
            Some(h) => h,
            None => {
                // Nothing of an earlier engine may parse as an object of this one.
                span.trim(0, len).map_err(|e| e.to_string())?;
                Hybrid::new(self.hybrid_config(span, len)).map_err(|e| e.to_string())?
            }
        });
        e.installed = len;
        Ok(warm)
    }

    fn span(&self, len: u64) -> Span {
        Span {
            device: self.space().device(),
            offset: 0,
            len,
        }
    }

    fn hybrid_config(&self, span: Span, len: u64) -> HybridConfig {
        let c = &self.config;
        let h = |p| PlacementHandle(c.handle(p));
        let mut loc = LocConfig::new(span.clone(), h(EnginePart::Loc));
        loc.region_bytes = self.space().pool().region_bytes();
        loc.eviction = match c.eviction {
            Eviction::Lru => RegionEviction::Lru,
            Eviction::Fifo => RegionEviction::Fifo,
        };
        let (small, small_fraction, small_align): (SmallFactory, f64, u64) = if self.fairywren() {
            let (fwlog, fwsets, fwcold) = (
                h(EnginePart::FwLog),
                h(EnginePart::FwSets),
                h(EnginePart::FwCold),
            );
            let eu = self.erase_unit();
            let factory: SmallFactory = Box::new(move |s: Span| {
                let mut fc = FairyWrenConfig::new(s, fwlog, fwsets, fwcold);
                fc.eu_bytes = eu;
                // The hybrid deallocated (or restores) the span: nothing to trim.
                Ok(Box::new(FairyWren::open(fc)?) as Box<dyn Engine>)
            });
            let units = (MIN_EUS as f64 + 0.5) * eu as f64 / len as f64;
            (factory, self.layout.small_fraction.max(units), eu)
        } else {
            let (klog, kset) = (h(EnginePart::KLog), h(EnginePart::KSet));
            let factory: SmallFactory = Box::new(move |s: Span| {
                let mut kc = KangarooConfig::new(s, klog, kset);
                kc.expected_object_bytes = 200;
                Ok(Box::new(Kangaroo::new(kc.fit_partitions())?) as Box<dyn Engine>)
            });
            (factory, self.layout.small_fraction, 0)
        };
        HybridConfig {
            span,
            flash_bytes: len,
            dram_bytes: self.layout.dram_bytes.unwrap_or(len / 32) as usize,
            small_fraction,
            small_align,
            small_threshold: SMALL_THRESHOLD,
            shards: 16,
            loc,
            small,
        }
    }

    /// Bytes of flash the engine uses now.
    pub fn installed(&self) -> u64 {
        self.engines
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .installed
    }

    /// Runs `f` on the hybrid (none when nothing is installed).
    pub fn with_hybrid<T>(&self, f: impl FnOnce(Option<&Hybrid>) -> T) -> T {
        let e = self.engines.read().unwrap_or_else(|p| p.into_inner());
        f(e.hybrid.as_ref())
    }
}

impl Cache for FlashCache {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.with_hybrid(|h| match h {
            Some(h) => h.get(key).map_err(|e| e.to_string()),
            None => Ok(None),
        })
    }

    fn set(&self, key: &[u8], value: &[u8]) -> Result<bool, String> {
        self.with_hybrid(|h| match h {
            Some(h) => h.set(key, value).map_err(|e| e.to_string()),
            None => Ok(false),
        })
    }

    fn delete(&self, key: &[u8]) -> Result<bool, String> {
        self.with_hybrid(|h| match h {
            Some(h) => h.delete(key).map_err(|e| e.to_string()),
            None => Ok(false),
        })
    }

    fn stats(&self) -> CacheStats {
        let e = self.engines.read().unwrap_or_else(|p| p.into_inner());
        let (mut total, mut small, mut loc) = (
            e.retired.clone(),
            e.retired_small.clone(),
            e.retired_loc.clone(),
        );
        let (mut dram, mut small_dram, mut loc_dram) = (0, 0, 0);
        if let Some(h) = &e.hybrid {
            total += &h.stats();
            let (s, l) = h.engine_stats();
            small += &s;
            loc += &l;
            dram = h.size().1 as u64;
            let (sd, ld) = h.engine_dram();
            (small_dram, loc_dram) = (sd as u64, ld as u64);
        }
        let (engine, small_name) = if self.fairywren() {
            ("hybrid-fairywren", "fairywren")
        } else {
            ("hybrid", "kangaroo")
        };
        CacheStats {
            engine,
            total: total.clone(),
            parts: vec![
                (
                    small_name.into(),
                    PartStats {
                        engine: small,
                        dram_bytes: small_dram,
                    },
                ),
                (
                    "loc".into(),
                    PartStats {
                        engine: loc,
                        dram_bytes: loc_dram,
                    },
                ),
            ],
            flash_bytes: e.installed,
            dram_bytes: dram,
            device: Some(self.space().pool().name().to_string()),
        }
    }

    fn resize(&self, bytes: u64) -> Result<(), StageError> {
        self.rebuild(bytes, None)
            .map(|_| ())
            .map_err(|e| e.context(format!("cache stage {:?}", self.config.name)))
    }

    fn flash(&self) -> Option<&FlashCache> {
        Some(self)
    }
}
