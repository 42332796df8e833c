//! FairyWREN (McAllister et al., *FairyWREN: A Sustainable Cache for Emerging Write-Read-Erase
//! Flash Interfaces*, OSDI '24; §4-§5): Kangaroo's log-over-sets design rebuilt for
//! write-read-erase flash, where the cache, not the device, reclaims erase units.
//!
//! - FwLog (`fwlog.rs`): 5% of the erase units, 64 slices sharing each segment, a primary and
//!   an overflow segment buffer; Kangaroo's partitioned index finds every log object of a set.
//! - FwSets (`fwsets.rs`, `store.rs`): sets are not overwritten but appended, one page per
//!   subset, to a log-structured store of erase units with over-provisioning; each set is a
//!   hot subset (new objects, rewritten on every update) and a cold subset (objects that were
//!   read, rewritten every `cold_every`-th update).
//! - Nest packing (this file): whenever a set is written, for whatever reason (garbage
//!   collection moving it out of a victim unit, FwLog reclaiming its oldest unit, a purge),
//!   every FwLog object of that set goes into it in the same write. Garbage collection of
//!   FwSets thus admits objects for free, and by the time FwLog reclaims a unit most of its
//!   objects have already left it. Reclaimed units are trimmed whole (`dev::Span::trim`), so an
//!   FDP device never relocates a page (DLWA 1).
//!
//! Consistency: a key's newest copy is in FwLog if FwLog indexes it, else in its set; a set
//! holds a key in at most one subset. An object leaves FwLog only by being merged into its set,
//! where it replaces the older copy, so no lookup sees an older value after a set or delete.
//! Dead copies left on flash are never found: an index entry names a page and a 9-bit tag,
//! and when a removed key shares both with a live entry, the whole set is packed at once.
//! Every object is checksummed; damage reads as a miss.
//!
//! `analytic.rs` is §4.4's FIFO+ model of erase-unit size vs write amplification.

pub mod analytic;
mod config;
mod fwlog;
mod fwsets;
pub mod store;

pub use config::{FairyWrenConfig, Layout, MIN_EUS, SETS_RESERVE};
pub use fwsets::HOT;
pub use store::Victims;

use fwlog::{Append, FwLog};
use fwsets::FwSets;
use store::Store;

use crate::dev::Span;
use crate::engine::{named_counters, Engine, EngineStats, LogUnits, PartStats};
use crate::kangaroo::admission::PreFlash;
use crate::kangaroo::flusher::resolve_entries;
use crate::kangaroo::index::{Entry, Index, SlotId};
use crate::kangaroo::page::{self, Obj, PAGE, SET_CAPACITY};
use crate::kangaroo::rrip::{self, Evicted, FAR, LONG, NEAR};
use crate::kangaroo::{tag_of, SetChurn};
use crate::object::key_hash;
use crate::persist::{self, Kind, Shape};
use crate::Result;
use lachesis_device::PlacementHandle;
use std::io::{Read, Write};

/// FairyWREN's own counters, beyond [`EngineStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FairyWrenStats {
    pub log_segment_writes: u64,
    pub log_eu_erases: u64,
    pub set_page_writes: u64,
    pub set_eu_erases: u64,
    pub preflash_rejected: u64,
    /// Set writes by cause: moving a set out of a unit being reclaimed (garbage collection),
    /// FwLog reclaiming its oldest unit, a purge (delete, damaged or ambiguous log entries).
    pub gc_updates: u64,
    pub log_updates: u64,
    pub purge_updates: u64,
    /// Updates that merged and re-split the hot and cold subsets.
    pub resplits: u64,
    /// Log objects moved into sets, and how many of those moves rode on garbage collection
    /// and on FwLog reclaiming a unit.
    pub objects_packed: u64,
    pub objects_packed_by_gc: u64,
    pub objects_packed_by_log: u64,
    /// Cold subsets garbage collection moved: repacked (the set re-split with its log
    /// objects, as FwLog's own updates do) or copied as they were (when FwSets was too short
    /// of free units to write the hot subset too).
    pub gc_cold_repacks: u64,
    pub gc_cold_copies: u64,
    /// FwSets by stream: pages written, erase units reclaimed, and pages still live in those
    /// units when garbage collection took them (moved, or dropped if FwSets was full).
    pub hot_page_writes: u64,
    pub cold_page_writes: u64,
    pub hot_eu_erases: u64,
    pub cold_eu_erases: u64,
    pub hot_victim_live_pages: u64,
    pub cold_victim_live_pages: u64,
    /// FwLog objects dropped by threshold admission (and their bytes as they would take on
    /// a set page), and those readmitted because they were read while in FwLog.
    pub objects_dropped: u64,
    pub objects_dropped_bytes: u64,
    pub objects_readmitted: u64,
    /// Objects dropped because FwSets had no free unit (the reserve should prevent it).
    pub emergency_evictions: u64,
    /// Of the set evictions (`set_evicted_*` below), those at hot/cold re-splits.
    pub resplit_evicted_objects: u64,
    pub resplit_evicted_bytes: u64,
    /// What FwSets' rewrites took in from FwLog, wrote (every subset page) and evicted.
    #[serde(flatten)]
    pub churn: SetChurn,
}

/// DRAM by structure, in bytes, measured from their allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DramBreakdown {
    pub log_entries: usize,
    pub log_buckets: usize,
    /// FwSets' page of each subset and update counter of each set.
    pub set_index: usize,
    /// The store's owner of each page and its per-unit tables (live pages, stream, age).
    pub store_owners: usize,
    pub set_blooms: usize,
    pub set_hit_bits: usize,
    /// The two segment buffers: fixed, independent of the object count.
    pub buffers: usize,
}

impl DramBreakdown {
    pub fn per_object_structures(&self) -> usize {
        self.log_entries
            + self.log_buckets
            + self.set_index
            + self.store_owners
            + self.set_blooms
            + self.set_hit_bits
    }

    pub fn total(&self) -> usize {
        self.per_object_structures() + self.buffers
    }

    /// Bytes by structure, named as in cachebench's `layout` (`dram_*`).
    pub fn named(&self) -> [(&'static str, u64); 7] {
        [
            ("dram_log_entries", self.log_entries as u64),
            ("dram_log_buckets", self.log_buckets as u64),
            ("dram_set_index", self.set_index as u64),
            ("dram_store_owners", self.store_owners as u64),
            ("dram_set_blooms", self.set_blooms as u64),
            ("dram_set_hit_bits", self.set_hit_bits as u64),
            ("dram_buffers", self.buffers as u64),
        ]
    }
}

/// Free FwSets units garbage collection needs to repack a cold subset rather than copy it:
/// a repack writes the hot subset as well, and each stream may have to open a unit.
const GC_REPACK_FREE_EUS: u32 = 2;

/// Why a set is rewritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// Garbage collection moves this subset out of the unit being reclaimed.
    Gc(u32),
    /// FwLog reclaims the unit holding some of this set's objects.
    Log,
    /// Keys must go (delete, a replaced copy that cannot be told apart on flash).
    Purge,
}

#[derive(Clone, Copy)]
struct Loc {
    h: u64,
    set: u32,
    slice: u32,
    bucket: u32,
    tag: u16,
}

/// What FwLog holds for a key.
struct Found {
    hit: Option<(SlotId, Entry, Vec<u8>)>,
    /// Entries with the key's tag whose page failed its checksum: they may be the key.
    unverifiable: usize,
}

/// The FairyWREN engine. See the module documentation.
pub struct FairyWren {
    span: Span,
    layout: Layout,
    log: FwLog,
    index: Index,
    store: Store,
    sets: FwSets,
    preflash: PreFlash,
    cold_every: u8,
    threshold: u32,
    /// Objects read while in a reclaimed FwLog unit, waiting to go back in.
    readmits: Vec<Obj>,
    stats: EngineStats,
    f: FairyWrenStats,
}

impl FairyWren {
    /// FwLog's units first, then FwSets'. Every unit is trimmed: an engine built on a device
    /// another one wrote starts empty and never reads what it did not write.
    pub fn new(config: FairyWrenConfig) -> Result<FairyWren> {
        let fw = Self::open(config)?;
        let l = &fw.layout;
        fw.span
            .trim(0, u64::from(l.log_eus + l.set_eus) * l.eu_bytes())?;
        Ok(fw)
    }

    /// An empty engine over `config.span` that does not trim it: for a span its owner has just
    /// deallocated (a hybrid's small-object part) or for [`FairyWren::restore`]. Nothing of
    /// what the span holds is read without an index entry naming it.
    pub fn open(config: FairyWrenConfig) -> Result<FairyWren> {
        let layout = Layout::new(&config)?;
        let (log, index, store, sets) = Self::parts(
            &layout,
            config.log_handle,
            config.hot_handle,
            config.cold_handle,
        );
        Ok(FairyWren {
            log,
            index,
            store,
            sets,
            preflash: PreFlash::new(config.admit_probability, config.seed),
            cold_every: config.cold_every,
            threshold: config.threshold,
            readmits: Vec::new(),
            span: config.span,
            layout,
            stats: EngineStats::default(),
            f: FairyWrenStats::default(),
        })
    }

    fn parts(
        layout: &Layout,
        log_handle: PlacementHandle,
        hot_handle: PlacementHandle,
        cold_handle: PlacementHandle,
    ) -> (FwLog, Index, Store, FwSets) {
        let log_bytes = u64::from(layout.log_eus) * layout.eu_bytes();
        (
            FwLog::new(0, layout, log_handle),
            Index::new(
                layout.slices,
                layout.buckets_per_slice,
                layout.tables_per_slice,
                layout.slots_per_table,
            ),
            Store::new(
                log_bytes,
                layout.set_eus,
                layout.eu_pages,
                vec![hot_handle, cold_handle],
            )
            .with_victims(layout.victims),
            FwSets::new(
                layout.sets,
                layout.cold_pages,
                layout.bloom_bits,
                layout.hit_bits,
            ),
        )
    }

    /// A cache built from `config` with the index [`Engine::save`] wrote (`crate::persist`).
    pub fn restore(config: FairyWrenConfig, r: &mut dyn Read) -> Result<FairyWren> {
        let mut fw = Self::open(config)?;
        fw.load(r)?;
        Ok(fw)
    }

    fn shape(&self) -> Shape {
        let l = &self.layout;
        Shape::of_span(&self.span)
            .with("erase unit pages", u64::from(l.eu_pages))
            .with("FwLog erase units", u64::from(l.log_eus))
            .with("FwSets erase units", u64::from(l.set_eus))
            .with("FwLog segment pages", u64::from(l.segment_pages))
            .with("FwLog slices", u64::from(l.slices))
            .with("FwSets sets", u64::from(l.sets))
            .with("FwSets cold pages", u64::from(l.cold_pages))
            .with(
                "FwLog index tables per slice",
                u64::from(l.tables_per_slice),
            )
            .with("FwLog index slots per table", l.slots_per_table as u64)
            .with("Bloom bits per subset", l.bloom_bits as u64)
            .with("hit bits per subset", l.hit_bits as u64)
            .with("FwSets victim policy", l.victims.code())
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn fairywren_stats(&self) -> FairyWrenStats {
        FairyWrenStats {
            log_segment_writes: self.log.segment_writes,
            log_eu_erases: self.log.eu_erases,
            set_page_writes: self.store.page_writes,
            set_eu_erases: self.store.erases,
            hot_page_writes: self.store.stream_writes[0],
            cold_page_writes: self.store.stream_writes[1],
            hot_eu_erases: self.store.stream_erases[0],
            cold_eu_erases: self.store.stream_erases[1],
            hot_victim_live_pages: self.store.stream_victim_live[0],
            cold_victim_live_pages: self.store.stream_victim_live[1],
            ..self.f.clone()
        }
    }

    pub fn log_objects(&self) -> u64 {
        self.index.len()
    }

    pub fn dram(&self) -> DramBreakdown {
        let (entries, buckets) = self.index.dram_bytes();
        let (locs, blooms, hits) = self.sets.dram_bytes();
        DramBreakdown {
            log_entries: entries,
            log_buckets: buckets,
            set_index: locs,
            store_owners: self.store.dram_bytes(),
            set_blooms: blooms,
            set_hit_bits: hits,
            buffers: self.log.dram_bytes() + self.readmits.capacity() * std::mem::size_of::<Obj>(),
        }
    }

    /// Offset within the span of the page holding subset `sub` ([`HOT`], or cold page
    /// `1..=cold_pages`) of `key`'s set, if it has one: for tests that damage flash.
    pub fn subset_offset(&self, key: &[u8], sub: u32) -> Option<u64> {
        let at = self.sets.loc(self.locate(key).set, sub);
        (at != store::NONE).then(|| {
            u64::from(self.layout.log_eus) * self.layout.eu_bytes() + u64::from(at) * PAGE as u64
        })
    }

    /// What the cache holds now, read from flash: FwSets' subset pages, objects and their
    /// bytes on the page (header included) by stream, and FwLog's objects. A subset that
    /// cannot be read counts as empty. For cachebench's `layout`: objects per page explain
    /// the miss ratio beside Kangaroo's.
    fn held(&self) -> Vec<(String, u64)> {
        let (mut pages, mut objects, mut bytes) = ([0u64; 2], [0u64; 2], [0u64; 2]);
        for set in 0..self.layout.sets {
            for sub in 0..self.sets.subsets() {
                if self.sets.loc(set, sub) == store::NONE {
                    continue;
                }
                let Ok(read) = self.sets.read(&self.store, &self.span, set, sub) else {
                    continue;
                };
                let st = fwsets::stream(sub);
                pages[st] += 1;
                objects[st] += read.objs.len() as u64;
                bytes[st] += read.objs.iter().map(|o| o.kset_cost() as u64).sum::<u64>();
            }
        }
        [
            ("held_hot_pages", pages[0]),
            ("held_hot_objects", objects[0]),
            ("held_hot_bytes", bytes[0]),
            ("held_cold_pages", pages[1]),
            ("held_cold_objects", objects[1]),
            ("held_cold_bytes", bytes[1]),
            ("held_log_objects", self.index.len()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Moves every FwLog object into its set now, as if FwLog had reclaimed every unit.
    pub fn pack_log(&mut self) -> Result<()> {
        for set in 0..self.layout.sets {
            let (slice, bucket) = self.slice_bucket(set);
            if self.index.iter(slice, bucket).next().is_some() {
                self.ensure_space()?;
                self.update(set, Why::Log, &[])?;
            }
        }
        Ok(())
    }

    fn set_of(&self, h: u64) -> u32 {
        ((u128::from(h) * u128::from(self.layout.sets)) >> 64) as u32
    }

    fn slice_bucket(&self, set: u32) -> (u32, u32) {
        (set % self.layout.slices, set / self.layout.slices)
    }

    fn locate(&self, key: &[u8]) -> Loc {
        let h = key_hash(key);
        let set = self.set_of(h);
        let (slice, bucket) = self.slice_bucket(set);
        Loc {
            h,
            set,
            slice,
            bucket,
            tag: tag_of(h),
        }
    }

    fn log_find(&self, loc: Loc, key: &[u8]) -> Result<Found> {
        let mut found = Found {
            hit: None,
            unverifiable: 0,
        };
        for (slot, e) in self.index.iter(loc.slice, loc.bucket) {
            if e.tag != loc.tag {
                continue;
            }
            let bytes = self.log.read_page(&self.span, loc.slice, e.page)?;
            let parsed = page::parse_klog(&bytes);
            if let Some(o) = parsed.objs.iter().find(|o| o.key == key) {
                found.hit = Some((slot, e, o.value.to_vec()));
                return Ok(found);
            }
            if parsed.corrupt {
                found.unverifiable += 1;
            }
        }
        Ok(found)
    }

    /// Takes `key` out of FwLog; returns whether it was there. A copy that stays on flash with
    /// a live entry of the same page and tag, or entries that cannot be read, make the whole
    /// set be packed (dropping `key`), so nothing dead can be found later.
    fn log_remove(&mut self, loc: Loc, key: &[u8]) -> Result<bool> {
        let f = self.log_find(loc, key)?;
        let present = f.hit.is_some();
        let mut pack = f.unverifiable > 0;
        if let Some((slot, e, _)) = f.hit {
            self.index.remove(loc.slice, loc.bucket, slot);
            if self.log.is_buffered(e.page) {
                self.log.remove_buffered(loc.slice, e.page, key);
            } else {
                pack |= self
                    .index
                    .iter(loc.slice, loc.bucket)
                    .any(|(_, s)| s.page == e.page && s.tag == e.tag);
            }
        }
        if pack {
            self.ensure_space()?;
            self.update(loc.set, Why::Purge, &[key.to_vec()])?;
        }
        Ok(present)
    }

    /// Removes `key` from its set if it is there; returns whether it was.
    fn sets_remove(&mut self, loc: Loc, key: &[u8]) -> Result<bool> {
        let mut present = false;
        for sub in 0..self.sets.subsets() {
            if self.sets.may_contain(loc.set, sub, loc.h) {
                let l = self
                    .sets
                    .lookup(&self.store, &self.span, loc.set, sub, loc.h, key)?;
                present |= l.value.is_some() || l.corrupt;
            }
        }
        if present {
            self.ensure_space()?;
            self.update(loc.set, Why::Purge, &[key.to_vec()])?;
        }
        Ok(present)
    }

    /// Appends to FwLog, rotating its buffers (and reclaiming its oldest unit) as needed.
    /// `false` when the index table is full.
    fn log_insert(&mut self, loc: Loc, key: &[u8], value: &[u8]) -> Result<bool> {
        loop {
            match self.log.append(loc.slice, key, value) {
                Append::Placed { page, rotate } => {
                    let e = Entry {
                        page,
                        tag: loc.tag,
                        rrip: LONG,
                    };
                    if !self.index.insert(loc.slice, loc.bucket, e) {
                        self.log.remove_buffered(loc.slice, page, key);
                        return Ok(false);
                    }
                    if rotate {
                        self.rotate_log()?;
                    }
                    return Ok(true);
                }
                Append::Full => self.rotate_log()?,
            }
        }
    }

    /// Writes the primary buffer; first reclaims FwLog's oldest unit if the new overflow
    /// buffer needs its segment.
    fn rotate_log(&mut self) -> Result<()> {
        if let Some(eu) = self.log.next_needs() {
            self.reclaim_log(eu)?;
        }
        self.log.rotate(&self.span)
    }

    /// Nest packing from FwLog's side: FwSets collects garbage first if it is short of units
    /// (which packs log objects for free), then every set still having objects in the unit is
    /// written with all its log objects, and the unit is trimmed.
    fn reclaim_log(&mut self, eu: u32) -> Result<()> {
        debug_assert_eq!(self.log.oldest(), Some(eu));
        self.ensure_space()?;
        for set in 0..self.layout.sets {
            let (slice, bucket) = self.slice_bucket(set);
            let mut victims = 0;
            let mut all = 0;
            for (_, e) in self.index.iter(slice, bucket) {
                all += 1;
                victims += u32::from(self.log.eu_of(e.page) == eu);
            }
            if victims == 0 {
                continue;
            }
            if all >= self.threshold || !self.drop_victims(set, eu)? {
                self.ensure_space()?;
                self.update(set, Why::Log, &[])?;
            }
        }
        self.log.erase_oldest(&self.span)
    }

    /// Threshold admission (Kangaroo's, §5.3 there): a set with fewer than `threshold` FwLog
    /// objects is not rewritten for them; the victims are dropped, or readmitted to FwLog if
    /// they were read there (after the reclaim: [`FairyWren::drain_readmits`]). Returns
    /// `false`, changing nothing, when a dropped one has an older copy in the set or cannot be
    /// read (the set is then packed, so no older copy can resurface).
    fn drop_victims(&mut self, set: u32, eu: u32) -> Result<bool> {
        let (slice, bucket) = self.slice_bucket(set);
        let entries: Vec<(SlotId, Entry)> = self
            .index
            .bucket(slice, bucket)
            .into_iter()
            .filter(|(_, e)| self.log.eu_of(e.page) == eu)
            .collect();
        let objs = self.resolve(slice, set, &entries, &[])?;
        for obj in &objs {
            let Some(o) = obj else { return Ok(false) };
            if o.rrip < LONG {
                continue;
            }
            let h = key_hash(&o.key);
            for sub in 0..self.sets.subsets() {
                if self.sets.may_contain(set, sub, h) {
                    let l = self
                        .sets
                        .lookup(&self.store, &self.span, set, sub, h, &o.key)?;
                    if l.value.is_some() || l.corrupt {
                        return Ok(false);
                    }
                }
            }
        }
        for ((slot, _), obj) in entries.iter().zip(objs) {
            self.index.remove(slice, bucket, *slot);
            match obj {
                Some(o) if o.rrip < LONG => {
                    self.f.objects_readmitted += 1;
                    self.readmits.push(o);
                }
                Some(o) => {
                    self.f.objects_dropped += 1;
                    self.f.objects_dropped_bytes += o.kset_cost() as u64;
                    self.stats.evictions += 1;
                }
                None => {
                    self.f.objects_dropped += 1;
                    self.stats.evictions += 1;
                }
            }
        }
        Ok(true)
    }

    /// Puts objects readmitted by a reclaim back into FwLog (which may reclaim again). One
    /// that does not fit goes from its set too, so no older copy resurfaces.
    fn drain_readmits(&mut self) -> Result<()> {
        while let Some(o) = self.readmits.pop() {
            let loc = self.locate(&o.key);
            if !self.log_insert(loc, &o.key, &o.value)? {
                self.f.objects_dropped += 1;
                self.sets_remove(loc, &o.key)?;
            }
        }
        Ok(())
    }

    /// Garbage-collects FwSets until it has its reserve of free units: each victim's live
    /// subsets are rewritten (packing their sets' log objects), then the unit is trimmed.
    fn ensure_space(&mut self) -> Result<()> {
        let mut rounds = 0;
        while self.store.free_eus() < SETS_RESERVE && rounds < 2 * self.store.eus() {
            rounds += 1;
            let Some(eu) = self.store.victim() else { break };
            for (page, owner) in self.store.live_pages(eu) {
                let (set, sub) = self.sets.of_owner(owner);
                if self.store.owner(page) == owner && self.sets.loc(set, sub) == page {
                    self.update(set, Why::Gc(sub), &[])?;
                }
            }
            for owner in self.store.erase(&self.span, eu)? {
                let (set, sub) = self.sets.of_owner(owner);
                self.sets.forget(set, sub, 0);
            }
        }
        Ok(())
    }

    /// Each entry's object (an entry names a page and a tag; each object serves one entry).
    /// Dead copies of `drop_keys` (removed from the index already) are never candidates.
    fn resolve(
        &self,
        slice: u32,
        set: u32,
        entries: &[(SlotId, Entry)],
        drop_keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Obj>>> {
        resolve_entries(
            entries,
            |p| self.log.read_page(&self.span, slice, p),
            |key| !drop_keys.iter().any(|k| k == key) && self.set_of(key_hash(key)) == set,
        )
    }

    /// Rewrites a set (nest packing): all its FwLog objects come in, replacing older copies;
    /// `drop_keys` go. Usually only the hot subset is written; every `cold_every`-th update
    /// merges both subsets and re-splits them by popularity.
    fn update(&mut self, set: u32, why: Why, drop_keys: &[Vec<u8>]) -> Result<()> {
        let (slice, bucket) = self.slice_bucket(set);
        // Garbage collection moving a cold subset repacks the set (Fig. 8's migration: the
        // set's log objects come in and hot and cold are re-split) instead of copying the page:
        // the hot page it writes retires an older one, so the collection still frees what it
        // did, and the set's next re-split and log update are spent here. Only when FwSets is
        // nearly out of free units is the cold page copied, writing one page for one.
        let copy =
            matches!(why, Why::Gc(sub) if sub != HOT) && self.store.free_eus() < GC_REPACK_FREE_EUS;
        let entries = if copy {
            Vec::new()
        } else {
            self.index.bucket(slice, bucket)
        };
        let objs = self.resolve(slice, set, &entries, drop_keys)?;
        let mut drop_tags = Vec::new();
        let mut incoming = Vec::with_capacity(objs.len());
        for ((slot, e), obj) in entries.iter().zip(objs) {
            self.index.remove(slice, bucket, *slot);
            match obj {
                Some(o) => {
                    if self.log.is_buffered(e.page) {
                        self.log.remove_buffered(slice, e.page, &o.key);
                    }
                    if !drop_keys.contains(&o.key) {
                        incoming.push(o);
                    }
                }
                None => drop_tags.push(e.tag),
            }
        }
        self.f.objects_packed += incoming.len() as u64;
        self.f.churn.incoming(&incoming);
        match why {
            Why::Gc(sub) => {
                self.f.gc_updates += 1;
                self.f.objects_packed_by_gc += incoming.len() as u64;
                if sub != HOT {
                    if copy {
                        self.f.gc_cold_copies += 1;
                    } else {
                        self.f.gc_cold_repacks += 1;
                    }
                }
            }
            Why::Log => {
                self.f.log_updates += 1;
                self.f.objects_packed_by_log += incoming.len() as u64;
            }
            Why::Purge => self.f.purge_updates += 1,
        }
        let goes = |o: &Obj| {
            drop_keys.contains(&o.key)
                || drop_tags.contains(&tag_of(key_hash(&o.key)))
                || incoming.iter().any(|i| i.key == o.key)
        };
        // Subset 0 is the hot one, the others the cold pages.
        let mut pages = Vec::with_capacity(self.sets.subsets() as usize);
        for sub in 0..self.sets.subsets() {
            let read = self.sets.read(&self.store, &self.span, set, sub)?;
            let before = read.objs.len();
            let kept: Vec<(Obj, bool)> = read
                .objs
                .into_iter()
                .zip(read.hit)
                .filter(|(o, _)| !goes(o))
                .collect();
            let changed = kept.len() != before || read.corrupt;
            pages.push((kept, before, changed));
        }

        let n = &mut self.sets.updates[set as usize];
        *n = n.saturating_add(1);
        // A hot subset moved by garbage collection is not re-split: the re-split writes the
        // cold pages too, and with little spare space those writes feed collection itself
        // (tried: at Table 4's 5% FwSets spare, 16 MiB, small-meta, the engine wrote 17× more
        // and held fewer objects). It waits for the set's next update from FwLog or for its
        // cold subset's collection.
        let resplit = match why {
            Why::Gc(HOT) => false,
            Why::Gc(_) => !copy,
            Why::Log | Why::Purge => *n >= self.cold_every,
        };
        let mut writes: Vec<(u32, Vec<Obj>, usize)> = Vec::new();
        let evicted = if resplit {
            *n = 0;
            self.f.resplits += 1;
            let before: Vec<usize> = pages.iter().map(|p| p.1).collect();
            let mut it = pages.into_iter().map(|p| p.0);
            let hot = it.next().unwrap_or_default().into_iter().map(|(o, _)| o);
            let cold = age_unread(it.flatten().collect());
            let (new_hot, cold, evicted) =
                resplit_subsets(hot.collect(), cold, incoming, before.len() - 1);
            writes.push((HOT, new_hot, before[0]));
            for (i, c) in cold.into_iter().enumerate() {
                writes.push((i as u32 + 1, c, before[i + 1]));
            }
            self.f.resplit_evicted_objects += evicted.len() as u64;
            self.f.resplit_evicted_bytes += evicted
                .iter()
                .map(|e| e.obj.kset_cost() as u64)
                .sum::<u64>();
            evicted
        } else {
            let had_incoming = !incoming.is_empty();
            let mut it = pages.into_iter().enumerate();
            let (_, (hot, hot_before, hot_changed)) = it.next().expect("the hot subset");
            let hot = hot.into_iter().map(|(o, _)| o).collect();
            let (keep, evicted) = rrip::merge(hot, incoming);
            if had_incoming || hot_changed || why == Why::Gc(HOT) {
                writes.push((HOT, keep, hot_before));
            }
            for (sub, (cold, before, changed)) in it {
                let sub = sub as u32;
                if changed || why == Why::Gc(sub) {
                    writes.push((sub, cold.into_iter().map(|(o, _)| o).collect(), before));
                }
            }
            evicted
        };
        for e in &evicted {
            self.f.churn.evicted(&e.obj, e.incoming);
        }
        let evicted = evicted.len();
        self.stats.evictions += evicted as u64;
        for (sub, objs, before) in writes {
            self.f.churn.written(&objs);
            self.f.emergency_evictions +=
                self.sets
                    .write(&mut self.store, &self.span, set, sub, &objs, before)?
                    as u64;
        }
        Ok(())
    }
}

/// Cold objects at a re-split: those not read since their page was written age by one step,
/// so they drift back to the hot subset, whatever their prediction (one read once and never
/// again must not stay NEAR for good); those read are NEAR.
fn age_unread(cold: Vec<(Obj, bool)>) -> Vec<Obj> {
    cold.into_iter()
        .map(|(mut o, hit)| {
            o.rrip = if hit { NEAR } else { (o.rrip + 1).min(FAR) };
            o
        })
        .collect()
}

/// The hot/cold re-split (Fig. 9): objects read since they were written (RRIP below LONG;
/// the caller has aged the cold objects not read since their page was written) fill the
/// cold subset, most popular first; the rest, with the incoming objects, form the hot
/// subset, RRIParoo evicting what does not fit.
fn resplit_subsets(
    hot: Vec<Obj>,
    cold: Vec<Obj>,
    incoming: Vec<Obj>,
    cold_pages: usize,
) -> (Vec<Obj>, Vec<Vec<Obj>>, Vec<Evicted>) {
    let mut pool: Vec<Obj> = hot;
    pool.extend(cold);
    pool.sort_by_key(|o| o.rrip);
    let mut cold_out: Vec<Vec<Obj>> = vec![Vec::new(); cold_pages];
    let mut used = vec![0; cold_pages];
    let mut rest = Vec::new();
    for o in pool {
        let c = o.kset_cost();
        let page = (o.rrip < LONG)
            .then(|| used.iter().position(|&u| u + c <= SET_CAPACITY))
            .flatten();
        match page {
            Some(p) => {
                used[p] += c;
                cold_out[p].push(o);
            }
            None => rest.push(o),
        }
    }
    // The objects the hot subset cannot hold, with their predictions before the merge aged
    // them.
    let mut left: Vec<Evicted> = rest
        .iter()
        .map(|o| (o, false))
        .chain(incoming.iter().map(|o| (o, true)))
        .map(|(o, incoming)| Evicted {
            obj: o.clone(),
            incoming,
        })
        .collect();
    let (hot_out, _) = rrip::merge(rest, incoming);
    // What the hot subset cannot hold fills the cold pages' room before it is evicted: a cold
    // page holding only the objects read since the last re-split is often part empty, and
    // leaving it so costs the cache capacity (the objects stay a cold cycle, then are aged and
    // judged again). Nearest predictions first.
    left.retain(|e| !hot_out.iter().any(|h| h.key == e.obj.key));
    left.sort_by_key(|e| e.obj.rrip);
    let mut evicted = Vec::new();
    for e in left {
        let c = e.obj.kset_cost();
        match used.iter().position(|&u| u + c <= SET_CAPACITY) {
            Some(p) => {
                used[p] += c;
                cold_out[p].push(e.obj);
            }
            None => evicted.push(e),
        }
    }
    (hot_out, cold_out, evicted)
}

impl Engine for FairyWren {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.stats.gets += 1;
        let loc = self.locate(key);
        let f = self.log_find(loc, key)?;
        if let Some((slot, e, value)) = f.hit {
            self.index
                .set_rrip(loc.slice, loc.bucket, slot, rrip::on_klog_hit(e.rrip));
            self.stats.hits += 1;
            return Ok(Some(value));
        }
        if f.unverifiable > 0 {
            // The newest copy may be in the damaged page; the set could only offer an older one.
            self.stats.corrupt_reads += 1;
            return Ok(None);
        }
        for sub in 0..self.sets.subsets() {
            let l = self
                .sets
                .lookup(&self.store, &self.span, loc.set, sub, loc.h, key)?;
            if l.corrupt {
                // A subset damaged where the key would be: it holds the key at most there.
                self.stats.corrupt_reads += 1;
                return Ok(None);
            }
            if l.value.is_some() {
                self.stats.hits += 1;
                return Ok(l.value);
            }
        }
        Ok(None)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.stats.sets += 1;
        self.stats.app_bytes_written += (key.len() + value.len()) as u64;
        let loc = self.locate(key);
        self.log_remove(loc, key)?;
        let admitted = page::fits(key, value) && {
            let a = self.preflash.admit();
            if !a {
                self.f.preflash_rejected += 1;
            }
            a
        };
        let stored = admitted && self.log_insert(loc, key, value)?;
        self.drain_readmits()?;
        if !stored {
            self.stats.rejected_sets += 1;
            self.sets_remove(loc, key)?;
        }
        Ok(stored)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.stats.deletes += 1;
        let loc = self.locate(key);
        let in_log = self.log_remove(loc, key)?;
        let in_sets = self.sets_remove(loc, key)?;
        Ok(in_log || in_sets)
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            evictions: self.stats.evictions + self.f.emergency_evictions,
            flash_bytes_written: self.log.segment_writes * self.log.segment_bytes()
                + self.store.page_writes * PAGE as u64,
            objects: self.index.len() + self.sets.objects,
            ..self.stats.clone()
        }
    }

    /// FwLog counted in segments (a cycle writes every segment once; it reclaims whole erase
    /// units), FwSets in pages.
    fn counters(&self) -> Vec<(String, u64)> {
        named_counters(&self.fairywren_stats())
    }

    /// FwSets' pages split into what live subsets may fill, the reserved and open units, and
    /// the spare beyond both (the over-provisioning garbage collection actually has).
    fn layout(&self) -> Vec<(String, u64)> {
        let l = &self.layout;
        let set_pages = u64::from(l.set_eus) * u64::from(l.eu_pages);
        let subset_pages = u64::from(l.sets) * u64::from(1 + l.cold_pages);
        let reserved = u64::from(SETS_RESERVE + 2) * u64::from(l.eu_pages);
        [
            ("eu_pages", u64::from(l.eu_pages)),
            ("fwlog_eus", u64::from(l.log_eus)),
            ("fwsets_eus", u64::from(l.set_eus)),
            ("sets", u64::from(l.sets)),
            ("subset_pages", subset_pages),
            ("reserved_and_open_pages", reserved),
            (
                "spare_pages",
                set_pages.saturating_sub(subset_pages + reserved),
            ),
        ]
        .into_iter()
        .chain(self.dram().named())
        .map(|(k, v)| (k.to_string(), v))
        .chain(self.held())
        .collect()
    }

    fn parts(&self) -> Vec<PartStats> {
        let per_eu = u64::from(self.layout.segments_per_eu());
        vec![
            PartStats {
                name: "fwlog".into(),
                capacity_bytes: u64::from(self.layout.log_eus) * self.layout.eu_bytes(),
                bytes_written: self.log.segment_writes * self.log.segment_bytes(),
                log: Some(LogUnits {
                    units: u64::from(self.layout.log_eus) * per_eu,
                    units_written: self.log.segment_writes,
                    units_reclaimed: self.log.eu_erases * per_eu,
                }),
            },
            PartStats {
                name: "fwsets".into(),
                capacity_bytes: u64::from(self.layout.set_eus) * self.layout.eu_bytes(),
                bytes_written: self.store.page_writes * PAGE as u64,
                log: None,
            },
        ]
    }

    fn dram_bytes(&self) -> usize {
        self.dram().total()
    }

    fn save(&self, w: &mut dyn Write) -> Result<()> {
        debug_assert!(
            self.readmits.is_empty(),
            "readmissions drain within each call"
        );
        persist::save_engine(w, Kind::FairyWren, &self.shape(), |e| {
            e.u64(self.preflash.state());
            self.log.save(e);
            self.index.save(e);
            self.store.save(e);
            self.sets.save(e);
        })
    }

    /// Takes back a saved index into a fresh engine ([`FairyWren::open`]): every index entry
    /// must name a page FwLog holds, and subsets and the store's page owners must agree.
    fn load(&mut self, r: &mut dyn Read) -> Result<()> {
        let handles = self.store.handles();
        let (mut log, mut index, mut store, mut sets) =
            Self::parts(&self.layout, self.log.handle(), handles[0], handles[1]);
        let rng = persist::load_engine(r, Kind::FairyWren, &self.shape(), &self.stats, |d| {
            let rng = d.u64("admission generator")?;
            log.load(d)?;
            index.load(d, |_, page| log.page_live(page))?;
            store.load(d)?;
            sets.load(d, &store)?;
            Ok(rng)
        })?;
        self.preflash.set_state(rng);
        (self.log, self.index, self.store, self.sets) = (log, index, store, sets);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kangaroo::rrip::obj;

    /// Unread cold objects age at a re-split, NEAR ones too; read ones are NEAR.
    #[test]
    fn unread_cold_objects_age_even_from_near() {
        let aged = age_unread(vec![
            (obj("stale", NEAR, 10), false),
            (obj("mid", 3, 10), false),
            (obj("far", FAR, 10), false),
            (obj("read", 4, 10), true),
        ]);
        let rrip: Vec<u8> = aged.iter().map(|o| o.rrip).collect();
        assert_eq!(rrip, vec![1, 4, FAR, NEAR]);
    }

    /// A re-split places every object once: in the hot subset, a cold page, or the evicted
    /// list, which says which of them came in from FwLog with this update.
    #[test]
    fn resplit_places_every_object_once_and_names_evicted_newcomers() {
        let hot: Vec<Obj> = (0..6).map(|i| obj(&format!("h{i}"), FAR, 600)).collect();
        let cold: Vec<Obj> = (0..6).map(|i| obj(&format!("c{i}"), NEAR, 600)).collect();
        let incoming: Vec<Obj> = (0..6).map(|i| obj(&format!("n{i}"), LONG, 900)).collect();
        let all: Vec<Vec<u8>> = hot
            .iter()
            .chain(&cold)
            .chain(&incoming)
            .map(|o| o.key.clone())
            .collect();
        let (new_hot, new_cold, evicted) = resplit_subsets(hot, cold, incoming, 1);
        let mut placed: Vec<Vec<u8>> = new_hot
            .iter()
            .chain(new_cold.iter().flatten())
            .map(|o| o.key.clone())
            .chain(evicted.iter().map(|e| e.obj.key.clone()))
            .collect();
        placed.sort();
        let mut want = all;
        want.sort();
        assert_eq!(placed, want);
        assert!(!evicted.is_empty());
        for e in &evicted {
            assert_eq!(e.incoming, e.obj.key[0] == b'n', "{:?}", e.obj.key);
        }
        // The cold page holds the objects read since they were written.
        assert!(new_cold[0].iter().all(|o| o.key[0] == b'c'));
        for page in new_cold.iter().chain([&new_hot]) {
            assert!(page.iter().map(Obj::kset_cost).sum::<usize>() <= SET_CAPACITY);
        }
    }
}
