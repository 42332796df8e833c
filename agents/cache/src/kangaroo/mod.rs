//! Kangaroo (Kangaroo: Caching Billions of Tiny Objects on Flash, SOSP '21; §3-§5): a tiny-object
//! flash cache made of a small log (KLog, ~5% of flash, DRAM index) in front of a large
//! set-associative cache (KSet, no DRAM index).
//!
//! An object goes through pre-flash admission (probability `p`) into a KLog partition's
//! segment buffer. When a partition runs out of free segments, the flusher takes its oldest
//! segment and, for each set that segment's objects map to, moves *all* KLog objects of that
//! set to KSet in one set write if there are at least `n` of them; otherwise the flushed
//! objects are dropped, or readmitted to KLog when they were hit there. KSet evicts by
//! RRIParoo.
//!
//! Consistency: lookups consult KLog before KSet, and an object only leaves KLog by moving to
//! KSet, by readmission, or by being dropped after making sure KSet holds no older copy of it
//! (a Bloom probe, and where it says "maybe", a read and, if needed, one set rewrite). So
//! after a set or delete no lookup sees an older value. Every object is checksummed; a page
//! that fails its checksum reads as a miss.
//!
//! Start reading at [`Kangaroo`], then `flusher.rs` (KLog → KSet), `index.rs` (Table 2),
//! `kset.rs` and `rrip.rs`. `analytic.rs` is §4's analytic model.

pub(crate) mod admission;
pub mod analytic;
mod config;
pub(crate) mod flusher;
pub(crate) mod hitbits;
pub(crate) mod index;
mod klog;
mod kset;
pub(crate) mod page;
pub(crate) mod rrip;

pub use config::{FlushMode, KangarooConfig, Layout, MAX_DEFAULT_SEGMENT_PAGES};
pub use page::PAGE as SET_BYTES;

use admission::PreFlash;
use index::{Entry, Index, SlotId};
use klog::KLog;
use kset::KSet;
use page::Obj;
pub use rrip::SetChurn;

use std::io::{Read, Write};

use lachesis_device::PlacementHandle;

use crate::dev::Span;
use crate::engine::{named_counters, Engine, EngineStats, LogUnits, PartStats};
use crate::object::key_hash;
use crate::persist::{self, Kind, Shape};
use crate::Result;

/// The KLog tag of a key hash: the low bits, which the set choice (high bits) does not use.
pub(crate) fn tag_of(h: u64) -> u16 {
    (h & ((1 << index::TAG_BITS) - 1)) as u16
}

/// Bytes an object of this key and value length takes in a KSet set (and, one byte less, in a
/// KLog page), so callers can size fixed-size objects to fill sets exactly.
pub fn object_cost(key_len: usize, value_len: usize) -> usize {
    crate::object::HEADER + key_len + value_len + 1
}

/// Kangaroo's own counters, beyond [`EngineStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KangarooStats {
    pub klog_objects_written: u64,
    pub klog_segment_writes: u64,
    pub kset_set_writes: u64,
    pub preflash_rejected: u64,
    /// Segments flushed one at a time / whole-log flushes.
    pub segment_flushes: u64,
    pub whole_log_flushes: u64,
    /// Set groups the flusher looked at, and those it moved to KSet (threshold met).
    pub groups_flushed: u64,
    pub groups_admitted: u64,
    /// KLog objects in flushed segments.
    pub victims_flushed: u64,
    pub objects_moved: u64,
    pub objects_dropped: u64,
    pub objects_readmitted: u64,
    /// Bytes of the objects dropped at the threshold (as they would take on a set page).
    pub objects_dropped_bytes: u64,
    /// Set writes made only so that a dropped object's older copy does not resurface.
    pub kset_replacements: u64,
    /// KLog entries evicted because they could not be told apart from a removed object's dead
    /// copy (same page and tag) or their page was damaged.
    pub collateral_evictions: u64,
    /// What KSet's rewrites took in, wrote and evicted.
    #[serde(flatten)]
    pub churn: SetChurn,
}

/// DRAM by structure, in bytes, measured from their allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DramBreakdown {
    pub klog_entries: usize,
    pub klog_buckets: usize,
    pub kset_blooms: usize,
    pub kset_hit_bits: usize,
    /// Segment buffers and flush scratch: fixed, independent of the object count.
    pub buffers: usize,
}

impl DramBreakdown {
    /// Everything that grows with the cache.
    pub fn per_object_structures(&self) -> usize {
        self.klog_entries + self.klog_buckets + self.kset_blooms + self.kset_hit_bits
    }

    pub fn total(&self) -> usize {
        self.per_object_structures() + self.buffers
    }

    /// Bytes by structure, named as in cachebench's `layout` (`dram_*`).
    pub fn named(&self) -> [(&'static str, u64); 5] {
        [
            ("dram_klog_entries", self.klog_entries as u64),
            ("dram_klog_buckets", self.klog_buckets as u64),
            ("dram_kset_blooms", self.kset_blooms as u64),
            ("dram_kset_hit_bits", self.kset_hit_bits as u64),
            ("dram_buffers", self.buffers as u64),
        ]
    }
}

/// Where a key lives.
#[derive(Clone, Copy)]
struct Loc {
    h: u64,
    set: u32,
    part: u32,
    bucket: u32,
    tag: u16,
}

/// What KLog holds for a key.
struct Found {
    hit: Option<(SlotId, Entry, Vec<u8>)>,
    /// Entries with the key's tag whose page failed its checksum: they may be the key.
    unverifiable: Vec<(SlotId, Entry)>,
}

/// An object leaving a flushed segment to go back into KLog.
struct Readmit {
    loc_part: u32,
    bucket: u32,
    set: u32,
    tag: u16,
    obj: Obj,
}

/// The Kangaroo engine. See the module documentation.
pub struct Kangaroo {
    span: Span,
    layout: Layout,
    klog: KLog,
    index: Index,
    kset: KSet,
    preflash: PreFlash,
    threshold: u32,
    readmit_hits: bool,
    flush: FlushMode,
    stats: EngineStats,
    k: KangarooStats,
    collateral_evictions: u64,
    readmits: Vec<Readmit>,
}

impl Kangaroo {
    /// Lays KLog (partitions × segments) out at the start of the span and KSet's sets after it.
    pub fn new(config: KangarooConfig) -> Result<Kangaroo> {
        let layout = Layout::new(&config)?;
        let (klog, index, kset) = Self::parts(&layout, config.klog_handle, config.kset_handle);
        Ok(Kangaroo {
            span: config.span,
            layout,
            klog,
            index,
            kset,
            preflash: PreFlash::new(config.admit_probability, config.seed),
            threshold: config.threshold,
            readmit_hits: config.readmit_hits,
            flush: config.flush,
            stats: EngineStats::default(),
            k: KangarooStats::default(),
            collateral_evictions: 0,
            readmits: Vec::new(),
        })
    }

    /// The DRAM structures of an empty cache of this layout.
    fn parts(layout: &Layout, klog: PlacementHandle, kset: PlacementHandle) -> (KLog, Index, KSet) {
        let klog = KLog::new(
            0,
            layout.partitions,
            layout.segments_per_partition,
            layout.pages_per_segment,
            klog,
        );
        let index = Index::new(
            layout.partitions,
            layout.buckets_per_partition,
            layout.tables_per_partition,
            layout.slots_per_table,
        );
        let kset = KSet::new(
            layout.klog_bytes,
            layout.sets,
            kset,
            layout.bloom_bits_per_set,
            layout.hit_bits_per_set,
        );
        (klog, index, kset)
    }

    /// A cache built from `config` with the index [`Engine::save`] wrote (see `crate::persist`).
    pub fn restore(config: KangarooConfig, r: &mut dyn Read) -> Result<Kangaroo> {
        let mut kg = Kangaroo::new(config)?;
        kg.load(r)?;
        Ok(kg)
    }

    fn shape(&self) -> Shape {
        let l = &self.layout;
        Shape::of_span(&self.span)
            .with("KLog partitions", u64::from(l.partitions))
            .with(
                "KLog segments per partition",
                u64::from(l.segments_per_partition),
            )
            .with("KLog pages per segment", u64::from(l.pages_per_segment))
            .with("KLog bytes", l.klog_bytes)
            .with("KSet sets", u64::from(l.sets))
            .with(
                "KLog index buckets per partition",
                u64::from(l.buckets_per_partition),
            )
            .with(
                "KLog index tables per partition",
                u64::from(l.tables_per_partition),
            )
            .with("Bloom bits per set", l.bloom_bits_per_set as u64)
            .with("hit bits per set", l.hit_bits_per_set as u64)
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn kangaroo_stats(&self) -> KangarooStats {
        KangarooStats {
            klog_segment_writes: self.klog.segment_writes,
            kset_set_writes: self.kset.set_writes,
            collateral_evictions: self.collateral_evictions,
            churn: self.kset.churn,
            ..self.k.clone()
        }
    }

    /// Objects in KLog now.
    pub fn klog_objects(&self) -> u64 {
        self.index.len()
    }

    pub fn dram(&self) -> DramBreakdown {
        let (entries, buckets) = self.index.dram_bytes();
        let (blooms, hits) = self.kset.dram_bytes();
        DramBreakdown {
            klog_entries: entries,
            klog_buckets: buckets,
            kset_blooms: blooms,
            kset_hit_bits: hits,
            buffers: self.klog.dram_bytes()
                + self.readmits.capacity() * std::mem::size_of::<Readmit>(),
        }
    }

    /// Offset (within the span) of the KSet set `key` maps to: for tests that damage a set.
    pub fn set_offset(&self, key: &[u8]) -> u64 {
        self.layout.klog_bytes + u64::from(self.locate(key).set) * SET_BYTES as u64
    }

    /// Moves everything in KLog through the flusher now (seal every buffer, flush every
    /// segment), as if each partition's log had filled up.
    pub fn flush_klog(&mut self) -> Result<()> {
        for part in 0..self.layout.partitions {
            if !self.klog.buffer_empty(part) {
                self.seal_and_flush(part)?;
            }
            let segs = self.klog.on_flash(part);
            if !segs.is_empty() {
                self.flush_segments(part, &segs)?;
            }
        }
        self.drain_readmits()
    }

    fn locate(&self, key: &[u8]) -> Loc {
        let h = key_hash(key);
        let set = self.set_of(h);
        let p = self.layout.partitions;
        Loc {
            h,
            set,
            part: set % p,
            bucket: set / p,
            tag: tag_of(h),
        }
    }

    fn klog_find(&self, loc: Loc, key: &[u8]) -> Result<Found> {
        let mut found = Found {
            hit: None,
            unverifiable: Vec::new(),
        };
        for (slot, e) in self.index.iter(loc.part, loc.bucket) {
            if e.tag != loc.tag {
                continue;
            }
            let page = self.klog.read_page(&self.span, loc.part, e.page)?;
            let parsed = page::parse_klog(&page);
            if let Some(o) = parsed.objs.iter().find(|o| o.key == key) {
                found.hit = Some((slot, e, o.value.to_vec()));
                break;
            }
            if parsed.corrupt {
                found.unverifiable.push((slot, e));
            }
        }
        Ok(found)
    }

    /// Takes `key` out of KLog. Entries that cannot be told apart from it (their page is
    /// damaged) go too, and so does anything of theirs in KSet. Returns whether it was there.
    fn klog_remove(&mut self, loc: Loc, key: &[u8]) -> Result<bool> {
        let f = self.klog_find(loc, key)?;
        let mut purge_keys = Vec::new();
        let mut purge_tags = Vec::new();
        for (slot, e) in &f.unverifiable {
            self.index.remove(loc.part, loc.bucket, *slot);
            purge_tags.push(e.tag);
            self.collateral_evictions += 1;
        }
        let present = f.hit.is_some();
        if let Some((slot, e, _)) = f.hit {
            self.index.remove(loc.part, loc.bucket, slot);
            if self.klog.is_buffered(loc.part, e.page) {
                self.klog.remove_buffered(loc.part, e.page, key);
            } else {
                // The dead copy stays on flash. Another live entry with the same page and tag
                // would find it by tag, so such entries are evicted with their KSet copies.
                let siblings: Vec<SlotId> = self
                    .index
                    .bucket(loc.part, loc.bucket)
                    .into_iter()
                    .filter(|(_, s)| s.page == e.page && s.tag == e.tag)
                    .map(|(s, _)| s)
                    .collect();
                if !siblings.is_empty() {
                    let page = self.klog.read_page(&self.span, loc.part, e.page)?;
                    let parsed = page::parse_klog(&page);
                    for o in &parsed.objs {
                        if o.key != key && tag_of(key_hash(o.key)) == loc.tag {
                            purge_keys.push(o.key.to_vec());
                        }
                    }
                    if parsed.corrupt {
                        purge_tags.push(loc.tag);
                    }
                    for s in siblings {
                        self.index.remove(loc.part, loc.bucket, s);
                        self.collateral_evictions += 1;
                    }
                }
            }
        }
        if !purge_keys.is_empty() || !purge_tags.is_empty() {
            self.kset.update(
                &self.span,
                loc.set,
                Vec::new(),
                &purge_keys,
                &purge_tags,
                false,
            )?;
        }
        Ok(present)
    }

    /// Appends to KLog, sealing and flushing as needed. `false` when the index table is full.
    fn klog_insert(
        &mut self,
        part: u32,
        bucket: u32,
        tag: u16,
        key: &[u8],
        value: &[u8],
        rrip: u8,
    ) -> Result<bool> {
        loop {
            if let Some(page) = self.klog.try_append(part, key, value) {
                if self.index.insert(part, bucket, Entry { page, tag, rrip }) {
                    self.k.klog_objects_written += 1;
                    return Ok(true);
                }
                self.klog.remove_buffered(part, page, key);
                return Ok(false);
            }
            self.seal_and_flush(part)?;
        }
    }

    /// Puts objects the flusher readmitted back into KLog (their appends may flush again).
    fn drain_readmits(&mut self) -> Result<()> {
        while let Some(r) = self.readmits.pop() {
            let ok = self.klog_insert(
                r.loc_part,
                r.bucket,
                r.tag,
                &r.obj.key,
                &r.obj.value,
                rrip::LONG,
            )?;
            if !ok {
                self.k.objects_dropped += 1;
                self.kset
                    .update(&self.span, r.set, vec![r.obj], &[], &[], true)?;
            }
        }
        Ok(())
    }

    /// Removes `key` from KSet if it is there; returns whether it was.
    fn kset_remove(&mut self, loc: Loc, key: &[u8]) -> Result<bool> {
        if !self.kset.may_contain(loc.set, loc.h) {
            return Ok(false);
        }
        self.kset
            .update(&self.span, loc.set, Vec::new(), &[key.to_vec()], &[], false)
    }
}

impl Engine for Kangaroo {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.stats.gets += 1;
        let loc = self.locate(key);
        let f = self.klog_find(loc, key)?;
        if let Some((slot, e, value)) = f.hit {
            self.index
                .set_rrip(loc.part, loc.bucket, slot, rrip::on_klog_hit(e.rrip));
            self.stats.hits += 1;
            return Ok(Some(value));
        }
        if !f.unverifiable.is_empty() {
            // The newest copy may be in the damaged page; KSet could only offer an older one.
            self.stats.corrupt_reads += 1;
            return Ok(None);
        }
        let l = self.kset.lookup(&self.span, loc.set, loc.h, key)?;
        if l.corrupt {
            self.stats.corrupt_reads += 1;
        }
        if l.value.is_some() {
            self.stats.hits += 1;
        }
        Ok(l.value)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.stats.sets += 1;
        self.stats.app_bytes_written += (key.len() + value.len()) as u64;
        let loc = self.locate(key);
        self.klog_remove(loc, key)?;
        let admitted = page::fits(key, value) && {
            let a = self.preflash.admit();
            if !a {
                self.k.preflash_rejected += 1;
            }
            a
        };
        let stored =
            admitted && self.klog_insert(loc.part, loc.bucket, loc.tag, key, value, rrip::LONG)?;
        self.drain_readmits()?;
        if !stored {
            self.stats.rejected_sets += 1;
            self.kset_remove(loc, key)?;
        }
        Ok(stored)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.stats.deletes += 1;
        let loc = self.locate(key);
        let in_klog = self.klog_remove(loc, key)?;
        let in_kset = self.kset_remove(loc, key)?;
        Ok(in_klog || in_kset)
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            evictions: self.kset.evictions + self.k.objects_dropped + self.collateral_evictions,
            flash_bytes_written: self.klog.segment_writes * self.klog.segment_bytes()
                + self.kset.set_writes * SET_BYTES as u64,
            objects: self.index.len() + self.kset.objects,
            ..self.stats.clone()
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        named_counters(&self.kangaroo_stats())
    }

    /// KSet's sets and what the cache holds now (read from flash): set pages, objects and
    /// their bytes, KLog's objects.
    fn layout(&self) -> Vec<(String, u64)> {
        let sets = self.layout.sets;
        let (pages, objects, bytes) = self.kset.held(&self.span, sets);
        [
            ("sets", u64::from(sets)),
            ("held_set_pages", pages),
            ("held_set_objects", objects),
            ("held_set_bytes", bytes),
            ("held_log_objects", self.index.len()),
        ]
        .into_iter()
        .chain(self.dram().named())
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn parts(&self) -> Vec<PartStats> {
        let l = &self.layout;
        vec![
            PartStats {
                name: "klog".into(),
                capacity_bytes: l.klog_bytes,
                bytes_written: self.klog.segment_writes * self.klog.segment_bytes(),
                log: Some(LogUnits {
                    units: u64::from(l.partitions) * u64::from(l.segments_per_partition),
                    units_written: self.klog.segment_writes,
                    units_reclaimed: self.klog.segments_released,
                }),
            },
            PartStats {
                name: "kset".into(),
                capacity_bytes: u64::from(l.sets) * SET_BYTES as u64,
                bytes_written: self.kset.set_writes * SET_BYTES as u64,
                log: None,
            },
        ]
    }

    fn dram_bytes(&self) -> usize {
        self.dram().total()
    }

    /// Saves KLog's index and segment buffers and KSet's Bloom filters and hit bits; the
    /// pages and sets are on flash. Writes no flash.
    fn save(&self, w: &mut dyn Write) -> Result<()> {
        debug_assert!(
            self.readmits.is_empty(),
            "readmissions drain within each call"
        );
        persist::save_engine(w, Kind::Kangaroo, &self.shape(), |e| {
            e.u64(self.preflash.state());
            self.klog.save(e);
            self.index.save(e);
            self.kset.save(e);
        })
    }

    fn load(&mut self, r: &mut dyn Read) -> Result<()> {
        let (mut klog, mut index, mut kset) =
            Self::parts(&self.layout, self.klog.handle(), self.kset.handle());
        let rng = persist::load_engine(r, Kind::Kangaroo, &self.shape(), &self.stats, |d| {
            let rng = d.u64("admission generator")?;
            klog.load(d)?;
            index.load(d, |part, page| klog.page_live(part, page))?;
            kset.load(d)?;
            Ok(rng)
        })?;
        self.preflash.set_state(rng);
        (self.klog, self.index, self.kset) = (klog, index, kset);
        Ok(())
    }
}
