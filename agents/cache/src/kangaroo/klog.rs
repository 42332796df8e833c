//! KLog (§5.2): a small log-structured cache split into independent partitions, each a
//! circular log of segments on flash with one segment buffered in DRAM.
//!
//! The slot the buffer will be written to is always free: when writing the buffer fills the
//! last free slot, the flusher empties the oldest segment (or, in the model's mode, the whole
//! log) before the next object is appended.

use std::borrow::Cow;

use lachesis_device::PlacementHandle;

use super::page::{self, PAGE};
use crate::dev::Span;
use crate::persist::{Dec, Enc};
use crate::Result;

pub struct Partition {
    /// The segment being filled, `pages_per_segment` pages.
    buf: Vec<u8>,
    /// Page of the buffer being filled and its fill offset.
    page: u32,
    off: usize,
    /// Slot the buffer goes to.
    pub head: u32,
    /// Oldest segment on flash.
    pub tail: u32,
    /// Segments on flash.
    pub written: u32,
}

pub struct KLog {
    pub parts: Vec<Partition>,
    /// Offset of partition 0's log within the engine's span.
    base: u64,
    pub pages_per_segment: u32,
    pub segments: u32,
    handle: PlacementHandle,
    scratch: Vec<u8>,
    pub segment_writes: u64,
    /// Segments freed after their objects were moved or dropped (the log evicting).
    pub segments_released: u64,
}

impl KLog {
    pub fn new(
        base: u64,
        parts: u32,
        segments: u32,
        pages_per_segment: u32,
        handle: PlacementHandle,
    ) -> KLog {
        let seg = pages_per_segment as usize * PAGE;
        let parts = (0..parts)
            .map(|_| Partition {
                buf: vec![0; seg],
                page: 0,
                off: 2,
                head: 0,
                tail: 0,
                written: 0,
            })
            .collect();
        KLog {
            parts,
            base,
            pages_per_segment,
            segments,
            handle,
            scratch: Vec::new(),
            segment_writes: 0,
            segments_released: 0,
        }
    }

    pub fn handle(&self) -> PlacementHandle {
        self.handle
    }

    pub fn segment_bytes(&self) -> u64 {
        u64::from(self.pages_per_segment) * PAGE as u64
    }

    fn part_bytes(&self) -> u64 {
        self.segment_bytes() * u64::from(self.segments)
    }

    /// Offset in the span of a page of a partition's log.
    pub fn page_offset(&self, part: u32, page: u32) -> u64 {
        self.base + u64::from(part) * self.part_bytes() + u64::from(page) * PAGE as u64
    }

    pub fn segment_of(&self, page: u32) -> u32 {
        page / self.pages_per_segment
    }

    /// Whether a page is in the DRAM buffer rather than on flash.
    pub fn is_buffered(&self, part: u32, page: u32) -> bool {
        let p = &self.parts[part as usize];
        self.segment_of(page) == p.head && p.written < self.segments
    }

    fn buffer_page(&self, part: u32, page: u32) -> &[u8] {
        let i = (page % self.pages_per_segment) as usize * PAGE;
        &self.parts[part as usize].buf[i..i + PAGE]
    }

    /// The bytes of a page, from the buffer or from flash.
    pub fn read_page(&self, span: &Span, part: u32, page: u32) -> Result<Cow<'_, [u8]>> {
        if self.is_buffered(part, page) {
            return Ok(Cow::Borrowed(self.buffer_page(part, page)));
        }
        let mut buf = vec![0u8; PAGE];
        span.read(self.page_offset(part, page), &mut buf)?;
        Ok(Cow::Owned(buf))
    }

    /// Reads whole segments of a partition from flash, concatenated.
    pub fn read_segments(&self, span: &Span, part: u32, segs: &[u32]) -> Result<Vec<u8>> {
        let seg = self.segment_bytes() as usize;
        let mut out = vec![0u8; seg * segs.len()];
        for (i, &s) in segs.iter().enumerate() {
            let page = s * self.pages_per_segment;
            span.read(
                self.page_offset(part, page),
                &mut out[i * seg..(i + 1) * seg],
            )?;
        }
        Ok(out)
    }

    /// Appends to the partition's buffer; returns the page, or `None` when the buffer is full
    /// and must be sealed first.
    pub fn try_append(&mut self, part: u32, key: &[u8], value: &[u8]) -> Option<u32> {
        let pps = self.pages_per_segment;
        let p = &mut self.parts[part as usize];
        loop {
            let start = p.page as usize * PAGE;
            let pg = &mut p.buf[start..start + PAGE];
            if let Some(off) = page::klog_append(pg, p.off, key, value, &mut self.scratch) {
                p.off = off;
                return Some(p.head * pps + p.page);
            }
            if p.page + 1 == pps {
                return None;
            }
            p.page += 1;
            p.off = page::klog_init(&mut p.buf[start + PAGE..start + 2 * PAGE]);
        }
    }

    /// Takes `key` out of a buffered page.
    pub fn remove_buffered(&mut self, part: u32, page: u32, key: &[u8]) {
        let in_seg = page % self.pages_per_segment;
        let p = &mut self.parts[part as usize];
        let start = in_seg as usize * PAGE;
        let off = page::klog_remove(&mut p.buf[start..start + PAGE], key);
        if in_seg == p.page {
            p.off = off;
        }
    }

    /// Writes the buffer to its slot and starts an empty one in the next slot. The caller
    /// makes sure that slot is free before appending again ([`KLog::full`]).
    pub fn seal(&mut self, span: &Span, part: u32) -> Result<()> {
        let off = self.page_offset(
            part,
            self.parts[part as usize].head * self.pages_per_segment,
        );
        let segments = self.segments;
        let p = &mut self.parts[part as usize];
        span.write(off, &p.buf, self.handle)?;
        self.segment_writes += 1;
        p.written += 1;
        p.head = (p.head + 1) % segments;
        p.buf.fill(0);
        p.page = 0;
        p.off = page::klog_init(&mut p.buf);
        Ok(())
    }

    /// Whether the partition's buffer holds no object.
    pub fn buffer_empty(&self, part: u32) -> bool {
        let p = &self.parts[part as usize];
        p.page == 0 && page::parse_klog(&p.buf[..PAGE]).objs.is_empty()
    }

    /// Every slot holds a segment: the buffer has nowhere to go.
    pub fn full(&self, part: u32) -> bool {
        self.parts[part as usize].written == self.segments
    }

    /// The segments on flash, oldest first.
    pub fn on_flash(&self, part: u32) -> Vec<u32> {
        let p = &self.parts[part as usize];
        (0..p.written)
            .map(|i| (p.tail + i) % self.segments)
            .collect()
    }

    /// Frees the oldest `n` segments (their objects have been moved or dropped) and trims them
    /// so the device never relocates their dead data.
    pub fn release_oldest(&mut self, span: &Span, part: u32, n: u32) -> Result<()> {
        for _ in 0..n {
            let tail = self.parts[part as usize].tail;
            span.trim(
                self.page_offset(part, tail * self.pages_per_segment),
                self.segment_bytes(),
            )?;
            let p = &mut self.parts[part as usize];
            p.tail = (p.tail + 1) % self.segments;
            p.written -= 1;
            self.segments_released += 1;
        }
        Ok(())
    }

    /// Saves each partition's position and its segment buffer (so saving writes no flash).
    pub fn save(&self, e: &mut Enc) {
        for p in &self.parts {
            e.u32(p.page);
            e.u64(p.off as u64);
            e.u32(p.head);
            e.u32(p.tail);
            e.u32(p.written);
            e.bytes(&p.buf);
        }
    }

    /// Reads what [`KLog::save`] wrote into a fresh KLog of the same geometry.
    pub fn load(&mut self, d: &mut Dec) -> Result<()> {
        let seg = self.segment_bytes() as usize;
        for i in 0..self.parts.len() {
            let page = d.u32("KLog buffer page")?;
            let off = d.u64("KLog buffer offset")?;
            let head = d.u32("KLog head")?;
            let tail = d.u32("KLog tail")?;
            let written = d.u32("KLog segments on flash")?;
            let buf = d.bytes("KLog segment buffer")?;
            let s = self.segments;
            if page >= self.pages_per_segment
                || off > PAGE as u64
                || head >= s
                || tail >= s
                || written > s
                || (tail + written) % s != head
                || buf.len() != seg
            {
                return Err(d.bad(format!("KLog partition {i} out of shape")));
            }
            let p = &mut self.parts[i];
            p.page = page;
            p.off = off as usize;
            p.head = head;
            p.tail = tail;
            p.written = written;
            p.buf.copy_from_slice(buf);
        }
        Ok(())
    }

    /// Whether a page holds data this log still owns: in a segment on flash or the buffer.
    pub fn page_live(&self, part: u32, page: u32) -> bool {
        let p = &self.parts[part as usize];
        let seg = self.segment_of(page);
        if seg >= self.segments {
            return false;
        }
        let age = (seg + self.segments - p.tail) % self.segments;
        age < p.written || self.is_buffered(part, page)
    }

    /// DRAM of the segment buffers.
    pub fn dram_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.buf.capacity()).sum::<usize>() + self.scratch.capacity()
    }
}
