//! Kangaroo's configuration (defaults from Table 3) and the layout derived from it.

use lachesis_device::PlacementHandle;

use super::index::{MAX_PAGES, MAX_SLOTS};
use super::page::PAGE;
use crate::dev::Span;
use crate::{Error, Result};

/// Largest default KLog segment, in 4 KiB pages (32 KiB). Every partition keeps one segment
/// buffered in DRAM, so 64 partitions of 256 KiB segments were a fixed 16 MiB: 13 bits per
/// object at 10 M objects, more than the rest of Kangaroo's DRAM. At 32 KiB they are 2 MiB
/// (1.7 bits at 10 M), and a segment is still 8 pages written at once. The flusher keeps one
/// segment of each partition free, so a smaller segment also leaves less of the log empty.
pub const MAX_DEFAULT_SEGMENT_PAGES: u64 = 8;

/// When KLog moves objects to KSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushMode {
    /// §5.3: keep one free segment per partition, flushing the oldest segment when the last
    /// free one is taken (the paper reports KLog 80-95% full; we measure 65%, see README).
    OneSegment,
    /// §4's model: when a partition's log is full, flush all of it.
    WholeLog,
}

/// Configuration of a [`super::Kangaroo`].
#[derive(Clone)]
pub struct KangarooConfig {
    /// The part of the device the cache owns.
    pub span: Span,
    pub klog_handle: PlacementHandle,
    pub kset_handle: PlacementHandle,
    /// Share of the span for KLog (Table 3: 5%).
    pub log_fraction: f64,
    /// KLog partitions (§5.2: 64).
    pub partitions: u32,
    /// KLog segment size; 0 picks an eighth of a partition's log, between 4 KiB and
    /// [`MAX_DEFAULT_SEGMENT_PAGES`] pages.
    pub segment_bytes: u64,
    /// Pre-flash admission probability (Table 3: 0.9).
    pub admit_probability: f64,
    /// Objects needed in KLog to rewrite a set (Table 3: 2).
    pub threshold: u32,
    /// Readmit objects hit while in KLog instead of dropping them below the threshold.
    pub readmit_hits: bool,
    pub flush: FlushMode,
    /// Typical object size: sizes the DRAM hit bits (one per object, §5.4) and the Bloom
    /// filters (3 bits per object, Table 2) of each set.
    pub expected_object_bytes: u32,
    /// Seed of the pre-flash admission draws.
    pub seed: u64,
}

impl KangarooConfig {
    /// Table 3's defaults on `span`.
    pub fn new(
        span: Span,
        klog_handle: PlacementHandle,
        kset_handle: PlacementHandle,
    ) -> KangarooConfig {
        KangarooConfig {
            span,
            klog_handle,
            kset_handle,
            log_fraction: 0.05,
            partitions: 64,
            segment_bytes: 0,
            admit_probability: 0.9,
            threshold: 2,
            readmit_hits: true,
            flush: FlushMode::OneSegment,
            expected_object_bytes: 200,
            seed: 0x6b61_6e67_6172_6f6f,
        }
    }
}

impl KangarooConfig {
    /// Lowers `partitions` (keeping it a power of two) until each partition's log has room
    /// for two segments of at least one page, so small spans work with otherwise default
    /// parameters. Leaves an explicit `segment_bytes` alone.
    pub fn fit_partitions(mut self) -> KangarooConfig {
        let log_pages = (self.span.len / PAGE as u64) as f64 * self.log_fraction;
        let seg_pages = (self.segment_bytes / PAGE as u64).max(1) as f64;
        while self.partitions > 1 && log_pages / f64::from(self.partitions) < 2.0 * seg_pages {
            self.partitions = (self.partitions / 2).max(1);
        }
        self
    }
}

/// Sizes derived from a checked configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub partitions: u32,
    pub segments_per_partition: u32,
    pub pages_per_segment: u32,
    /// KLog bytes (all partitions).
    pub klog_bytes: u64,
    pub sets: u32,
    pub buckets_per_partition: u32,
    pub tables_per_partition: u32,
    pub slots_per_table: usize,
    pub bloom_bits_per_set: usize,
    pub hit_bits_per_set: usize,
}

fn bad(msg: String) -> Error {
    Error::Config(format!("kangaroo: {msg}"))
}

impl Layout {
    pub fn new(c: &KangarooConfig) -> Result<Layout> {
        let geo = c.span.check("kangaroo")?;
        let page = PAGE as u64;
        if !page.is_multiple_of(u64::from(geo.block_size)) {
            return Err(bad(format!(
                "the device's {}-byte blocks do not divide 4 KiB sets",
                geo.block_size
            )));
        }
        geo.check_handle(c.klog_handle)
            .map_err(|e| bad(format!("KLog {e}")))?;
        geo.check_handle(c.kset_handle)
            .map_err(|e| bad(format!("KSet {e}")))?;
        if !(c.log_fraction > 0.0 && c.log_fraction < 1.0) {
            return Err(bad(format!(
                "log_fraction {} must be in (0, 1)",
                c.log_fraction
            )));
        }
        if !(0.0..=1.0).contains(&c.admit_probability) {
            return Err(bad(format!(
                "admit_probability {} must be in [0, 1]",
                c.admit_probability
            )));
        }
        if c.threshold == 0 || c.partitions == 0 || c.expected_object_bytes == 0 {
            return Err(bad(
                "threshold, partitions and expected_object_bytes must be at least 1".into(),
            ));
        }
        let span_pages = c.span.len / page;
        let part_pages = ((span_pages as f64 * c.log_fraction) as u64) / u64::from(c.partitions);
        let pages_per_segment = if c.segment_bytes == 0 {
            (part_pages / 8).clamp(1, MAX_DEFAULT_SEGMENT_PAGES)
        } else if c.segment_bytes.is_multiple_of(page) {
            c.segment_bytes / page
        } else {
            return Err(bad(format!(
                "segment_bytes {} is not a multiple of 4 KiB",
                c.segment_bytes
            )));
        };
        let segments = part_pages / pages_per_segment;
        if segments < 2 {
            return Err(bad(format!(
                "a {}-byte span gives each of {} partitions {} KLog pages, fewer than two {}-page segments; use fewer partitions (KangarooConfig::fit_partitions), smaller segments or a larger span",
                c.span.len, c.partitions, part_pages, pages_per_segment
            )));
        }
        let log_pages = segments * pages_per_segment;
        if log_pages > u64::from(MAX_PAGES) {
            return Err(bad(format!("{log_pages} pages per partition exceed the index's {MAX_PAGES}; use more partitions")));
        }
        let klog_bytes = log_pages * page * u64::from(c.partitions);
        let sets = (c.span.len - klog_bytes) / page;
        let sets = u32::try_from(sets).map_err(|_| bad(format!("{sets} sets exceed 2^32")))?;
        if sets < c.partitions {
            return Err(bad(format!("{sets} sets for {} partitions", c.partitions)));
        }
        let buckets = sets.div_ceil(c.partitions);
        // Entries a partition holds when its log is full of typical objects, with headroom.
        let per_page =
            PAGE as u64 / (u64::from(c.expected_object_bytes) + crate::object::HEADER as u64);
        let expected = (log_pages * per_page.max(1)) as usize;
        let tables = (expected * 2)
            .div_ceil(MAX_SLOTS)
            .clamp(1, buckets as usize) as u32;
        let per_set = PAGE.div_ceil(c.expected_object_bytes as usize);
        Ok(Layout {
            partitions: c.partitions,
            segments_per_partition: segments as u32,
            pages_per_segment: pages_per_segment as u32,
            klog_bytes,
            sets,
            buckets_per_partition: buckets,
            tables_per_partition: tables,
            slots_per_table: expected.div_ceil(tables as usize),
            bloom_bits_per_set: 3 * per_set,
            hit_bits_per_set: per_set,
        })
    }

    /// Objects a partition's log holds when full of objects of `cost` bytes each.
    pub fn klog_objects_per_partition(&self, cost: usize) -> u64 {
        let per_page = (PAGE - 2) / cost;
        u64::from(self.segments_per_partition) * u64::from(self.pages_per_segment) * per_page as u64
    }
}
