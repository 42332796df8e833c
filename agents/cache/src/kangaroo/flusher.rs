//! The flusher (§5.3): moves objects from KLog to KSet so each partition keeps a free segment.
//!
//! For every set that objects of the flushed segments map to, it enumerates all of that set's
//! objects in KLog (one index bucket) and applies threshold admission: at least `n` objects →
//! all of them are written into the set at once; fewer → the flushed ones are dropped or, if
//! they were hit while in KLog, readmitted at the head of the log.
//!
//! It runs on the writer's thread when a partition's buffer is sealed into the last free slot,
//! not on a thread of its own: an engine is driven by one thread at a time (`&mut self`), so
//! this keeps the same invariant (one free segment per partition) without locking.

use std::borrow::Cow;
use std::collections::HashMap;

use super::admission::{threshold, GroupFate};
use super::index::{Entry, SlotId};
use super::page::{self, Obj, PAGE};
use super::{rrip, tag_of, FlushMode, Kangaroo, Readmit};
use crate::object::key_hash;
use crate::Result;

impl Kangaroo {
    /// Writes a partition's buffer and, if that took its last free slot, flushes.
    pub(super) fn seal_and_flush(&mut self, part: u32) -> Result<()> {
        self.klog.seal(&self.span, part)?;
        if self.klog.full(part) {
            let segs = self.klog.on_flash(part);
            match self.flush {
                FlushMode::OneSegment => self.flush_segments(part, &segs[..1])?,
                FlushMode::WholeLog => self.flush_segments(part, &segs)?,
            }
        }
        Ok(())
    }

    /// Flushes the oldest `segs` of a partition (oldest first) and frees them.
    pub(super) fn flush_segments(&mut self, part: u32, segs: &[u32]) -> Result<()> {
        if segs.len() == 1 {
            self.k.segment_flushes += 1;
        } else {
            self.k.whole_log_flushes += 1;
        }
        let data = self.klog.read_segments(&self.span, part, segs)?;
        let pps = self.klog.pages_per_segment;
        let victim = |page: u32| segs.contains(&(page / pps));
        for bucket in 0..self.layout.buckets_per_partition {
            if self.index.iter(part, bucket).any(|(_, e)| victim(e.page)) {
                let entries = self.index.bucket(part, bucket);
                self.flush_group(part, bucket, &entries, segs, &data)?;
            }
        }
        self.klog
            .release_oldest(&self.span, part, segs.len() as u32)
    }

    /// The bytes of a KLog page: from the segments being flushed, or from the log.
    fn flush_page<'a>(
        &'a self,
        part: u32,
        page: u32,
        segs: &[u32],
        data: &'a [u8],
    ) -> Result<Cow<'a, [u8]>> {
        let pps = self.klog.pages_per_segment;
        match segs.iter().position(|&s| s == page / pps) {
            Some(i) => {
                let at = (i * pps as usize + (page % pps) as usize) * PAGE;
                Ok(Cow::Borrowed(&data[at..at + PAGE]))
            }
            None => self.klog.read_page(&self.span, part, page),
        }
    }

    /// Finds each entry's object (see [`resolve_entries`]) in the pages being flushed or the log.
    fn resolve(
        &self,
        part: u32,
        set: u32,
        entries: &[(SlotId, Entry)],
        segs: &[u32],
        data: &[u8],
    ) -> Result<Vec<Option<Obj>>> {
        resolve_entries(
            entries,
            |p| self.flush_page(part, p, segs, data),
            |key| self.set_of(key_hash(key)) == set,
        )
    }

    /// The set of a key hash: its high bits scaled to the set count (the tag uses the low ones).
    pub(super) fn set_of(&self, h: u64) -> u32 {
        ((u128::from(h) * u128::from(self.layout.sets)) >> 64) as u32
    }

    fn flush_group(
        &mut self,
        part: u32,
        bucket: u32,
        entries: &[(SlotId, Entry)],
        segs: &[u32],
        data: &[u8],
    ) -> Result<()> {
        let set = bucket * self.layout.partitions + part;
        let objs = self.resolve(part, set, entries, segs, data)?;
        let pps = self.klog.pages_per_segment;
        let is_victim = |e: &Entry| segs.contains(&(e.page / pps));
        self.k.groups_flushed += 1;
        self.k.victims_flushed += entries.iter().filter(|(_, e)| is_victim(e)).count() as u64;
        let mut drop_tags = Vec::new();
        match threshold(entries.len(), self.threshold) {
            GroupFate::MoveToKSet => {
                self.k.groups_admitted += 1;
                let mut incoming = Vec::with_capacity(objs.len());
                for ((slot, e), obj) in entries.iter().zip(objs) {
                    self.index.remove(part, bucket, *slot);
                    match obj {
                        Some(o) => incoming.push(o),
                        None => drop_tags.push(e.tag),
                    }
                }
                self.k.objects_moved += incoming.len() as u64;
                self.kset
                    .update(&self.span, set, incoming, &[], &drop_tags, false)?;
            }
            GroupFate::BelowThreshold => {
                let mut dropped = Vec::new();
                for ((slot, e), obj) in entries.iter().zip(objs) {
                    if !is_victim(e) {
                        continue;
                    }
                    self.index.remove(part, bucket, *slot);
                    match obj {
                        Some(o) if self.readmit_hits && o.rrip < rrip::LONG => {
                            self.k.objects_readmitted += 1;
                            self.readmits.push(Readmit {
                                loc_part: part,
                                bucket,
                                set,
                                tag: e.tag,
                                obj: o,
                            });
                        }
                        Some(o) => dropped.push(o),
                        None => drop_tags.push(e.tag),
                    }
                }
                self.k.objects_dropped += dropped.len() as u64;
                self.k.objects_dropped_bytes +=
                    dropped.iter().map(|o| o.kset_cost() as u64).sum::<u64>();
                // An older copy of a dropped object in the set must not resurface: where there
                // is one, the newer copy replaces it.
                if (!dropped.is_empty() || !drop_tags.is_empty())
                    && self
                        .kset
                        .update(&self.span, set, dropped, &[], &drop_tags, true)?
                {
                    self.k.kset_replacements += 1;
                }
            }
        }
        Ok(())
    }
}

/// Finds each entry's object. Entries carry only a page and a tag, so an object matches an
/// entry when it is in that page, is one `keep` accepts (the set being written) and has that
/// tag; each object serves one entry. Each page is read and parsed once. Kangaroo's flusher
/// and FairyWREN's set writes both resolve their log entries with it.
pub(crate) fn resolve_entries<'a>(
    entries: &[(SlotId, Entry)],
    mut read_page: impl FnMut(u32) -> Result<Cow<'a, [u8]>>,
    keep: impl Fn(&[u8]) -> bool,
) -> Result<Vec<Option<Obj>>> {
    // Each page's objects of this set, with their tags, unclaimed.
    let mut pages: HashMap<u32, Vec<Option<(u16, Obj)>>> = HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    for (_, e) in entries {
        if let std::collections::hash_map::Entry::Vacant(slot) = pages.entry(e.page) {
            let bytes = read_page(e.page)?;
            let objs = page::parse_klog(&bytes)
                .objs
                .iter()
                .filter(|o| keep(o.key))
                .map(|o| {
                    let obj = Obj {
                        key: o.key.to_vec(),
                        value: o.value.to_vec(),
                        rrip: 0,
                    };
                    Some((tag_of(key_hash(o.key)), obj))
                })
                .collect();
            slot.insert(objs);
        }
        let candidates = pages.get_mut(&e.page).expect("inserted above");
        let hit = candidates
            .iter_mut()
            .find(|c| matches!(c, Some((tag, _)) if *tag == e.tag));
        out.push(hit.and_then(Option::take).map(|(_, mut o)| {
            o.rrip = e.rrip;
            o
        }));
    }
    Ok(out)
}
