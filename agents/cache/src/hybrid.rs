//! The hybrid cache of one tenant partition: DRAM in front, small objects to a small-object
//! engine (set-associative or Kangaroo), the rest to the large-object log.
//!
//! Thread safety and a consistent view come from key-sharded locks: every operation on a key
//! holds its shard's lock from start to end, so operations on one key are serialised and a
//! reader sees the last completed set or delete. A set removes the key from both flash engines
//! before it returns, so an older value cannot resurface from flash when DRAM evicts the new
//! one. The flash engines have a lock each, taken inside a shard lock; `resize` takes the
//! layout lock exclusively and so waits for every operation in flight.
//!
//! Layout of the partition's span: the log grows from the start in whole regions, the
//! small-object engine sits at the end. `resize` moves the log's end; when the small engine's
//! share changes it is rebuilt empty on its new span (its hash-to-bucket map depends on the
//! size), which counts as evicting everything it held.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};

use crate::dev::Span;
use crate::dram::{DramLru, Evicted};
use crate::engine::{Engine, EngineStats, PartStats};
use crate::loc::{Loc, LocConfig};
use crate::object::{self, key_hash};
use crate::persist::{self, Enc, Kind, Shape};
use crate::{Error, Result};

/// Builds the small-object engine on a span (the hybrid rebuilds it when resized).
pub type SmallFactory = Box<dyn Fn(Span) -> Result<Box<dyn Engine>> + Send + Sync>;

/// Configuration of a [`Hybrid`].
pub struct HybridConfig {
    /// The partition's largest extent; `flash_bytes` is how much of it is used now.
    pub span: Span,
    pub flash_bytes: u64,
    pub dram_bytes: usize,
    /// Share of the flash for the small-object engine.
    pub small_fraction: f64,
    /// The small-object engine's span starts and ends on a multiple of this many bytes (0:
    /// 64 KiB): FairyWREN's erase unit, so that each of its units is one reclaim unit.
    pub small_align: u64,
    /// Objects (key + value) below this many bytes go to the small-object engine.
    pub small_threshold: usize,
    /// Lock shards (rounded up to a power of two).
    pub shards: usize,
    /// The log's settings; its span is replaced by the partition's.
    pub loc: LocConfig,
    pub small: SmallFactory,
}

struct Flash {
    small: Box<dyn Engine>,
    small_span: (u64, u64),
    /// Counters of small engines dropped by resizes, so totals stay cumulative.
    small_retired: EngineStats,
    loc: Loc,
}

struct Layout {
    flash_bytes: u64,
    dram_bytes: usize,
}

/// A tenant partition's cache: thread-safe get/set/delete with `&self`.
pub struct Hybrid {
    span: Span,
    small_fraction: f64,
    small_align: u64,
    small_threshold: usize,
    factory: SmallFactory,
    shards: Vec<Mutex<DramLru>>,
    flash: Mutex<Flash>,
    layout: RwLock<Layout>,
    gets: AtomicU64,
    hits: AtomicU64,
    sets: AtomicU64,
    deletes: AtomicU64,
    app_bytes: AtomicU64,
}

fn locked<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Hybrid {
    pub fn new(config: HybridConfig) -> Result<Hybrid> {
        let mut loc = Self::check(&config)?;
        let small_span = Self::small_span(
            &config.span,
            config.flash_bytes,
            config.small_fraction,
            config.small_align,
            loc.region_bytes(),
        );
        let loc_bytes = Self::loc_bytes(config.flash_bytes, small_span.1, loc.region_bytes());
        loc.resize(loc_bytes)?;
        let small = Self::build_small(&config.span, &config.small, small_span)?;
        let flash_bytes = config.flash_bytes;
        Ok(Self::assemble(config, flash_bytes, small, small_span, loc))
    }

    /// Checks a configuration; returns the log built over the whole span (to learn its region
    /// size), for the caller to shrink or restore.
    fn check(config: &HybridConfig) -> Result<Loc> {
        config.span.check("hybrid cache")?;
        if !(0.0..1.0).contains(&config.small_fraction) {
            return Err(Error::Config(format!(
                "hybrid cache: small_fraction {} must be in [0, 1)",
                config.small_fraction
            )));
        }
        if config.flash_bytes > config.span.len {
            return Err(Error::Config(format!(
                "hybrid cache: {} flash bytes exceed the partition's {}",
                config.flash_bytes, config.span.len
            )));
        }
        let mut loc_cfg = config.loc.clone();
        loc_cfg.span = config.span.clone();
        loc_cfg.regions = 0;
        Loc::new(loc_cfg)
    }

    fn assemble(
        config: HybridConfig,
        flash_bytes: u64,
        small: Box<dyn Engine>,
        small_span: (u64, u64),
        loc: Loc,
    ) -> Hybrid {
        let shards = config.shards.max(1).next_power_of_two();
        let per_shard = config.dram_bytes / shards;
        Hybrid {
            span: config.span,
            small_fraction: config.small_fraction,
            small_align: config.small_align,
            small_threshold: config.small_threshold,
            factory: config.small,
            shards: (0..shards)
                .map(|_| Mutex::new(DramLru::new(per_shard)))
                .collect(),
            flash: Mutex::new(Flash {
                small,
                small_span,
                small_retired: EngineStats::default(),
                loc,
            }),
            layout: RwLock::new(Layout {
                flash_bytes,
                dram_bytes: config.dram_bytes,
            }),
            gets: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            sets: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            app_bytes: AtomicU64::new(0),
        }
    }

    /// A partition built from `config` with the index [`Hybrid::save`] wrote (see
    /// `crate::persist`): the log and the small-object engine come back as saved, at the
    /// flash size they had, then are resized to `config.flash_bytes` if that differs (the
    /// allocation loop may have resized the partition before the shutdown). DRAM starts empty.
    pub fn restore(config: HybridConfig, r: &mut dyn Read) -> Result<Hybrid> {
        let mut loc = Self::check(&config)?;
        let region = loc.region_bytes();
        let shape = Self::shape(
            &config.span,
            config.small_fraction,
            config.small_align,
            config.small_threshold,
            region,
        );
        let body = persist::read(r, Kind::Hybrid, &shape)?;
        let mut d = persist::decode(Kind::Hybrid, &body);
        let flash_bytes = d.u64("flash bytes")?;
        let small_span = (d.u64("small engine offset")?, d.u64("small engine length")?);
        let small_blob = d.bytes("small-object engine")?;
        let loc_blob = d.bytes("log")?;
        if flash_bytes > config.span.len
            || small_span.1 == 0
            || small_span
                != Self::small_span(
                    &config.span,
                    flash_bytes,
                    config.small_fraction,
                    config.small_align,
                    region,
                )
        {
            return Err(d.bad(format!(
                "{flash_bytes} flash bytes with the small engine at {small_span:?}"
            )));
        }
        d.finish()?;
        Engine::load(&mut loc, &mut &loc_blob[..])?;
        if u64::from(loc.regions()) * region != Self::loc_bytes(flash_bytes, small_span.1, region) {
            return Err(Error::Persist(format!(
                "hybrid cache index refused: inconsistent saved state: the log has {} regions \
                 for {flash_bytes} flash bytes",
                loc.regions()
            )));
        }
        // Not `build_small`: its trim would throw the saved objects away.
        let mut small = (config.small)(Span {
            device: config.span.device.clone(),
            offset: config.span.offset + small_span.0,
            len: small_span.1,
        })?;
        small.load(&mut &small_blob[..])?;
        let (want_flash, want_dram) = (config.flash_bytes, config.dram_bytes);
        let h = Self::assemble(config, flash_bytes, small, small_span, loc);
        if want_flash != flash_bytes {
            h.resize(want_flash, want_dram)?;
        }
        Ok(h)
    }

    fn shape(
        span: &Span,
        small_fraction: f64,
        align: u64,
        small_threshold: usize,
        region: u64,
    ) -> Shape {
        Shape::of_span(span)
            .with("small fraction (f64 bits)", small_fraction.to_bits())
            .with("small engine alignment", align)
            .with("small-object threshold", small_threshold as u64)
            .with("log region bytes", region)
    }

    /// Saves the partition for a warm restart: dirty DRAM objects are written to flash first
    /// (they stay in DRAM, clean), then the small-object engine's and the log's indexes. Holds
    /// the layout lock, so no operation runs meanwhile; the index is valid only until the next
    /// write (see `crate::persist`), so call it at shutdown, after the last request.
    pub fn save(&self, w: &mut dyn Write) -> Result<()> {
        let layout = self.layout.write().unwrap_or_else(|p| p.into_inner());
        for shard in &self.shards {
            let dirty = locked(shard).take_dirty();
            self.spill(dirty)?;
        }
        let flash = locked(&self.flash);
        let mut small = Vec::new();
        flash.small.save(&mut small)?;
        let mut log = Vec::new();
        flash.loc.save(&mut log)?;
        let mut e = Enc::default();
        e.u64(layout.flash_bytes);
        e.u64(flash.small_span.0);
        e.u64(flash.small_span.1);
        e.bytes(&small);
        e.bytes(&log);
        let region = flash.loc.region_bytes();
        let shape = Self::shape(
            &self.span,
            self.small_fraction,
            self.small_align,
            self.small_threshold,
            region,
        );
        persist::write(w, Kind::Hybrid, &shape, &e.0)
    }

    /// (offset within the partition, length) of the small engine: the top of the span,
    /// whole blocks of `align` (0: 64 KiB).
    fn small_span(span: &Span, flash: u64, fraction: f64, align: u64, region: u64) -> (u64, u64) {
        let align = if align == 0 { 64 << 10 } else { align };
        let mut len = ((flash as f64 * fraction) as u64) / align * align;
        // Leave the log at least two regions.
        len = len.min(flash.saturating_sub(2 * region) / align * align);
        (span.len - len, len)
    }

    fn loc_bytes(flash: u64, small_len: u64, region: u64) -> u64 {
        (flash - small_len) / region * region
    }

    fn build_small(span: &Span, factory: &SmallFactory, at: (u64, u64)) -> Result<Box<dyn Engine>> {
        if at.1 == 0 {
            return Err(Error::Config(
                "hybrid cache: the small-object engine got no space (raise flash or small_fraction)"
                    .into(),
            ));
        }
        // Start from deallocated blocks: nothing of an earlier layout may parse as an object.
        span.trim(at.0, at.1)?;
        factory(Span {
            device: span.device.clone(),
            offset: span.offset + at.0,
            len: at.1,
        })
    }

    fn shard(&self, key: &[u8]) -> &Mutex<DramLru> {
        &self.shards[(key_hash(key) >> 48) as usize & (self.shards.len() - 1)]
    }

    /// Writes objects DRAM let go to flash (dirty ones only: clean ones are there already or
    /// were evicted from flash meanwhile).
    fn spill(&self, evicted: Vec<Evicted>) -> Result<()> {
        let dirty: Vec<Evicted> = evicted.into_iter().filter(|e| e.dirty).collect();
        if dirty.is_empty() {
            return Ok(());
        }
        let mut flash = locked(&self.flash);
        for e in dirty {
            if object::encoded_len(&e.key, &e.value) < self.small_threshold {
                flash.small.set(&e.key, &e.value)?;
            } else {
                flash.loc.set(&e.key, &e.value)?;
            }
        }
        Ok(())
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let _layout = self.layout.read().unwrap_or_else(|p| p.into_inner());
        self.gets.fetch_add(1, Ordering::Relaxed);
        let mut dram = locked(self.shard(key));
        if let Some(v) = dram.get(key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(v));
        }
        let found = {
            let mut flash = locked(&self.flash);
            match flash.small.get(key)? {
                Some(v) => Some(v),
                None => flash.loc.get(key)?,
            }
        };
        if let Some(v) = &found {
            self.hits.fetch_add(1, Ordering::Relaxed);
            let out = dram.insert(key, v, false);
            self.spill(out)?;
        }
        Ok(found)
    }

    pub fn set(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let _layout = self.layout.read().unwrap_or_else(|p| p.into_inner());
        self.sets.fetch_add(1, Ordering::Relaxed);
        self.app_bytes
            .fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
        let mut dram = locked(self.shard(key));
        {
            let mut flash = locked(&self.flash);
            flash.small.delete(key)?;
            flash.loc.delete(key)?;
        }
        let out = dram.insert(key, value, true);
        self.spill(out)?;
        Ok(true)
    }

    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let _layout = self.layout.read().unwrap_or_else(|p| p.into_inner());
        self.deletes.fetch_add(1, Ordering::Relaxed);
        let mut dram = locked(self.shard(key));
        let mut found = dram.remove(key).is_some();
        let mut flash = locked(&self.flash);
        found |= flash.small.delete(key)?;
        found |= flash.loc.delete(key)?;
        Ok(found)
    }

    /// Changes the partition's flash and DRAM sizes while running. Shrinking evicts: DRAM's
    /// least recently used objects go to flash, the log drops its regions past the new end, and
    /// the small-object engine is rebuilt (empty) when its share changes.
    pub fn resize(&self, flash_bytes: u64, dram_bytes: usize) -> Result<()> {
        if flash_bytes > self.span.len {
            return Err(Error::Config(format!(
                "hybrid cache: {flash_bytes} flash bytes exceed the partition's {}",
                self.span.len
            )));
        }
        let mut layout = self.layout.write().unwrap_or_else(|p| p.into_inner());
        let region = locked(&self.flash).loc.region_bytes();
        let small_span = Self::small_span(
            &self.span,
            flash_bytes,
            self.small_fraction,
            self.small_align,
            region,
        );
        let loc_bytes = Self::loc_bytes(flash_bytes, small_span.1, region);
        if loc_bytes < 2 * region {
            return Err(Error::Config(format!(
                "hybrid cache: {flash_bytes} flash bytes leave the log fewer than 2 regions of {region}"
            )));
        }
        let per_shard = dram_bytes / self.shards.len();
        for shard in &self.shards {
            let out = locked(shard).set_capacity(per_shard);
            self.spill(out)?;
        }
        let mut flash = locked(&self.flash);
        if small_span != flash.small_span {
            // Rebuilt first with a placeholder-free swap: the old engine is dropped only once
            // the new one exists, and the log never writes during this (we hold the layout).
            let old = flash.small.stats();
            flash.small_retired += &EngineStats { objects: 0, ..old };
            let old_span = flash.small_span;
            flash.loc.resize(loc_bytes)?;
            if old_span.1 > 0 {
                self.span.trim(old_span.0, old_span.1)?;
            }
            flash.small = Self::build_small(&self.span, &self.factory, small_span)?;
            flash.small_span = small_span;
        } else {
            flash.loc.resize(loc_bytes)?;
        }
        layout.flash_bytes = flash_bytes;
        layout.dram_bytes = dram_bytes;
        Ok(())
    }

    /// (flash bytes, DRAM bytes) configured now.
    pub fn size(&self) -> (u64, usize) {
        let l = self.layout.read().unwrap_or_else(|p| p.into_inner());
        (l.flash_bytes, l.dram_bytes)
    }

    /// Counters of the whole partition: gets, hits, sets and application bytes as the
    /// application saw them, flash writes and evictions of both engines.
    pub fn stats(&self) -> EngineStats {
        let flash = locked(&self.flash);
        let mut s = flash.small_retired.clone();
        s += &flash.small.stats();
        s += &flash.loc.stats();
        s.gets = self.gets.load(Ordering::Relaxed);
        s.hits = self.hits.load(Ordering::Relaxed);
        s.sets = self.sets.load(Ordering::Relaxed);
        s.deletes = self.deletes.load(Ordering::Relaxed);
        s.app_bytes_written = self.app_bytes.load(Ordering::Relaxed);
        s
    }

    /// DRAM of the small-object engine's and of the log's indexes, apart.
    pub fn engine_dram(&self) -> (usize, usize) {
        let flash = locked(&self.flash);
        (flash.small.dram_bytes(), flash.loc.dram_bytes())
    }

    /// Counters of the small-object engine and of the log, apart.
    pub fn engine_stats(&self) -> (EngineStats, EngineStats) {
        let flash = locked(&self.flash);
        (flash.small.stats(), flash.loc.stats())
    }

    /// DRAM of the flash engines' indexes plus the DRAM cache's charged bytes.
    pub fn dram_bytes(&self) -> usize {
        let flash = locked(&self.flash);
        let cache: usize = self.shards.iter().map(|s| locked(s).used()).sum();
        flash.small.dram_bytes() + flash.loc.dram_bytes() + cache
    }
}

impl Engine for Hybrid {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Hybrid::get(self, key)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        Hybrid::set(self, key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        Hybrid::delete(self, key)
    }

    fn stats(&self) -> EngineStats {
        Hybrid::stats(self)
    }

    /// The small engine's counters as "small.*".
    fn counters(&self) -> Vec<(String, u64)> {
        small_named(locked(&self.flash).small.counters())
    }

    /// The small engine's layout as "small.*".
    fn layout(&self) -> Vec<(String, u64)> {
        small_named(locked(&self.flash).small.layout())
    }

    /// The log's parts as "large.*", the small engine's as "small.*" (a small engine replaced
    /// by a resize takes its counts with it).
    fn parts(&self) -> Vec<PartStats> {
        let flash = locked(&self.flash);
        let named = |prefix: &'static str, parts: Vec<PartStats>| {
            parts.into_iter().map(move |p| PartStats {
                name: format!("{prefix}.{}", p.name),
                ..p
            })
        };
        named("large", flash.loc.parts())
            .chain(named("small", flash.small.parts()))
            .collect()
    }

    fn dram_bytes(&self) -> usize {
        Hybrid::dram_bytes(self)
    }

    fn save(&self, w: &mut dyn Write) -> Result<()> {
        Hybrid::save(self, w)
    }

    /// A partition is restored whole, its parts rebuilt from the configuration.
    fn load(&mut self, _: &mut dyn Read) -> Result<()> {
        Err(Error::Persist(
            "hybrid cache: restore with Hybrid::restore(config, index), not into a built one"
                .into(),
        ))
    }
}

/// Names of the small engine's figures, prefixed so they never clash with the log's.
fn small_named(named: Vec<(String, u64)>) -> Vec<(String, u64)> {
    named
        .into_iter()
        .map(|(k, v)| (format!("small.{k}"), v))
        .collect()
}
