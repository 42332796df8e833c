//! The engine of a cache stage, built from its [`CacheConfig`]: where its blocks live, how
//! big it is, and how it changes size.
//!
//! | engine | what | resize | one region |
//! |---|---|---|---|
//! | `dram` | [`MemEngine`], LRU or FIFO | in place | 1 byte (installed = requested) |
//! | `loc` | the large-object log (`lachesis_cache::Loc`), part `loc` | in place (regions added or evicted at the end) | the device's region |
//! | `kangaroo` | Kangaroo (KLog + KSet), parts `klog`, `kset` | rebuilt empty at the new size | the device's region |
//! | `hybrid` | `lachesis_cache::Hybrid`: a DRAM front (1/32 of the size), Kangaroo for small objects, the log for the rest; parts `klog`, `kset`, `loc` | rebuilt empty at the new size | the device's region |
//! | `fairywren` | FairyWREN (FwLog + FwSets), parts `fwlog`, `fwsets` (hot subsets), `fwcold` (cold subsets) | rebuilt empty at the new size | the device's region |
//! | `hybrid-fairywren` | as `hybrid`, FairyWREN for small objects; parts `fwlog`, `fwsets`, `fwcold`, `loc` | rebuilt empty at the new size | the device's region |
//!
//! FairyWREN's erase unit is the device's reclaim unit (the region where the device has
//! none), so every unit it reclaims is trimmed whole and the device relocates nothing; it needs
//! [`lachesis_cache::fairywren::MIN_EUS`] units (11 MiB with 1 MiB reclaim units): below that
//! (plus the log's two regions for `hybrid-fairywren`) nothing is installed. In the hybrid
//! its share is 5% of the flash or those units, whichever is more, in whole units.
//!
//! Flash engines live in a [`Space`] of regions of one of the switch's [`Devices`]
//! (`device`, or the first). Installed bytes are the requested size rounded down to whole
//! regions, except that a log needs at least 2 regions and a hybrid 3 (a request between one
//! and two regions installs the minimum, so installed and requested differ by less than a
//! region); below one region (two for a hybrid) nothing is installed and every read misses.
//!
//! Kangaroo and FairyWREN are engines for tiny objects: a 4 KiB block does not fit one of
//! their 4 KiB sets, so for them a block is stored as four 1 KiB objects (a block hits only if all four are
//! there); every object is admitted (no pre-flash drop) and, as three fill a set, one object
//! is enough to move a set from KLog to KSet (threshold 1). The hybrid stores whole blocks, which are above its small-object threshold: they go
//! to its log; its Kangaroo part (5% of the flash) holds objects under 2 KiB only.

use lachesis_cache::fairywren::{FairyWren, FairyWrenConfig, MIN_EUS};
use lachesis_cache::kangaroo::{Kangaroo, KangarooConfig};
use lachesis_cache::{
    Engine, EngineStats, Hybrid, HybridConfig, Loc, LocConfig, Lookup, PendingRead, RegionEviction,
    RegionWrite, Span,
};
use lachesis_device::PlacementHandle;
use lachesis_switch::{CacheConfig, CacheEngine, EnginePart, Eviction};

use super::error::StageError;
use super::mem_engine::MemEngine;
use super::space::{Devices, Reservation, Space};

/// Bytes of a cached block.
pub const BLOCK: usize = 4096;
/// Bytes of one object when Kangaroo stores a block as several.
const KANGAROO_CHUNK: usize = 1024;
/// The hybrid's DRAM front: this fraction of the stage's size.
const HYBRID_DRAM_DIVISOR: u64 = 32;

/// An engine that stores nothing (a stage below its engine's smallest size).
struct Nothing(EngineStats);

impl Engine for Nothing {
    fn get(&mut self, _key: &[u8]) -> lachesis_cache::Result<Option<Vec<u8>>> {
        self.0.gets += 1;
        Ok(None)
    }
    fn set(&mut self, _key: &[u8], _value: &[u8]) -> lachesis_cache::Result<bool> {
        self.0.sets += 1;
        self.0.rejected_sets += 1;
        Ok(false)
    }
    fn delete(&mut self, _key: &[u8]) -> lachesis_cache::Result<bool> {
        self.0.deletes += 1;
        Ok(false)
    }
    fn stats(&self) -> EngineStats {
        self.0.clone()
    }
    fn dram_bytes(&self) -> usize {
        0
    }
}

fn cache_err(e: lachesis_cache::Error) -> StageError {
    StageError::Engine(e)
}

/// A cache stage's engine, its space and its size.
pub struct BlockEngine {
    config: CacheConfig,
    engine: Box<dyn Engine>,
    /// Flash engines: the regions they hold. Declared after `engine`, so an engine is dropped
    /// before its regions go back.
    space: Option<Space>,
    installed: u64,
    /// Counters of engines replaced by rebuilds, so totals stay cumulative.
    retired: EngineStats,
    /// Objects per block (4 for Kangaroo, 1 otherwise).
    chunks: usize,
    /// DRAM engines: the blocks evicted since last taken (level-1 demotion). Flash engines
    /// evict whole regions unseen, so their stages do not demote.
    evicted: Option<super::mem_engine::Evicted>,
    /// Which engine instance is in place: bumped by every rebuild, so that a read planned on
    /// one engine is never finished on its successor.
    instance: u64,
}

/// What [`BlockEngine::lookup`] found.
pub enum BlockLookup {
    Done(Option<Vec<u8>>),
    /// Read it with [`BlockRead::read`] without the stage's lock, then
    /// [`BlockEngine::finish`] under it.
    Read(BlockRead),
}

/// A block read planned under the stage's lock (see [`lachesis_cache::PendingRead`]).
pub struct BlockRead {
    read: PendingRead,
    instance: u64,
}

impl BlockRead {
    /// The device read; takes no lock.
    pub fn read(&self) -> lachesis_cache::Result<Vec<u8>> {
        self.read.read()
    }

    /// Each one's [`BlockRead::read`], in order, blocks next to each other on the device in
    /// one IO ([`PendingRead::read_together`]); takes no lock.
    pub fn read_together(reads: &[&BlockRead]) -> Vec<lachesis_cache::Result<Vec<u8>>> {
        PendingRead::read_together(&reads.iter().map(|r| &r.read).collect::<Vec<_>>())
    }
}

impl BlockEngine {
    /// Builds the engine `config` asks for on `devices` (flash engines), at `config.size_bytes`.
    pub fn build(config: &CacheConfig, devices: &Devices) -> Result<BlockEngine, StageError> {
        let what = |e: StageError| e.context(format!("cache stage {:?}", config.name));
        let chunks = if matches!(
            config.engine,
            CacheEngine::Kangaroo | CacheEngine::Fairywren
        ) {
            BLOCK / KANGAROO_CHUNK
        } else {
            1
        };
        let mut be = BlockEngine {
            config: config.clone(),
            engine: Box::new(Nothing(EngineStats::default())),
            space: None,
            installed: 0,
            retired: EngineStats::default(),
            chunks,
            evicted: None,
            instance: 0,
        };
        if config.engine == CacheEngine::Dram {
            let evicted = super::mem_engine::Evicted::default();
            let engine = match config.eviction {
                Eviction::Lru => MemEngine::new(config.size_bytes as usize),
                Eviction::Fifo => MemEngine::fifo(config.size_bytes as usize),
            };
            be.engine = Box::new(engine.keeping_evicted(evicted.clone()));
            be.evicted = Some(evicted);
            be.installed = config.size_bytes;
            return Ok(be);
        }
        let pool = devices.get(config.device.as_deref()).map_err(what)?;
        // Handles the device cannot place are refused here, before anything is written.
        for p in &config.placement {
            pool.geometry()
                .check_handle(PlacementHandle(p.handle))
                .map_err(|e| what(StageError::from(format!("placement {:?}: {e}", p.part))))?;
        }
        be.space = Some(Space::new(pool));
        let n = be.regions_for(config.size_bytes);
        let r = be.reserve_regions(n).map_err(what)?;
        be.rebuild(n, r).map_err(what)?;
        Ok(be)
    }

    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Bytes of one region of this engine's device (0 for DRAM).
    pub fn region_bytes(&self) -> u64 {
        self.space.as_ref().map_or(0, |s| s.pool().region_bytes())
    }

    /// Bytes the engine may use now.
    pub fn installed(&self) -> u64 {
        self.installed
    }

    /// FairyWREN's erase unit: the device's reclaim unit, or the region where it has none.
    fn erase_unit(&self) -> u64 {
        let pool = self.space.as_ref().map(Space::pool);
        match pool.map(|p| p.geometry().reclaim_unit_bytes) {
            Some(ru) if ru > 0 => ru,
            _ => self.region_bytes(),
        }
    }

    /// Regions a flash engine of this kind installs for `size` bytes.
    fn regions_for(&self, size: u64) -> u32 {
        let rb = self.region_bytes().max(1);
        let n = u32::try_from(size / rb).unwrap_or(u32::MAX);
        let fw_min = u32::try_from((MIN_EUS * self.erase_unit()).div_ceil(rb)).unwrap_or(u32::MAX);
        match self.config.engine {
            CacheEngine::Dram => 0,
            CacheEngine::Loc if n == 1 => 2,
            CacheEngine::Hybrid if n == 1 => 0,
            CacheEngine::Hybrid if n == 2 => 3,
            CacheEngine::Fairywren if n < fw_min => 0,
            CacheEngine::HybridFairywren if n < fw_min.saturating_add(2) => 0,
            _ => n,
        }
    }

    fn reserve_regions(&self, n: u32) -> Result<Option<Reservation>, StageError> {
        let Some(space) = &self.space else {
            return Ok(None);
        };
        let have = space.regions();
        if n <= have {
            return Ok(None);
        }
        space.pool().reserve(n - have).map(Some)
    }

    /// Takes the regions a resize to `size` needs beyond those held (none for DRAM or a
    /// shrink), so a full device is refused before anything changes.
    pub fn reserve(&self, size: u64) -> Result<Option<Reservation>, StageError> {
        self.reserve_regions(self.regions_for(size))
    }

    /// Resizes to `size` with the regions `reserve(size)` took: the log and DRAM in place,
    /// the others rebuilt empty. What the engine drops is clean (a stage keeps its dirty
    /// blocks apart), so no write is lost.
    pub fn resize(&mut self, size: u64, reserved: Option<Reservation>) -> Result<(), StageError> {
        self.config.size_bytes = size;
        if self.space.is_none() {
            self.engine.resize(size).map_err(cache_err)?;
            self.installed = size;
            return Ok(());
        }
        let n = self.regions_for(size);
        let reserved = match reserved {
            Some(r) => Some(r),
            None => self.reserve_regions(n)?,
        };
        let have = self.installed / self.region_bytes();
        let in_place = self.config.engine == CacheEngine::Loc && have >= 2 && n >= 2;
        if !in_place {
            return self.rebuild(n, reserved);
        }
        let space = self.space.as_ref().expect("flash");
        if let Some(r) = reserved {
            space.grow(r);
        }
        let bytes = u64::from(n) * self.region_bytes();
        if !self.engine.resize(bytes).map_err(cache_err)? {
            return Err("the log did not resize in place".into());
        }
        // The log evicted and trimmed the regions past its new end: give them back.
        space.shrink_to(n);
        self.installed = bytes;
        Ok(())
    }

    /// Replaces the flash engine by an empty one of `n` regions.
    fn rebuild(&mut self, n: u32, reserved: Option<Reservation>) -> Result<(), StageError> {
        // A region write still under way must land before the space is given away.
        self.engine.settle().map_err(cache_err)?;
        let old = std::mem::replace(&mut self.engine, Box::new(Nothing(EngineStats::default())));
        self.instance += 1;
        // Its objects are gone with it; stats() takes `objects` from the engine in place.
        self.retired += &old.stats();
        drop(old);
        self.installed = 0;
        let space = self.space.as_ref().expect("flash");
        if let Some(r) = reserved {
            space.grow(r);
        }
        space.shrink_to(n);
        if n == 0 {
            return Ok(());
        }
        let rb = space.pool().region_bytes();
        let len = u64::from(n) * rb;
        let device = space.device();
        let span = |len| Span {
            device: device.clone(),
            offset: 0,
            len,
        };
        // Nothing of the previous engine may parse as an object of the new one.
        span(len).trim(0, len).map_err(cache_err)?;
        let c = &self.config;
        let h = |p| PlacementHandle(c.handle(p));
        let eviction = match c.eviction {
            Eviction::Lru => RegionEviction::Lru,
            Eviction::Fifo => RegionEviction::Fifo,
        };
        let loc_config = |span: Span, regions: u32| {
            let mut lc = LocConfig::new(span, h(EnginePart::Loc));
            lc.region_bytes = rb;
            lc.eviction = eviction;
            lc.regions = regions;
            lc
        };
        let (klog, kset) = (h(EnginePart::KLog), h(EnginePart::KSet));
        let kangaroo = move |span: Span, object_bytes: u32, threshold: u32| {
            let mut kc = KangarooConfig::new(span, klog, kset);
            kc.expected_object_bytes = object_bytes;
            kc.threshold = threshold;
            // A block is several objects: admit them all or a block would rarely be whole.
            kc.admit_probability = 1.0;
            Kangaroo::new(kc.fit_partitions())
        };
        let eu = self.erase_unit();
        let (fwlog, fwsets, fwcold) = (
            h(EnginePart::FwLog),
            h(EnginePart::FwSets),
            h(EnginePart::FwCold),
        );
        let fairywren = move |span: Span, object_bytes: u32, threshold: u32, admit: f64| {
            let mut fc = FairyWrenConfig::new(span, fwlog, fwsets, fwcold);
            fc.eu_bytes = eu;
            fc.expected_object_bytes = object_bytes;
            fc.threshold = threshold;
            fc.admit_probability = admit;
            fc
        };
        let pool_len = u64::from(space.pool().regions()) * rb;
        // At least 320 KiB for the hybrid's Kangaroo (two KLog pages after its 5% log share).
        let small_fraction = 0.05f64.max((320 << 10) as f64 / len as f64);
        self.engine = match c.engine {
            CacheEngine::Dram => unreachable!("DRAM engines have no space"),
            // Over the whole pool, `n` regions in use: it grows in place.
            CacheEngine::Loc => {
                // The stage writes full regions without its lock (`CacheStage::write_region`).
                let mut lc = loc_config(span(pool_len), n);
                lc.defer_seals = true;
                Box::new(Loc::new(lc).map_err(cache_err)?)
            }
            CacheEngine::Kangaroo => {
                let object = (KANGAROO_CHUNK + 17 + lachesis_cache::object::HEADER) as u32;
                // Three 1 KiB objects fill a set: a set is worth rewriting for one of them.
                Box::new(kangaroo(span(len), object, 1).map_err(cache_err)?)
            }
            CacheEngine::Fairywren => {
                let object = (KANGAROO_CHUNK + 17 + lachesis_cache::object::HEADER) as u32;
                // As for Kangaroo: every piece of a block admitted, one enough to move a set.
                let fc = fairywren(span(len), object, 1, 1.0);
                Box::new(FairyWren::new(fc).map_err(cache_err)?)
            }
            CacheEngine::Hybrid | CacheEngine::HybridFairywren => {
                let fw = c.engine == CacheEngine::HybridFairywren;
                let small: lachesis_cache::hybrid::SmallFactory = if fw {
                    // The hybrid deallocated the span first: nothing to trim.
                    Box::new(move |s: Span| {
                        let fc = fairywren(s, 200, 2, 0.9);
                        Ok(Box::new(FairyWren::open(fc)?) as Box<dyn Engine>)
                    })
                } else {
                    Box::new(move |s: Span| Ok(Box::new(kangaroo(s, 200, 2)?) as Box<dyn Engine>))
                };
                let (small_fraction, small_align) = if fw {
                    let units = (MIN_EUS as f64 + 0.5) * eu as f64 / len as f64;
                    (0.05f64.max(units), eu)
                } else {
                    (small_fraction, 0)
                };
                Box::new(
                    Hybrid::new(HybridConfig {
                        span: span(len),
                        flash_bytes: len,
                        dram_bytes: (c.size_bytes / HYBRID_DRAM_DIVISOR) as usize,
                        small_fraction,
                        small_align,
                        small_threshold: 2048,
                        shards: 8,
                        loc: loc_config(span(len), 0),
                        small,
                    })
                    .map_err(cache_err)?,
                )
            }
        };
        self.installed = len;
        Ok(())
    }

    fn key(file: u64, block: u64, chunk: Option<u8>) -> Vec<u8> {
        let mut k = Vec::with_capacity(17);
        k.extend_from_slice(&file.to_le_bytes());
        k.extend_from_slice(&block.to_le_bytes());
        k.extend(chunk);
        k
    }

    /// The cached block, if the engine has all of it.
    pub fn get(&mut self, file: u64, block: u64) -> lachesis_cache::Result<Option<Vec<u8>>> {
        if self.chunks == 1 {
            return self.engine.get(&Self::key(file, block, None));
        }
        let mut out = Vec::with_capacity(BLOCK);
        for c in 0..self.chunks {
            match self.engine.get(&Self::key(file, block, Some(c as u8)))? {
                Some(v) if v.len() == BLOCK / self.chunks => out.extend_from_slice(&v),
                _ => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// [`BlockEngine::get`] in two steps, so that a hit's device read runs without the
    /// stage's lock (engines that store a block as one object and can read so; the others
    /// answer at once).
    pub fn lookup(&mut self, file: u64, block: u64) -> lachesis_cache::Result<BlockLookup> {
        if self.chunks != 1 {
            return Ok(BlockLookup::Done(self.get(file, block)?));
        }
        Ok(match self.engine.lookup(&Self::key(file, block, None))? {
            Lookup::Done(v) => BlockLookup::Done(v),
            Lookup::Read(read) => BlockLookup::Read(BlockRead {
                read,
                instance: self.instance,
            }),
        })
    }

    /// Completes a [`BlockEngine::lookup`]: the block, if the engine still holds it as it was
    /// read (else what it holds now).
    pub fn finish(
        &mut self,
        file: u64,
        block: u64,
        read: BlockRead,
        bytes: lachesis_cache::Result<Vec<u8>>,
    ) -> lachesis_cache::Result<Option<Vec<u8>>> {
        if read.instance != self.instance {
            return self.get(file, block);
        }
        self.engine
            .finish(&Self::key(file, block, None), read.read, bytes)
    }

    /// The region write the engine left to the stage, if any ([`Engine::take_write`]).
    pub fn take_write(&mut self) -> Option<RegionWrite> {
        self.engine.take_write()
    }

    /// After [`RegionWrite::write`], under the stage's lock again.
    pub fn wrote(&mut self, w: &RegionWrite) -> lachesis_cache::Result<()> {
        self.engine.wrote(w)
    }

    /// Stores a whole block; `false` if the engine declined (some) of it.
    pub fn set(&mut self, file: u64, block: u64, data: &[u8]) -> lachesis_cache::Result<bool> {
        if self.chunks == 1 {
            return self.engine.set(&Self::key(file, block, None), data);
        }
        let mut all = true;
        for (c, piece) in data.chunks(BLOCK / self.chunks).enumerate() {
            all &= self
                .engine
                .set(&Self::key(file, block, Some(c as u8)), piece)?;
        }
        Ok(all)
    }

    pub fn delete(&mut self, file: u64, block: u64) -> lachesis_cache::Result<bool> {
        if self.chunks == 1 {
            return self.engine.delete(&Self::key(file, block, None));
        }
        let mut any = false;
        for c in 0..self.chunks {
            any |= self.engine.delete(&Self::key(file, block, Some(c as u8)))?;
        }
        Ok(any)
    }

    /// The whole blocks evicted since the last call, (file, block, bytes): DRAM engines only.
    pub fn take_evicted(&mut self) -> Vec<(u64, u64, Vec<u8>)> {
        let Some(e) = &self.evicted else {
            return Vec::new();
        };
        let taken = std::mem::take(&mut *e.lock().unwrap_or_else(|e| e.into_inner()));
        taken
            .into_iter()
            .filter(|(k, v)| k.len() == 16 && v.len() == BLOCK)
            .map(|(k, v)| {
                let file = u64::from_le_bytes(k[..8].try_into().expect("16 bytes"));
                let block = u64::from_le_bytes(k[8..].try_into().expect("16 bytes"));
                (file, block, v)
            })
            .collect()
    }

    /// Counters since the stage was built (across rebuilds); `objects` is the engine's now.
    pub fn stats(&self) -> EngineStats {
        let now = self.engine.stats();
        let mut s = self.retired.clone();
        s += &now;
        s.objects = now.objects;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::space::testing::sim;
    use super::*;
    use lachesis_switch::{PartHandle, StageConfig, WriteMode};

    pub(crate) fn config(engine: CacheEngine, size: u64) -> CacheConfig {
        CacheConfig {
            name: "cache/t".into(),
            owner: Some("t".into()),
            engine,
            size_bytes: size,
            write_mode: WriteMode::Through,
            eviction: Eviction::Lru,
            max_dirty_bytes: 1 << 20,
            device: None,
            placement: vec![
                PartHandle {
                    part: EnginePart::Loc,
                    handle: 2,
                },
                PartHandle {
                    part: EnginePart::KLog,
                    handle: 3,
                },
                PartHandle {
                    part: EnginePart::KSet,
                    handle: 4,
                },
                PartHandle {
                    part: EnginePart::FwLog,
                    handle: 5,
                },
                PartHandle {
                    part: EnginePart::FwSets,
                    handle: 6,
                },
                PartHandle {
                    part: EnginePart::FwCold,
                    handle: 7,
                },
            ],
            next: None,
            serves: None,
            exclusive: false,
        }
    }

    fn block(file: u64, b: u64) -> Vec<u8> {
        (0..BLOCK)
            .map(|i| (i as u64 ^ file.wrapping_mul(31) ^ b.wrapping_mul(7)) as u8)
            .collect()
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn every_engine_stores_blocks_and_installs_whole_regions() {
        let (dev, _) = sim(64);
        let devices = Devices::new(vec![("flash0".into(), dev)]).unwrap();
        for (engine, size, installed) in [
            (CacheEngine::Dram, 5 * MIB + 7, 5 * MIB + 7),
            (CacheEngine::Loc, 5 * MIB + 7, 5 * MIB),
            (CacheEngine::Loc, MIB + 7, 2 * MIB),
            (CacheEngine::Loc, MIB - 1, 0),
            (CacheEngine::Kangaroo, 5 * MIB + 7, 5 * MIB),
            (CacheEngine::Hybrid, 5 * MIB + 7, 5 * MIB),
            (CacheEngine::Hybrid, 2 * MIB, 3 * MIB),
            // FairyWREN needs 11 erase units of the device's 1 MiB reclaim unit (13 regions
            // with the hybrid's log).
            (CacheEngine::Fairywren, 16 * MIB + 7, 16 * MIB),
            (CacheEngine::Fairywren, 10 * MIB, 0),
            (CacheEngine::HybridFairywren, 16 * MIB, 16 * MIB),
            (CacheEngine::HybridFairywren, 12 * MIB, 0),
        ] {
            let mut e = BlockEngine::build(&config(engine, size), &devices).unwrap();
            assert_eq!(e.installed(), installed, "{engine:?} {size}");
            for b in 0..64 {
                e.set(1, b, &block(1, b)).unwrap();
            }
            let hits = (0..64)
                .filter(|&b| match e.get(1, b).unwrap() {
                    Some(v) => {
                        assert_eq!(v, block(1, b), "{engine:?}: a wrong block");
                        true
                    }
                    None => false,
                })
                .count();
            if installed > 0 {
                assert!(hits >= 48, "{engine:?} {size}: {hits} of 64 blocks kept");
            } else {
                assert_eq!(hits, 0);
            }
        }
        // Everything went back when the engines were dropped.
        let p = devices.get(None).unwrap();
        assert_eq!(p.free_regions(), p.regions());
    }

    #[test]
    fn the_log_resizes_in_place_and_the_others_rebuild() {
        let (dev, _) = sim(64);
        let devices = Devices::new(vec![("flash0".into(), dev)]).unwrap();
        let p = devices.get(None).unwrap();
        let mut loc = BlockEngine::build(&config(CacheEngine::Loc, 8 * MIB), &devices).unwrap();
        for b in 0..256 {
            loc.set(1, b, &block(1, b)).unwrap();
        }
        let r = loc.reserve(16 * MIB).unwrap();
        assert_eq!(r.as_ref().map(|r| r.len()), Some(8));
        loc.resize(16 * MIB, r).unwrap();
        assert_eq!(loc.installed(), 16 * MIB);
        assert_eq!(p.free_regions(), p.regions() - 16);
        assert_eq!(
            loc.get(1, 3).unwrap(),
            Some(block(1, 3)),
            "growing keeps the blocks"
        );
        // 12 MiB of blocks fill 12 of the 16 regions; shrinking to 4 evicts the rest.
        for b in 256..3000 {
            loc.set(1, b, &block(1, b)).unwrap();
        }
        assert!(loc.reserve(4 * MIB).unwrap().is_none());
        loc.resize(4 * MIB, None).unwrap();
        assert_eq!(loc.installed(), 4 * MIB);
        assert_eq!(p.free_regions(), p.regions() - 4);
        let kept: Vec<u64> = (0..3000)
            .filter(|&b| loc.get(1, b).unwrap().is_some())
            .collect();
        assert!(
            kept.len() > 500 && kept.len() < 1100,
            "shrinking keeps 4 regions: {}",
            kept.len()
        );
        for &b in &kept {
            assert_eq!(loc.get(1, b).unwrap(), Some(block(1, b)));
        }
        // Kangaroo is rebuilt: empty, counters kept.
        let mut k = BlockEngine::build(&config(CacheEngine::Kangaroo, 4 * MIB), &devices).unwrap();
        k.set(1, 1, &block(1, 1)).unwrap();
        let r = k.reserve(6 * MIB).unwrap();
        k.resize(6 * MIB, r).unwrap();
        assert_eq!(k.installed(), 6 * MIB);
        assert_eq!(k.get(1, 1).unwrap(), None);
        assert_eq!(
            k.stats().sets,
            4,
            "four objects of the block, before the rebuild"
        );
        // A device too small for a growth refuses it and changes nothing.
        let e = loc.reserve(1 << 40).err().unwrap();
        assert!(e.is_device_full(), "{e}");
        assert_eq!(p.free_regions(), p.regions() - 4 - 6);
    }

    #[test]
    fn the_fixture_stages_build_and_unknown_devices_or_handles_are_refused() {
        let (dev, _) = super::super::space::testing::sparse(2 << 30);
        let devices = Devices::new(vec![("flash0".into(), dev)]).unwrap();
        let mut built = 0;
        for fixture in ["valid-stages.json", "valid-stages-fairywren.json"] {
            let text = std::fs::read_to_string(format!(
                "{}/../../api-schemas/fixtures/desired-state/{fixture}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let stages: Vec<StageConfig> = serde_json::from_value(v["stages"].clone()).unwrap();
            for s in &stages {
                if let StageConfig::Cache(c) = s {
                    let e = BlockEngine::build(c, &devices).unwrap();
                    assert_eq!(e.installed(), c.size_bytes, "{}", c.name);
                    built += 1;
                }
            }
        }
        assert_eq!(built, 4);
        let mut c = config(CacheEngine::Loc, 4 * MIB);
        c.device = Some("flash9".into());
        let e = BlockEngine::build(&c, &devices).err().unwrap().to_string();
        assert!(e.contains("cache/t") && e.contains("flash9"), "{e}");
        c.device = None;
        c.placement[0].handle = 8;
        let e = BlockEngine::build(&c, &devices).err().unwrap().to_string();
        assert!(e.contains("placement Loc") && e.contains("handle 8"), "{e}");
    }
}
