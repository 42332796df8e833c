//! FwLog (§5.3, §5.4.2): the small log in front of FwSets, sliced and double-buffered.
//!
//! The log is a ring of segments laid over its erase units; a segment is shared by all slices,
//! each owning an equal, static run of its pages, so one active erase unit serves every slice.
//! An object goes to its slice in the primary segment buffer, else in the overflow buffer; when
//! a slice of the overflow buffer is more than half full (or full), the primary is written and
//! the overflow becomes the primary (Fig. 12). Both buffers already own their destination
//! segments, which are free, so an index entry's page tells where the object is for good.
//!
//! Erase units are written segment by segment from start to end and reclaimed whole: the
//! engine moves an erase unit's live objects into FwSets (nest packing) and then trims it.

use std::borrow::Cow;
use std::collections::VecDeque;

use lachesis_device::PlacementHandle;

use super::config::Layout;
use crate::dev::Span;
use crate::kangaroo::page::{self, PAGE};
use crate::persist::{Dec, Enc};
use crate::Result;

struct Seg {
    /// Destination segment (ring index).
    dest: u32,
    buf: Vec<u8>,
    /// Per slice: page being filled (within the slice's run) and its fill offset.
    fill: Vec<(u32, usize)>,
}

impl Seg {
    fn new(dest: u32, layout: &Layout) -> Seg {
        let mut s = Seg {
            dest,
            buf: vec![0; layout.segment_pages as usize * PAGE],
            fill: vec![(0, 0); layout.slices as usize],
        };
        s.reset(dest, layout.slice_pages);
        s
    }

    fn reset(&mut self, dest: u32, slice_pages: u32) {
        self.dest = dest;
        self.buf.fill(0);
        for (slice, f) in self.fill.iter_mut().enumerate() {
            let at = slice * slice_pages as usize * PAGE;
            *f = (0, page::klog_init(&mut self.buf[at..at + PAGE]));
        }
    }
}

/// Where an append went.
pub enum Append {
    /// Stored at this page; `rotate` when the overflow buffer's slice passed half full.
    Placed { page: u32, rotate: bool },
    /// The slice is full in both buffers: rotate first.
    Full,
}

pub struct FwLog {
    base: u64,
    segment_pages: u32,
    slice_pages: u32,
    segs_per_eu: u32,
    segments: u32,
    handle: PlacementHandle,
    primary: Seg,
    overflow: Seg,
    /// Erase units whose every segment is on flash, oldest first.
    flashed: VecDeque<u32>,
    scratch: Vec<u8>,
    pub segment_writes: u64,
    pub eu_erases: u64,
}

impl FwLog {
    pub fn new(base: u64, layout: &Layout, handle: PlacementHandle) -> FwLog {
        let segs_per_eu = layout.segments_per_eu();
        FwLog {
            base,
            segment_pages: layout.segment_pages,
            slice_pages: layout.slice_pages,
            segs_per_eu,
            segments: layout.log_eus * segs_per_eu,
            handle,
            primary: Seg::new(0, layout),
            overflow: Seg::new(1, layout),
            flashed: VecDeque::new(),
            scratch: Vec::new(),
            segment_writes: 0,
            eu_erases: 0,
        }
    }

    pub fn handle(&self) -> PlacementHandle {
        self.handle
    }

    pub fn segment_bytes(&self) -> u64 {
        u64::from(self.segment_pages) * PAGE as u64
    }

    fn eu_bytes(&self) -> u64 {
        self.segment_bytes() * u64::from(self.segs_per_eu)
    }

    /// Segment of an index page (pages are numbered per slice).
    pub fn segment_of(&self, page: u32) -> u32 {
        page / self.slice_pages
    }

    pub fn eu_of(&self, page: u32) -> u32 {
        self.segment_of(page) / self.segs_per_eu
    }

    /// Byte offset of a slice's page within its segment.
    fn in_segment(&self, slice: u32, page: u32) -> usize {
        (slice * self.slice_pages + page % self.slice_pages) as usize * PAGE
    }

    fn buffer(&self, page: u32) -> Option<&Seg> {
        let seg = self.segment_of(page);
        [&self.primary, &self.overflow]
            .into_iter()
            .find(|s| s.dest == seg)
    }

    pub fn is_buffered(&self, page: u32) -> bool {
        self.buffer(page).is_some()
    }

    /// The bytes of a slice's page, from a buffer or from flash.
    pub fn read_page(&self, span: &Span, slice: u32, page: u32) -> Result<Cow<'_, [u8]>> {
        let at = self.in_segment(slice, page);
        if let Some(s) = self.buffer(page) {
            return Ok(Cow::Borrowed(&s.buf[at..at + PAGE]));
        }
        let mut buf = vec![0u8; PAGE];
        let off = self.base + u64::from(self.segment_of(page)) * self.segment_bytes() + at as u64;
        span.read(off, &mut buf)?;
        Ok(Cow::Owned(buf))
    }

    fn try_seg(
        seg: &mut Seg,
        slice: u32,
        slice_pages: u32,
        key: &[u8],
        value: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Option<u32> {
        let (mut p, mut off) = seg.fill[slice as usize];
        loop {
            let at = (slice * slice_pages + p) as usize * PAGE;
            if let Some(o) =
                page::klog_append(&mut seg.buf[at..at + PAGE], off, key, value, scratch)
            {
                seg.fill[slice as usize] = (p, o);
                return Some(seg.dest * slice_pages + p);
            }
            if p + 1 == slice_pages {
                seg.fill[slice as usize] = (p, off);
                return None;
            }
            p += 1;
            off = page::klog_init(&mut seg.buf[at + PAGE..at + 2 * PAGE]);
        }
    }

    /// Appends to the slice in the primary buffer, else in the overflow buffer.
    pub fn append(&mut self, slice: u32, key: &[u8], value: &[u8]) -> Append {
        let sp = self.slice_pages;
        if let Some(page) =
            Self::try_seg(&mut self.primary, slice, sp, key, value, &mut self.scratch)
        {
            return Append::Placed {
                page,
                rotate: false,
            };
        }
        match Self::try_seg(&mut self.overflow, slice, sp, key, value, &mut self.scratch) {
            Some(page) => {
                let (p, off) = self.overflow.fill[slice as usize];
                let used = p as usize * PAGE + off;
                Append::Placed {
                    page,
                    rotate: 2 * used > sp as usize * PAGE,
                }
            }
            None => Append::Full,
        }
    }

    /// Takes `key` out of a buffered page (it was replaced, deleted or moved to FwSets), so no
    /// dead copy of it reaches flash.
    pub fn remove_buffered(&mut self, slice: u32, page: u32, key: &[u8]) {
        let at = self.in_segment(slice, page);
        let seg = self.segment_of(page);
        let s = if self.primary.dest == seg {
            &mut self.primary
        } else {
            &mut self.overflow
        };
        let off = page::klog_remove(&mut s.buf[at..at + PAGE], key);
        let f = &mut s.fill[slice as usize];
        if f.0 == page % self.slice_pages {
            f.1 = off;
        }
    }

    /// The segment the next overflow buffer will own, and the erase unit that must be
    /// reclaimed first if that segment still holds data.
    pub fn next_needs(&self) -> Option<u32> {
        let next = (self.overflow.dest + 1) % self.segments;
        let eu = next / self.segs_per_eu;
        (next.is_multiple_of(self.segs_per_eu) && self.flashed.front() == Some(&eu)).then_some(eu)
    }

    /// Writes the primary buffer to its segment; the overflow becomes the primary and a new
    /// overflow takes the next segment, which the caller has freed ([`FwLog::next_needs`]).
    pub fn rotate(&mut self, span: &Span) -> Result<()> {
        debug_assert!(self.next_needs().is_none());
        let dest = self.primary.dest;
        span.write(
            self.base + u64::from(dest) * self.segment_bytes(),
            &self.primary.buf,
            self.handle,
        )?;
        self.segment_writes += 1;
        if (dest + 1).is_multiple_of(self.segs_per_eu) {
            self.flashed.push_back(dest / self.segs_per_eu);
        }
        let next = (self.overflow.dest + 1) % self.segments;
        std::mem::swap(&mut self.primary, &mut self.overflow);
        self.overflow.reset(next, self.slice_pages);
        Ok(())
    }

    /// The oldest erase unit on flash.
    pub fn oldest(&self) -> Option<u32> {
        self.flashed.front().copied()
    }

    /// Deallocates the oldest erase unit once nothing in the index points into it.
    pub fn erase_oldest(&mut self, span: &Span) -> Result<()> {
        if let Some(eu) = self.flashed.pop_front() {
            span.trim(self.base + u64::from(eu) * self.eu_bytes(), self.eu_bytes())?;
            self.eu_erases += 1;
        }
        Ok(())
    }

    /// Whether an index page lies in a segment holding this log's data: a buffered one, one
    /// of a unit on flash, or one already written of the unit being filled.
    pub fn page_live(&self, page: u32) -> bool {
        let seg = self.segment_of(page);
        let eu = seg / self.segs_per_eu;
        let current = self.primary.dest / self.segs_per_eu;
        self.is_buffered(page)
            || self.flashed.contains(&eu)
            || (eu == current && seg < self.primary.dest)
    }

    /// Saves both segment buffers (so saving writes no flash) and the units on flash.
    pub fn save(&self, e: &mut Enc) {
        for s in [&self.primary, &self.overflow] {
            e.u32(s.dest);
            e.bytes(&s.buf);
            e.u32s(s.fill.iter().map(|f| f.0));
            e.u32s(s.fill.iter().map(|f| f.1 as u32));
        }
        e.u32s(self.flashed.iter().copied());
    }

    /// Reads what [`FwLog::save`] wrote into a fresh FwLog of the same layout; changes nothing
    /// on an error.
    pub fn load(&mut self, d: &mut Dec) -> Result<()> {
        let eus = self.segments / self.segs_per_eu;
        let mut segs = Vec::with_capacity(2);
        for which in ["primary", "overflow"] {
            let dest = d.u32("FwLog buffer segment")?;
            let buf = d.bytes("FwLog buffer")?;
            let pages = d.u32s("FwLog buffer pages")?;
            let offs = d.u32s("FwLog buffer offsets")?;
            let slices = self.primary.fill.len();
            if dest >= self.segments
                || buf.len() != self.primary.buf.len()
                || pages.len() != slices
                || offs.len() != slices
                || pages.iter().any(|&p| p >= self.slice_pages)
                || offs.iter().any(|&o| o as usize > PAGE)
            {
                return Err(d.bad(format!("FwLog {which} buffer out of shape")));
            }
            segs.push(Seg {
                dest,
                buf: buf.to_vec(),
                fill: pages
                    .into_iter()
                    .zip(offs.into_iter().map(|o| o as usize))
                    .collect(),
            });
        }
        let flashed: VecDeque<u32> = d.u32s("FwLog units on flash")?.into();
        let (overflow, primary) = (segs.pop().expect("two"), segs.pop().expect("two"));
        let buffered = [
            primary.dest / self.segs_per_eu,
            overflow.dest / self.segs_per_eu,
        ];
        let consecutive = flashed
            .iter()
            .zip(flashed.iter().skip(1))
            .all(|(a, b)| (a + 1) % eus == *b);
        if overflow.dest != (primary.dest + 1) % self.segments
            || flashed.len() as u32 >= eus
            || flashed.iter().any(|eu| *eu >= eus || buffered.contains(eu))
            || !consecutive
        {
            return Err(d.bad("FwLog buffers and units on flash disagree"));
        }
        (self.primary, self.overflow, self.flashed) = (primary, overflow, flashed);
        Ok(())
    }

    /// DRAM of the two segment buffers.
    pub fn dram_bytes(&self) -> usize {
        self.primary.buf.capacity()
            + self.overflow.buf.capacity()
            + (self.primary.fill.capacity() + self.overflow.fill.capacity()) * 16
            + self.scratch.capacity()
            + self.flashed.capacity() * 4
    }
}
