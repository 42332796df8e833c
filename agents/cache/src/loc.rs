//! Large-object cache (LOC): a log of regions, CacheLib's BlockCache design.
//!
//! Objects are appended to an open region buffered in DRAM; a full region is written in one IO
//! with the engine's placement handle. A region is the device's reclaim unit when it has one, so
//! the log fills and empties whole reclaim units: on such a device a region is written whole,
//! its unused tail included (as CacheLib writes its region buffers), since a shorter write
//! would leave the handle's reclaim unit holding the start of the next region, live after this
//! one is evicted, for garbage collection to copy. When no region is free, one is evicted (the
//! oldest sealed one, or the least recently read one), its hot objects are reinserted, and the
//! region is deallocated at once: the device then never relocates dead log data, which is what
//! keeps DLWA at 1 next to other streams.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use lachesis_device::PlacementHandle;

use crate::dev::{Span, SpanReads};
use crate::engine::{Engine, EngineStats, LogUnits, Lookup, PartStats, PendingRead, Stamp};
use crate::object::{self, key_hash};
use crate::persist::{self, Dec, Enc, Kind, Shape};
use crate::{Error, Result};

/// Which sealed region to evict when the log needs a free one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionEviction {
    /// The region sealed longest ago.
    Fifo,
    /// The region whose objects were read least recently.
    Lru,
}

/// Configuration of a [`Loc`].
#[derive(Clone)]
pub struct LocConfig {
    pub span: Span,
    pub handle: PlacementHandle,
    /// Region size in bytes; 0 picks the device's reclaim unit (16 MiB without one).
    pub region_bytes: u64,
    pub eviction: RegionEviction,
    /// Objects read at least this many times since they were written are rewritten when their
    /// region is evicted (0 = never reinsert).
    pub reinsert_hits: u8,
    /// Deallocate a region when it is evicted. Off only to measure what trimming saves.
    pub trim: bool,
    /// Regions in use at start (0 = every whole region of the span); `resize` changes it.
    pub regions: u32,
    /// Leave a full region's write to the owner ([`Engine::take_write`]), to do without its
    /// lock, instead of writing it inside `set`. Only for owners that take every write.
    pub defer_seals: bool,
}

impl LocConfig {
    pub fn new(span: Span, handle: PlacementHandle) -> LocConfig {
        LocConfig {
            span,
            handle,
            region_bytes: 0,
            eviction: RegionEviction::Fifo,
            reinsert_hits: 2,
            trim: true,
            regions: 0,
            defer_seals: false,
        }
    }
}

/// Where an object is: DRAM index entry.
#[derive(Clone, Copy, Debug)]
struct Slot {
    region: u32,
    offset: u32,
    len: u32,
    hits: u8,
}

/// A region sealed but not yet written (see [`LocConfig::defer_seals`]).
struct Sealing {
    region: u32,
    buf: Arc<Vec<u8>>,
    state: Arc<SealState>,
}

#[derive(Default)]
struct SealState {
    phase: Mutex<SealPhase>,
    done: Condvar,
}

#[derive(Default)]
enum SealPhase {
    /// Nobody has taken the write yet.
    #[default]
    Waiting,
    /// The owner is writing it (without its lock).
    Writing,
    Written,
    /// The owner's write failed (the error, until `settle` takes it).
    Failed(Option<Error>),
}

fn lock_phase(s: &SealState) -> MutexGuard<'_, SealPhase> {
    s.phase.lock().unwrap_or_else(|e| e.into_inner())
}

/// A region's write [`Engine::take_write`] hands to the owner: [`RegionWrite::write`] it
/// with the owner's lock released, then call [`Engine::wrote`] under it.
pub struct RegionWrite {
    span: Span,
    at: u64,
    buf: Arc<Vec<u8>>,
    handle: PlacementHandle,
    state: Arc<SealState>,
}

impl RegionWrite {
    /// Writes the region (through the device's lock, not the owner's) and says it is done,
    /// before the owner's lock is taken again: a `settle` waiting under it goes on.
    pub fn write(&self) {
        let r = self.span.write(self.at, &self.buf, self.handle);
        let mut phase = lock_phase(&self.state);
        *phase = match r {
            Ok(()) => SealPhase::Written,
            Err(e) => SealPhase::Failed(Some(e)),
        };
        self.state.done.notify_all();
    }
}

/// The large-object cache.
pub struct Loc {
    span: Span,
    /// Reads of the span without the device's lock ([`Engine::lookup`]), if it has them.
    reads: Option<SpanReads>,
    /// Per region: bumped each time its space is evicted (or the index replaced), so a read
    /// planned before that is never used after it.
    generations: Vec<u64>,
    handle: PlacementHandle,
    region_bytes: u64,
    block: u64,
    /// A sealed region's write is padded to a multiple of this: the whole region on a device
    /// with reclaim units (see the module's comment), a block otherwise.
    seal_unit: u64,
    eviction: RegionEviction,
    reinsert_hits: u8,
    trim: bool,
    /// Key hash → slot. Keys themselves are on flash and compared on every read.
    index: HashMap<u64, Slot>,
    /// Per region, the hashes of the objects appended to it since it was last evicted (some
    /// since deleted or replaced): evicting a region looks at its own objects, not at the
    /// whole index under the owner's lock (a 256 MiB log of 4 KiB objects holds 65,536).
    region_keys: Vec<Vec<u64>>,
    /// Regions `0..active` are in use; the span may hold more (room to grow).
    active: u32,
    max_regions: u32,
    free: VecDeque<u32>,
    /// Sealed regions in the order they were sealed.
    sealed: VecDeque<u32>,
    /// Last read of any object in each region (LRU eviction).
    last_access: Vec<u64>,
    open: u32,
    buf: Vec<u8>,
    defer_seals: bool,
    /// The region sealed last, while its write is still to be done or under way: its objects
    /// are read from this buffer, and it is not in `sealed` (so never evicted) until
    /// [`Loc::settle`]. At most one.
    sealing: Option<Sealing>,
    tick: u64,
    stats: EngineStats,
    /// Regions written (sealed) and evicted to make room: how the log cycles.
    regions_sealed: u64,
    regions_evicted: u64,
}

/// A saved log state, checked, before it replaces the engine's.
struct Saved {
    active: u32,
    open: u32,
    tick: u64,
    free: VecDeque<u32>,
    sealed: VecDeque<u32>,
    last_access: Vec<u64>,
    buf: Vec<u8>,
    index: HashMap<u64, Slot>,
}

/// Without a reclaim unit to follow, regions of 16 MiB as in CacheLib's BlockCache.
const DEFAULT_REGION: u64 = 16 << 20;

impl Loc {
    pub fn new(config: LocConfig) -> Result<Loc> {
        let geo = config.span.check("large-object cache")?;
        let block = u64::from(geo.block_size);
        let region_bytes = match config.region_bytes {
            0 if geo.reclaim_unit_bytes > 0 => geo.reclaim_unit_bytes,
            0 => DEFAULT_REGION,
            r => r,
        };
        if !region_bytes.is_multiple_of(block) || region_bytes > u64::from(u32::MAX) {
            return Err(Error::Config(format!(
                "large-object cache: region of {region_bytes} bytes must be a multiple of the \
                 {block}-byte block and below 4 GiB"
            )));
        }
        if geo.reclaim_unit_bytes > 0
            && (!region_bytes.is_multiple_of(geo.reclaim_unit_bytes)
                || !config.span.offset.is_multiple_of(geo.reclaim_unit_bytes))
        {
            return Err(Error::Config(format!(
                "large-object cache: regions of {region_bytes} bytes at offset {} are not aligned \
                 to the device's {}-byte reclaim unit",
                config.span.offset, geo.reclaim_unit_bytes
            )));
        }
        geo.check_handle(config.handle)?;
        let max_regions = u32::try_from(config.span.len / region_bytes)
            .map_err(|_| Error::Config("large-object cache: too many regions".into()))?;
        let active = if config.regions == 0 {
            max_regions
        } else {
            config.regions
        };
        if active < 2 || active > max_regions {
            return Err(Error::Config(format!(
                "large-object cache: {active} regions of {region_bytes} bytes; the span holds \
                 {max_regions} and the log needs at least 2"
            )));
        }
        let mut loc = Loc {
            reads: config.span.concurrent_reads(),
            generations: vec![0; max_regions as usize],
            span: config.span,
            handle: config.handle,
            region_bytes,
            block,
            seal_unit: if geo.reclaim_unit_bytes > 0 {
                region_bytes
            } else {
                block
            },
            eviction: config.eviction,
            reinsert_hits: config.reinsert_hits,
            trim: config.trim,
            index: HashMap::new(),
            region_keys: vec![Vec::new(); max_regions as usize],
            active,
            max_regions,
            free: (1..active).collect(),
            sealed: VecDeque::new(),
            last_access: vec![0; max_regions as usize],
            open: 0,
            buf: Vec::with_capacity(region_bytes as usize),
            defer_seals: config.defer_seals,
            sealing: None,
            tick: 0,
            stats: EngineStats::default(),
            regions_sealed: 0,
            regions_evicted: 0,
        };
        loc.open = 0;
        Ok(loc)
    }

    /// A log built from `config` with the index [`Engine::save`] wrote (see `persist`).
    pub fn restore(config: LocConfig, r: &mut dyn Read) -> Result<Loc> {
        let mut loc = Loc::new(config)?;
        loc.load(r)?;
        Ok(loc)
    }

    fn shape(&self) -> Shape {
        Shape::of_span(&self.span)
            .with("region bytes", self.region_bytes)
            .with("regions in the span", u64::from(self.max_regions))
    }

    /// Decodes a saved state and checks it describes a log of this shape: every region named
    /// once, every object inside a sealed region or the open one's buffer.
    fn decode_state(&self, d: &mut Dec) -> Result<Saved> {
        let active = d.u32("regions in use")?;
        let open = d.u32("open region")?;
        let tick = d.u64("clock")?;
        let free: VecDeque<u32> = d.u32s("free regions")?.into();
        let sealed: VecDeque<u32> = d.u32s("sealed regions")?.into();
        let last_access = d.u64s("region access times")?;
        let buf = d.bytes("open region buffer")?.to_vec();
        let n = d.u64("object count")?;
        if !(2..=self.max_regions).contains(&active) || open >= active {
            return Err(d.bad(format!("{active} regions in use, region {open} open")));
        }
        let mut seen = vec![false; active as usize];
        for &r in free.iter().chain(&sealed).chain([&open]) {
            if r >= active || std::mem::replace(&mut seen[r as usize], true) {
                return Err(d.bad(format!("region {r} listed twice or past the end")));
            }
        }
        if last_access.len() != self.max_regions as usize || buf.len() as u64 > self.region_bytes {
            return Err(d.bad("region access times or open buffer of the wrong size"));
        }
        let mut sealed_flags = vec![false; active as usize];
        sealed.iter().for_each(|&r| sealed_flags[r as usize] = true);
        let mut index = HashMap::with_capacity(n.min(1 << 24) as usize);
        for _ in 0..n {
            let h = d.u64("object hash")?;
            let slot = Slot {
                region: d.u32("object region")?,
                offset: d.u32("object offset")?,
                len: d.u32("object length")?,
                hits: d.u8("object hits")?,
            };
            let end = u64::from(slot.offset) + u64::from(slot.len);
            let room = match sealed_flags.get(slot.region as usize) {
                _ if slot.region == open => buf.len() as u64,
                Some(true) => self.region_bytes,
                _ => 0,
            };
            if end > room || (slot.len as usize) < object::HEADER {
                return Err(d.bad(format!(
                    "an object at {}:{} outside the log",
                    slot.region, slot.offset
                )));
            }
            index.insert(h, slot);
        }
        Ok(Saved {
            active,
            open,
            tick,
            free,
            sealed,
            last_access,
            buf,
            index,
        })
    }

    /// Region size in bytes.
    pub fn region_bytes(&self) -> u64 {
        self.region_bytes
    }

    /// Regions in use.
    pub fn regions(&self) -> u32 {
        self.active
    }

    /// Largest object (key + value) the log stores.
    pub fn max_object(&self) -> usize {
        self.region_bytes as usize - object::HEADER
    }

    fn region_offset(&self, region: u32) -> u64 {
        u64::from(region) * self.region_bytes
    }

    /// Reads the encoded object at `slot` into a fresh buffer.
    fn read_slot(&self, slot: Slot) -> Result<Vec<u8>> {
        let (o, l) = (slot.offset as usize, slot.len as usize);
        if slot.region == self.open {
            return Ok(self.buf[o..o + l].to_vec());
        }
        if let Some(s) = self.sealing.as_ref().filter(|s| s.region == slot.region) {
            return Ok(s.buf[o..o + l].to_vec());
        }
        let start = self.region_offset(slot.region) + u64::from(slot.offset);
        let first = start / self.block * self.block;
        let end = (start + u64::from(slot.len)).div_ceil(self.block) * self.block;
        let mut tmp = vec![0; (end - first) as usize];
        self.span.read(first, &mut tmp)?;
        let skip = (start - first) as usize;
        tmp.drain(..skip);
        tmp.truncate(slot.len as usize);
        Ok(tmp)
    }

    fn remove(&mut self, h: u64) -> bool {
        let gone = self.index.remove(&h).is_some();
        if gone {
            self.stats.objects -= 1;
        }
        gone
    }

    /// Appends an encoded object to the open region, sealing it first when it is full.
    fn append(&mut self, h: u64, key: &[u8], value: &[u8]) -> Result<()> {
        let len = object::encoded_len(key, value);
        if self.buf.len() + len > self.region_bytes as usize {
            self.seal()?;
            self.open_region()?;
        }
        let offset = self.buf.len() as u32;
        object::encode(key, value, &mut self.buf);
        self.region_keys[self.open as usize].push(h);
        self.index.insert(
            h,
            Slot {
                region: self.open,
                offset,
                len: len as u32,
                hits: 0,
            },
        );
        self.stats.objects += 1;
        Ok(())
    }

    /// Writes the open region's buffer to flash, padded to whole blocks (to the whole region
    /// on a device with reclaim units); with `defer_seals`, leaves the write to the owner (the
    /// previous one settled first).
    fn seal(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            // Nothing to write: the region stays open.
            return Ok(());
        }
        self.settle()?;
        let padded = (self.buf.len() as u64).div_ceil(self.seal_unit) * self.seal_unit;
        self.buf.resize(padded as usize, 0);
        self.stats.flash_bytes_written += padded;
        self.regions_sealed += 1;
        self.last_access[self.open as usize] = self.tick;
        if self.defer_seals {
            let buf = std::mem::replace(
                &mut self.buf,
                Vec::with_capacity(self.region_bytes as usize),
            );
            self.sealing = Some(Sealing {
                region: self.open,
                buf: Arc::new(buf),
                state: Arc::new(SealState::default()),
            });
            return Ok(());
        }
        self.span
            .write(self.region_offset(self.open), &self.buf, self.handle)?;
        self.sealed.push_back(self.open);
        self.buf.clear();
        Ok(())
    }

    /// Completes the pending region write, if any: waits for the owner's, or writes it here
    /// if the owner has not taken it. Written, the region joins the sealed ones; failed, its
    /// objects are dropped and its space is free again, and the error is returned.
    fn settle(&mut self) -> Result<()> {
        let Some(s) = self.sealing.take() else {
            return Ok(());
        };
        let taken = {
            let mut phase = lock_phase(&s.state);
            let taken = !matches!(*phase, SealPhase::Waiting);
            if !taken {
                *phase = SealPhase::Writing;
            }
            taken
        };
        let result = if taken {
            let mut phase = lock_phase(&s.state);
            while matches!(*phase, SealPhase::Writing) {
                phase = s.state.done.wait(phase).unwrap_or_else(|e| e.into_inner());
            }
            match &mut *phase {
                SealPhase::Failed(e) => Err(e.take().unwrap_or_else(|| {
                    Error::Config("large-object cache: a region write failed".into())
                })),
                _ => Ok(()),
            }
        } else {
            self.span
                .write(self.region_offset(s.region), &s.buf, self.handle)
        };
        match result {
            Ok(()) => {
                self.sealed.push_back(s.region);
                Ok(())
            }
            Err(e) => {
                self.evict(s.region, false)?;
                self.free.push_back(s.region);
                Err(e)
            }
        }
    }

    /// Makes a region the open one: a free one, or an evicted one with its hot objects
    /// reinserted.
    fn open_region(&mut self) -> Result<()> {
        if let Some(r) = self.free.pop_front() {
            self.open = r;
            return Ok(());
        }
        if self.sealed.is_empty() {
            // Only the region being written could make room.
            self.settle()?;
        }
        let victim = match self.eviction {
            RegionEviction::Fifo => self.sealed.pop_front(),
            RegionEviction::Lru => {
                let pos = (0..self.sealed.len())
                    .min_by_key(|&i| self.last_access[self.sealed[i] as usize]);
                pos.and_then(|i| self.sealed.remove(i))
            }
        }
        .ok_or_else(|| Error::Config("large-object cache has no region to evict".into()))?;
        let keep = self.evict(victim, true)?;
        self.regions_evicted += 1;
        self.open = victim;
        self.buf.clear();
        for (key, value) in keep {
            let h = key_hash(&key);
            self.append(h, &key, &value)?;
        }
        Ok(())
    }

    /// Drops every object of `region` from the index and deallocates it. With `reinsert`,
    /// returns the hot objects (at most half a region) to write again.
    fn evict(&mut self, region: u32, reinsert: bool) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        // Before anything of it changes: reads planned in it are void from here.
        self.generations[region as usize] += 1;
        let threshold = self.reinsert_hits;
        let mut hot = Vec::new();
        let mut removed = 0;
        for h in std::mem::take(&mut self.region_keys[region as usize]) {
            // A hash twice in the list (rewritten in the region) is removed at its first.
            let Some(s) = self.index.get(&h).copied().filter(|s| s.region == region) else {
                continue;
            };
            self.index.remove(&h);
            removed += 1;
            if reinsert && threshold > 0 && s.hits >= threshold {
                hot.push((h, s));
            }
        }
        self.stats.objects -= removed;
        let mut keep = Vec::new();
        if !hot.is_empty() {
            let mut data = vec![0; self.region_bytes as usize];
            self.span.read(self.region_offset(region), &mut data)?;
            let budget = self.region_bytes as usize / 2;
            let mut used = 0;
            hot.sort_by_key(|(_, s)| std::cmp::Reverse(s.hits));
            for (h, s) in hot {
                let at = s.offset as usize;
                match object::decode(&data[at..(at + s.len as usize).min(data.len())]) {
                    Ok(d) if key_hash(d.key) == h && used + d.len <= budget => {
                        used += d.len;
                        keep.push((d.key.to_vec(), d.value.to_vec()));
                    }
                    Ok(_) => {}
                    Err(_) => self.stats.corrupt_reads += 1,
                }
            }
        }
        self.stats.evictions += removed - keep.len() as u64;
        if self.trim {
            self.span
                .trim(self.region_offset(region), self.region_bytes)?;
        }
        Ok(keep)
    }

    /// Changes the number of regions in use to `bytes / region_bytes`. Shrinking evicts the
    /// regions past the new end (no reinsertion) and deallocates them.
    pub fn resize(&mut self, bytes: u64) -> Result<()> {
        // The region being written may be past the new end, its space given away after this.
        self.settle()?;
        let n = u32::try_from(bytes / self.region_bytes).unwrap_or(u32::MAX);
        if n < 2 || n > self.max_regions {
            return Err(Error::Config(format!(
                "large-object cache: {bytes} bytes is {n} regions of {}; between 2 and {} fit",
                self.region_bytes, self.max_regions
            )));
        }
        if n > self.active {
            self.free.extend(self.active..n);
        } else if n < self.active {
            self.free.retain(|&r| r < n);
            let dropped: Vec<u32> = self.sealed.iter().copied().filter(|&r| r >= n).collect();
            self.sealed.retain(|&r| r < n);
            for r in dropped {
                self.evict(r, false)?;
            }
            if self.open >= n {
                let open = self.open;
                self.buf.clear();
                self.evict(open, false)?;
                self.active = n;
                self.open_region()?;
            }
        }
        self.active = n;
        Ok(())
    }
}

impl Loc {
    /// A get, not counted: the object read under the lock.
    fn get_now(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let h = key_hash(key);
        let Some(slot) = self.index.get(&h).copied() else {
            return Ok(None);
        };
        let bytes = self.read_slot(slot)?;
        Ok(self.found(h, key, slot, &bytes))
    }

    /// The value of `key` in `bytes`, the object read from `slot`; counts the hit.
    fn found(&mut self, h: u64, key: &[u8], slot: Slot, bytes: &[u8]) -> Option<Vec<u8>> {
        match object::decode(bytes) {
            Ok(d) if d.key == key => {
                let value = d.value.to_vec();
                self.tick += 1;
                self.last_access[slot.region as usize] = self.tick;
                if let Some(s) = self.index.get_mut(&h) {
                    s.hits = s.hits.saturating_add(1);
                }
                self.stats.hits += 1;
                Some(value)
            }
            // Another key with the same 64-bit hash: a miss, never its value.
            Ok(_) => None,
            Err(_) => {
                self.stats.corrupt_reads += 1;
                self.remove(h);
                None
            }
        }
    }

    fn stamp(&self, h: u64, slot: Slot) -> Stamp {
        Stamp {
            hash: h,
            region: slot.region,
            offset: slot.offset,
            len: slot.len,
            generation: self.generations[slot.region as usize],
        }
    }
}

impl Engine for Loc {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.stats.gets += 1;
        self.get_now(key)
    }

    /// Objects in sealed regions are read without the lock when the device can; the open
    /// region's are in its buffer.
    fn lookup(&mut self, key: &[u8]) -> Result<Lookup> {
        let h = key_hash(key);
        let (Some(reads), Some(&slot)) = (&self.reads, self.index.get(&h)) else {
            return Ok(Lookup::Done(self.get(key)?));
        };
        if slot.region == self.open
            || self
                .sealing
                .as_ref()
                .is_some_and(|s| s.region == slot.region)
        {
            return Ok(Lookup::Done(self.get(key)?));
        }
        self.stats.gets += 1;
        let start = self.region_offset(slot.region) + u64::from(slot.offset);
        let first = start / self.block * self.block;
        let end = (start + u64::from(slot.len)).div_ceil(self.block) * self.block;
        Ok(Lookup::Read(PendingRead {
            reads: reads.clone(),
            at: first,
            extent: (end - first) as usize,
            skip: (start - first) as usize,
            len: slot.len as usize,
            stamp: self.stamp(h, slot),
        }))
    }

    fn finish(
        &mut self,
        key: &[u8],
        read: PendingRead,
        bytes: Result<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>> {
        let s = read.stamp;
        let still = self
            .index
            .get(&s.hash)
            .is_some_and(|&slot| self.stamp(s.hash, slot) == s);
        if !still || key_hash(key) != s.hash {
            // Moved, replaced, deleted or its region reused while it was read.
            return self.get_now(key);
        }
        let slot = self.index[&s.hash];
        Ok(self.found(s.hash, key, slot, &bytes?))
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.stats.sets += 1;
        let h = key_hash(key);
        self.remove(h);
        if key.len() > object::MAX_KEY
            || value.len() > u32::MAX as usize
            || object::encoded_len(key, value) > self.region_bytes as usize
        {
            self.stats.rejected_sets += 1;
            return Ok(false);
        }
        self.stats.app_bytes_written += (key.len() + value.len()) as u64;
        self.append(h, key, value)?;
        Ok(true)
    }

    fn take_write(&mut self) -> Option<RegionWrite> {
        let s = self.sealing.as_ref()?;
        let mut phase = lock_phase(&s.state);
        if !matches!(*phase, SealPhase::Waiting) {
            return None;
        }
        *phase = SealPhase::Writing;
        Some(RegionWrite {
            span: self.span.clone(),
            at: self.region_offset(s.region),
            buf: s.buf.clone(),
            handle: self.handle,
            state: s.state.clone(),
        })
    }

    fn wrote(&mut self, w: &RegionWrite) -> Result<()> {
        // Settled already (by a later seal, a resize) unless it is still the pending one.
        match &self.sealing {
            Some(s) if Arc::ptr_eq(&s.state, &w.state) => self.settle(),
            _ => Ok(()),
        }
    }

    fn settle(&mut self) -> Result<()> {
        Loc::settle(self)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.stats.deletes += 1;
        // A colliding key's entry goes too: it would only have been found by reading flash,
        // and dropping it costs one miss, never a wrong value.
        Ok(self.remove(key_hash(key)))
    }

    fn stats(&self) -> EngineStats {
        self.stats.clone()
    }

    fn parts(&self) -> Vec<PartStats> {
        vec![PartStats {
            name: "log".into(),
            capacity_bytes: u64::from(self.active) * self.region_bytes,
            bytes_written: self.stats.flash_bytes_written,
            log: Some(LogUnits {
                units: u64::from(self.active),
                units_written: self.regions_sealed,
                units_reclaimed: self.regions_evicted,
            }),
        }]
    }

    fn resize(&mut self, bytes: u64) -> Result<bool> {
        Loc::resize(self, bytes)?;
        Ok(true)
    }

    /// Saves the index and region order, and the open region's buffer (so saving writes no
    /// flash and wastes no region).
    fn save(&self, w: &mut dyn Write) -> Result<()> {
        if self.sealing.is_some() {
            return Err(Error::Persist(
                "large-object cache: a region write is pending (settle it first)".into(),
            ));
        }
        let mut e = Enc::default();
        e.u32(self.active);
        e.u32(self.open);
        e.u64(self.tick);
        e.u32s(self.free.iter().copied());
        e.u32s(self.sealed.iter().copied());
        e.u64s(&self.last_access);
        e.bytes(&self.buf);
        e.u64(self.index.len() as u64);
        for (&h, s) in &self.index {
            e.u64(h);
            e.u32(s.region);
            e.u32(s.offset);
            e.u32(s.len);
            e.u8(s.hits);
        }
        persist::write(w, Kind::Loc, &self.shape(), &e.0)
    }

    fn load(&mut self, r: &mut dyn Read) -> Result<()> {
        persist::check_fresh(Kind::Loc, &self.stats)?;
        let body = persist::read(r, Kind::Loc, &self.shape())?;
        let mut d = persist::decode(Kind::Loc, &body);
        let s = self.decode_state(&mut d)?;
        d.finish()?;
        let mut buf = s.buf;
        buf.reserve(self.region_bytes as usize - buf.len());
        self.active = s.active;
        self.open = s.open;
        self.tick = s.tick;
        self.free = s.free;
        self.sealed = s.sealed;
        self.last_access = s.last_access;
        self.buf = buf;
        self.stats.objects = s.index.len() as u64;
        self.index = s.index;
        self.region_keys.iter_mut().for_each(Vec::clear);
        for (&h, slot) in &self.index {
            self.region_keys[slot.region as usize].push(h);
        }
        // Another index: no read planned against the old one is used.
        self.generations.iter_mut().for_each(|g| *g += 1);
        Ok(())
    }

    fn dram_bytes(&self) -> usize {
        // The index as hashbrown lays it out: one (key, value) pair and one control byte per
        // bucket; plus the open region's buffer and the per-region bookkeeping.
        let entry = std::mem::size_of::<(u64, Slot)>() + 1;
        self.index.capacity() * entry
            + self.buf.capacity()
            + (self.last_access.capacity() + self.generations.capacity()) * 8
            + self
                .region_keys
                .iter()
                .map(|k| k.capacity() * 8)
                .sum::<usize>()
            + self.sealing.as_ref().map_or(0, |s| s.buf.capacity())
            + (self.free.capacity() + self.sealed.capacity()) * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::share;
    use crate::DataSim;
    use lachesis_device::nvme::logpage::RuhType;
    use lachesis_device::sim::SimConfig;

    /// Every object the index holds is in the open region or a sealed one, and in its
    /// region's key list: evicting a region by its list leaves none of its objects behind.
    fn check(l: &Loc) {
        for (&h, s) in &l.index {
            assert!(s.region == l.open || l.sealed.contains(&s.region));
            assert!(l.region_keys[s.region as usize].contains(&h));
        }
        assert_eq!(l.stats.objects, l.index.len() as u64);
    }

    #[test]
    fn evicting_a_region_removes_exactly_its_objects() {
        let sim = SimConfig {
            pages_per_erase_block: 16,
            erase_blocks_per_ru: 1,
            rus_per_group: 64,
            overprovisioning: 0.25,
            handles: vec![RuhType::InitiallyIsolated; 4],
            ..SimConfig::default()
        };
        let span = Span {
            device: share(DataSim::new(sim).unwrap()),
            offset: 0,
            len: 8 * 65536,
        };
        let mut config = LocConfig::new(span, PlacementHandle(0));
        config.reinsert_hits = 1;
        let mut l = Loc::new(config).unwrap();
        let mut x: u64 = 1;
        for _ in 0..5000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (x >> 33) % 200;
            let key = format!("k{k}");
            match (x >> 20) % 10 {
                0 => {
                    l.delete(key.as_bytes()).unwrap();
                }
                1..=5 => {
                    let len = 500 + ((x >> 40) % 3000) as usize;
                    l.set(key.as_bytes(), &vec![k as u8; len]).unwrap();
                }
                _ => {
                    if let Some(v) = l.get(key.as_bytes()).unwrap() {
                        assert!(v.iter().all(|&b| b == k as u8));
                    }
                }
            }
            check(&l);
        }
        assert!(l.regions_evicted > 20, "{} evicted", l.regions_evicted);
    }
}
