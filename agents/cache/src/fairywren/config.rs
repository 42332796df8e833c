//! FairyWREN's configuration (defaults from the paper's Table 4) and the layout derived from it.

use lachesis_device::PlacementHandle;

use super::store::Victims;
use crate::dev::Span;
use crate::kangaroo::index::{MAX_PAGES, MAX_SLOTS};
use crate::kangaroo::page::PAGE;
use crate::{Error, Result};

/// Free erase units FwSets keeps before it admits anything new: garbage collection of one unit
/// may open a new unit per stream (hot, cold) before it frees its victim.
pub const SETS_RESERVE: u32 = 4;

/// Fewest erase units of FwLog.
const MIN_LOG_EUS: u64 = 3;
/// Fewest erase units a FairyWREN takes: [`MIN_LOG_EUS`] for FwLog and the reserve plus four
/// for FwSets (a smaller `log_fraction` than 1/[`MIN_EUS`] does not lower it).
pub const MIN_EUS: u64 = MIN_LOG_EUS + SETS_RESERVE as u64 + 4;

/// Pages each FwLog slice gets of every segment, at least (about 100 tiny objects).
pub const MIN_SLICE_PAGES: u64 = 8;

/// Configuration of a [`super::FairyWren`].
#[derive(Clone)]
pub struct FairyWrenConfig {
    /// The part of the device the cache owns; a whole number of erase units.
    pub span: Span,
    /// One handle per stream, each writing one erase unit at a time from start to end (WREN's
    /// active units): FwLog segments, hot subsets, cold subsets.
    pub log_handle: PlacementHandle,
    pub hot_handle: PlacementHandle,
    pub cold_handle: PlacementHandle,
    /// Erase unit (FDP reclaim unit); 0 takes the device's reclaim unit.
    pub eu_bytes: u64,
    /// Share of the erase units for FwLog (Table 4: 5%).
    pub log_fraction: f64,
    /// FwSets over-provisioning: the share of its erase units not holding live sets (Table 4:
    /// 5%), so that nest packing always finds a unit with dead subsets.
    pub op: f64,
    /// How FwSets' garbage collection picks a victim unit (hot and cold units are apart, each
    /// on its stream's handle): cost-benefit by default; §4.4's FIFO+ for the model.
    pub victims: Victims,
    /// FwLog slices (§5.4.2: 64); fewer when a segment has too few pages for each slice to
    /// get [`MIN_SLICE_PAGES`] (the paper's balls-into-bins argument needs many objects per
    /// slice, or the overflow buffer forces out mostly empty segments).
    pub slices: u32,
    /// FwLog segment (the unit of the double buffer); 0 is a quarter of the erase unit (but
    /// at least [`MIN_SLICE_PAGES`] pages), so the two buffers hold back half a unit of log.
    pub segment_bytes: u64,
    /// Pages of each set's cold subset (Table 4: one, 4 KiB hot + 4 KiB cold; §5.4.4: larger
    /// sets, e.g. 4 KiB hot + 12 KiB cold, need fewer sets for the same flash, so less DRAM
    /// and more log objects per hot-subset write).
    pub cold_pages: u32,
    /// Every `cold_every`-th rewrite of a set merges and re-splits its hot and cold subsets
    /// (Table 4: every 5).
    pub cold_every: u8,
    /// FwLog objects of one set needed to rewrite the set when FwLog reclaims a unit
    /// (Kangaroo's threshold admission, Table 3 there: 2); fewer, and none of them read, are
    /// dropped. Sets written by garbage collection take all their log objects regardless.
    pub threshold: u32,
    /// Pre-flash admission probability into FwLog (as Kangaroo's, 0.9).
    pub admit_probability: f64,
    /// Typical object size: sizes the DRAM hit bits and the Bloom filters of each subset.
    pub expected_object_bytes: u32,
    pub seed: u64,
}

impl FairyWrenConfig {
    pub fn new(
        span: Span,
        log_handle: PlacementHandle,
        hot_handle: PlacementHandle,
        cold_handle: PlacementHandle,
    ) -> FairyWrenConfig {
        FairyWrenConfig {
            span,
            log_handle,
            hot_handle,
            cold_handle,
            eu_bytes: 0,
            log_fraction: 0.05,
            op: 0.05,
            victims: Victims::CostBenefit,
            slices: 64,
            segment_bytes: 0,
            cold_pages: 1,
            cold_every: 5,
            threshold: 2,
            admit_probability: 0.9,
            expected_object_bytes: 200,
            seed: 0x6661_6972_7977_7265,
        }
    }
}

/// Sizes derived from a checked configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub eu_pages: u32,
    /// Erase units of FwLog (the first ones of the span) and of FwSets (the rest).
    pub log_eus: u32,
    pub set_eus: u32,
    pub segment_pages: u32,
    pub slices: u32,
    /// Pages of each segment that belong to one slice.
    pub slice_pages: u32,
    pub sets: u32,
    pub cold_pages: u32,
    pub buckets_per_slice: u32,
    pub tables_per_slice: u32,
    pub slots_per_table: usize,
    pub bloom_bits: usize,
    pub hit_bits: usize,
    pub victims: Victims,
}

fn bad(msg: String) -> Error {
    Error::Config(format!("fairywren: {msg}"))
}

impl Layout {
    pub fn new(c: &FairyWrenConfig) -> Result<Layout> {
        let geo = c.span.check("fairywren")?;
        let page = PAGE as u64;
        if !page.is_multiple_of(u64::from(geo.block_size)) {
            return Err(bad(format!(
                "the device's {}-byte blocks do not divide 4 KiB pages",
                geo.block_size
            )));
        }
        for (what, h) in [
            ("FwLog", c.log_handle),
            ("hot", c.hot_handle),
            ("cold", c.cold_handle),
        ] {
            geo.check_handle(h)
                .map_err(|e| bad(format!("{what} {e}")))?;
        }
        let eu = if c.eu_bytes == 0 {
            geo.reclaim_unit_bytes
        } else {
            c.eu_bytes
        };
        if eu == 0 || !eu.is_multiple_of(page) {
            return Err(bad(format!(
                "erase unit of {eu} bytes: must be a positive multiple of 4 KiB (the device reports no reclaim unit: set eu_bytes)"
            )));
        }
        if !(c.log_fraction > 0.0 && c.log_fraction < 1.0) {
            return Err(bad(format!(
                "log_fraction {} must be in (0, 1)",
                c.log_fraction
            )));
        }
        if !(c.op > 0.0 && c.op < 0.5) {
            return Err(bad(format!("op {} must be in (0, 0.5)", c.op)));
        }
        if !(0.0..=1.0).contains(&c.admit_probability) {
            return Err(bad(format!(
                "admit_probability {} must be in [0, 1]",
                c.admit_probability
            )));
        }
        if c.slices == 0
            || c.cold_every == 0
            || c.threshold == 0
            || c.cold_pages == 0
            || c.expected_object_bytes == 0
        {
            return Err(bad(
                "slices, cold_pages, cold_every, threshold and expected_object_bytes must be at least 1".into(),
            ));
        }
        let eu_pages = eu / page;
        let eus = c.span.len / eu;
        let log_eus = ((eus as f64 * c.log_fraction).round() as u64).max(MIN_LOG_EUS);
        let segment_pages = match c.segment_bytes {
            0 if eu_pages.is_multiple_of(4) && eu_pages / 4 >= MIN_SLICE_PAGES => eu_pages / 4,
            0 => eu_pages,
            s if s.is_multiple_of(page) && eu_pages.is_multiple_of(s / page) => s / page,
            s => {
                return Err(bad(format!(
                "segment_bytes {s} must be a multiple of 4 KiB dividing the {eu}-byte erase unit"
            )))
            }
        };
        let min_set_eus = u64::from(SETS_RESERVE) + 4;
        if eus < log_eus + min_set_eus {
            return Err(bad(format!(
                "a {}-byte span holds {eus} erase units of {eu} bytes; FairyWREN needs at least {} ({log_eus} for FwLog, {min_set_eus} for FwSets)",
                c.span.len,
                log_eus + min_set_eus
            )));
        }
        let set_eus = eus - log_eus;
        // Slices: a power of two, each with at least one page of every segment.
        let mut slices = c.slices.next_power_of_two().min(1 << 16);
        while slices > 1 && u64::from(slices) * MIN_SLICE_PAGES > segment_pages {
            slices /= 2;
        }
        let slice_pages = segment_pages / u64::from(slices);
        let log_pages_per_slice = log_eus * (eu_pages / segment_pages) * slice_pages;
        if log_pages_per_slice > u64::from(MAX_PAGES) {
            return Err(bad(format!(
                "{log_pages_per_slice} FwLog pages per slice exceed the index's {MAX_PAGES}; use more slices or a smaller log"
            )));
        }
        // Live subsets (1 + cold_pages pages per set at most) must leave `op` of FwSets and the
        // reserve free.
        let set_pages = set_eus * eu_pages;
        let usable = (set_pages as f64 * (1.0 - c.op)) as u64;
        let usable = usable.min((set_eus - u64::from(SETS_RESERVE) - 2) * eu_pages);
        let pages_per_set = 1 + u64::from(c.cold_pages);
        let sets = u32::try_from(usable / pages_per_set)
            .ok()
            .filter(|s| s.checked_mul(pages_per_set as u32).is_some())
            .ok_or_else(|| bad("more than 2^32 subset pages".into()))?;
        if sets < slices {
            return Err(bad(format!("{sets} sets for {slices} slices")));
        }
        let buckets = sets.div_ceil(slices);
        let per_page = page / (u64::from(c.expected_object_bytes) + crate::object::HEADER as u64);
        let expected = (log_pages_per_slice * per_page.max(1)) as usize;
        let tables = (expected * 2)
            .div_ceil(MAX_SLOTS)
            .clamp(1, buckets as usize) as u32;
        let per_set = PAGE.div_ceil(c.expected_object_bytes as usize);
        Ok(Layout {
            eu_pages: eu_pages as u32,
            log_eus: log_eus as u32,
            set_eus: set_eus as u32,
            segment_pages: segment_pages as u32,
            slices,
            slice_pages: slice_pages as u32,
            sets,
            cold_pages: c.cold_pages,
            buckets_per_slice: buckets,
            tables_per_slice: tables,
            slots_per_table: expected.div_ceil(tables as usize),
            bloom_bits: 3 * per_set,
            hit_bits: per_set,
            victims: c.victims,
        })
    }

    pub fn eu_bytes(&self) -> u64 {
        u64::from(self.eu_pages) * PAGE as u64
    }

    pub fn segments_per_eu(&self) -> u32 {
        self.eu_pages / self.segment_pages
    }
}
