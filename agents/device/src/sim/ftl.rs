//! Flash translation layer of the simulated SSD: the logical-to-physical map, reclaim unit
//! allocation per reclaim unit handle, and where pages land. Garbage collection is in `gc.rs`.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::device::{Error, Result};
use crate::nvme::logpage::RuhType;

use super::config::{Layout, SimConfig};
use super::gc::VictimIndex;
use super::stats::{EventLog, HandleCounters, SimStats};

/// Marks an unmapped logical page, an invalid physical page, or an empty list link.
pub(crate) const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RuState {
    Free,
    Open,
    Closed,
    Reclaiming,
}

/// Who is filling (or filled) a reclaim unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Writer {
    Host { ruh: u32 },
    Gc,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct RuMeta {
    pub valid: u32,
    pub written: u32,
    pub state: RuState,
    /// Global GC domain (group × domains_per_group + local domain).
    pub domain: u32,
    pub writer: Writer,
    pub erase_count: u32,
}

/// Where page contents live: nowhere (metadata-only simulation) or in a file laid out by
/// physical page, so relocation really copies bytes.
pub(crate) enum Media {
    None,
    File {
        file: File,
        page_size: u64,
        scratch: Vec<u8>,
    },
}

impl Media {
    fn open(path: &Path, physical_bytes: u64, page_size: u32) -> Result<Media> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io("open simulator backing file", e))?;
        file.set_len(physical_bytes)
            .map_err(|e| Error::io("size simulator backing file", e))?;
        Ok(Media::File {
            file,
            page_size: u64::from(page_size),
            scratch: vec![0; page_size as usize],
        })
    }

    #[inline]
    pub(crate) fn write_page(&mut self, ppn: u32, data: &[u8]) -> Result<()> {
        if let Media::File {
            file, page_size, ..
        } = self
        {
            file.write_all_at(data, u64::from(ppn) * *page_size)
                .map_err(|e| Error::io("write backing file", e))?;
        }
        Ok(())
    }

    pub(crate) fn read_page(&mut self, ppn: u32, out: &mut [u8]) -> Result<()> {
        match self {
            Media::File {
                file, page_size, ..
            } => file
                .read_exact_at(out, u64::from(ppn) * *page_size)
                .map_err(|e| Error::io("read backing file", e)),
            Media::None => {
                out.fill(0);
                Ok(())
            }
        }
    }

    #[inline]
    pub(crate) fn copy_page(&mut self, from: u32, to: u32) -> Result<()> {
        if let Media::File {
            file,
            page_size,
            scratch,
        } = self
        {
            file.read_exact_at(scratch, u64::from(from) * *page_size)
                .map_err(|e| Error::io("relocate (read)", e))?;
            file.write_all_at(scratch, u64::from(to) * *page_size)
                .map_err(|e| Error::io("relocate (write)", e))?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        if let Media::File { file, .. } = self {
            file.sync_data()
                .map_err(|e| Error::io("sync backing file", e))?;
        }
        Ok(())
    }
}

/// Per-handle accounting: which handle wrote each logical page's current data, and each
/// handle's counters. Optional because it costs two bytes per logical page and a few stores per
/// write that trace simulation does not need.
pub(crate) struct HandleLedger {
    /// Global handle index (group × handles + handle) per logical page; meaningful only while
    /// the page is mapped.
    owner: Vec<u16>,
    pub(crate) counters: Vec<HandleCounters>,
}

impl HandleLedger {
    fn new(logical_pages: u32, handles: u32) -> HandleLedger {
        HandleLedger {
            owner: vec![0; logical_pages as usize],
            counters: vec![HandleCounters::default(); handles as usize],
        }
    }

    /// The host wrote `lpn` through global handle `h`; `overwrote` if it held data before.
    #[inline]
    fn host_write(&mut self, lpn: u32, h: u32, overwrote: bool) {
        let o = &mut self.owner[lpn as usize];
        if overwrote {
            self.counters[usize::from(*o)].valid_pages -= 1;
        }
        *o = h as u16;
        let c = &mut self.counters[h as usize];
        c.host_pages_written += 1;
        c.valid_pages += 1;
    }

    #[inline]
    fn deallocated(&mut self, lpn: u32) {
        let c = &mut self.counters[usize::from(self.owner[lpn as usize])];
        c.pages_deallocated += 1;
        c.valid_pages -= 1;
    }

    #[inline]
    pub(crate) fn relocated(&mut self, lpn: u32) {
        self.counters[usize::from(self.owner[lpn as usize])].gc_pages_written += 1;
    }

    fn heap_bytes(&self) -> usize {
        self.owner.capacity() * std::mem::size_of::<u16>()
            + self.counters.capacity() * std::mem::size_of::<HandleCounters>()
    }
}

/// All simulator state. Page numbers are `u32`: physical page = unit × pages_per_ru + offset.
pub(crate) struct Ftl {
    pub(crate) layout: Layout,
    pub(crate) l2p: Vec<u32>,
    pub(crate) p2l: Vec<u32>,
    pub(crate) rus: Vec<RuMeta>,
    pub(crate) free: Vec<VecDeque<u32>>,
    /// Open host unit per (group, handle).
    host_open: Vec<Option<u32>>,
    /// Open GC destination unit per global domain.
    pub(crate) gc_open: Vec<Option<u32>>,
    /// Local GC domain of each handle: 0 is shared by the initially isolated handles, each
    /// persistently isolated handle has its own.
    ruh_domain: Vec<u32>,
    pub(crate) domains_per_group: u32,
    pub(crate) reserve: u32,
    pub(crate) victims: VictimIndex,
    pub(crate) stats: SimStats,
    pub(crate) events: EventLog,
    pub(crate) media: Media,
    /// Per-handle counters, when asked for ([`super::SimSsd::with_handle_accounting`]).
    pub(crate) ledger: Option<HandleLedger>,
}

impl Ftl {
    pub(crate) fn new(cfg: &SimConfig, handle_accounting: bool) -> Result<Ftl> {
        let layout = cfg.layout()?;
        let mut next_domain = 1;
        let ruh_domain = cfg
            .handles
            .iter()
            .map(|t| match t {
                RuhType::PersistentlyIsolated => {
                    next_domain += 1;
                    next_domain - 1
                }
                _ => 0,
            })
            .collect();
        let domains_per_group = next_domain;
        let domains = (domains_per_group * layout.groups) as usize;
        let physical_pages = layout.total_rus as usize * layout.pages_per_ru as usize;
        let media = match &cfg.backing_file {
            None => Media::None,
            Some(p) => Media::open(
                p,
                physical_pages as u64 * u64::from(layout.page_size),
                layout.page_size,
            )?,
        };
        let free = (0..layout.groups)
            .map(|g| (g * layout.rus_per_group..(g + 1) * layout.rus_per_group).collect())
            .collect();
        Ok(Ftl {
            l2p: vec![NIL; layout.logical_pages as usize],
            p2l: vec![NIL; physical_pages],
            rus: vec![
                RuMeta {
                    valid: 0,
                    written: 0,
                    state: RuState::Free,
                    domain: 0,
                    writer: Writer::Gc,
                    erase_count: 0
                };
                layout.total_rus as usize
            ],
            free,
            host_open: vec![None; (layout.groups * layout.ruhs) as usize],
            gc_open: vec![None; domains],
            ruh_domain,
            domains_per_group,
            reserve: cfg.gc_reserve_rus,
            victims: VictimIndex::new(domains, layout.total_rus as usize, layout.pages_per_ru),
            stats: SimStats::default(),
            events: EventLog::new(cfg.max_events),
            media,
            ledger: handle_accounting
                .then(|| HandleLedger::new(layout.logical_pages, layout.groups * layout.ruhs)),
            layout,
        })
    }

    pub(crate) fn open(&mut self, ru: u32, domain: u32, writer: Writer) {
        let m = &mut self.rus[ru as usize];
        m.state = RuState::Open;
        m.domain = domain;
        m.writer = writer;
        m.valid = 0;
        m.written = 0;
    }

    /// A full unit becomes a garbage collection candidate.
    pub(crate) fn close(&mut self, ru: u32) {
        let m = &mut self.rus[ru as usize];
        m.state = RuState::Closed;
        let (domain, valid) = (m.domain, m.valid);
        self.victims.insert(domain, ru, valid);
    }

    /// Reserves the next page of an open unit.
    #[inline]
    pub(crate) fn take_page(&mut self, ru: u32) -> u32 {
        let m = &mut self.rus[ru as usize];
        let ppn = ru * self.layout.pages_per_ru + m.written;
        m.written += 1;
        ppn
    }

    /// Next page for a host write through handle `ruh` of `group`, opening a fresh unit (and
    /// collecting garbage first if the group is short of free units) when the current is full.
    #[inline]
    fn append_host(&mut self, group: u32, ruh: u32) -> Result<u32> {
        let slot = (group * self.layout.ruhs + ruh) as usize;
        if let Some(ru) = self.host_open[slot] {
            if self.rus[ru as usize].written < self.layout.pages_per_ru {
                return Ok(self.take_page(ru));
            }
        }
        self.open_host_unit(group, ruh, slot)
    }

    #[cold]
    fn open_host_unit(&mut self, group: u32, ruh: u32, slot: usize) -> Result<u32> {
        self.ensure_free(group)?;
        let ru = self.free[group as usize]
            .pop_front()
            .ok_or(Error::ReclaimGroupFull {
                group: group as u16,
            })?;
        // Close only after getting a new unit, so the old one's pages are all mapped.
        if let Some(full) = self.host_open[slot].take() {
            self.close(full);
        }
        let domain = group * self.domains_per_group + self.ruh_domain[ruh as usize];
        self.open(ru, domain, Writer::Host { ruh });
        self.host_open[slot] = Some(ru);
        Ok(self.take_page(ru))
    }

    #[inline]
    fn invalidate(&mut self, ppn: u32) {
        self.p2l[ppn as usize] = NIL;
        let ru = ppn / self.layout.pages_per_ru;
        let m = &mut self.rus[ru as usize];
        let before = m.valid;
        m.valid = before - 1;
        if m.state == RuState::Closed {
            let domain = m.domain;
            self.victims.decrement(domain, ru, before);
        }
    }

    /// Writes logical page `lpn` through handle `ruh` of `group`. `data` is the page content
    /// when the simulator keeps data.
    #[inline]
    pub(crate) fn write_page(
        &mut self,
        lpn: u32,
        group: u32,
        ruh: u32,
        data: Option<&[u8]>,
    ) -> Result<()> {
        // Get space first: if the group is full nothing has changed yet.
        let ppn = self.append_host(group, ruh)?;
        let old = self.l2p[lpn as usize];
        if old != NIL {
            self.invalidate(old);
        }
        if let Some(d) = data {
            self.media.write_page(ppn, d)?;
        }
        self.l2p[lpn as usize] = ppn;
        self.p2l[ppn as usize] = lpn;
        self.rus[(ppn / self.layout.pages_per_ru) as usize].valid += 1;
        self.stats.host_pages_written += 1;
        if let Some(l) = &mut self.ledger {
            l.host_write(lpn, group * self.layout.ruhs + ruh, old != NIL);
        }
        Ok(())
    }

    pub(crate) fn read_page(&mut self, lpn: u32, out: &mut [u8]) -> Result<()> {
        self.stats.host_pages_read += 1;
        match self.l2p[lpn as usize] {
            NIL => {
                out.fill(0);
                Ok(())
            }
            ppn => self.media.read_page(ppn, out),
        }
    }

    pub(crate) fn deallocate_page(&mut self, lpn: u32) {
        let old = self.l2p[lpn as usize];
        if old != NIL {
            self.invalidate(old);
            self.l2p[lpn as usize] = NIL;
            self.stats.pages_deallocated += 1;
            if let Some(l) = &mut self.ledger {
                l.deallocated(lpn);
            }
        }
    }

    pub(crate) fn sync(&mut self) -> Result<()> {
        self.media.sync()
    }

    /// Pages still writable in the unit `ruh` of `group` is filling (a full unit's worth
    /// when none is open: the next write opens one).
    pub(crate) fn available_in_open(&self, group: u32, ruh: u32) -> u32 {
        let slot = (group * self.layout.ruhs + ruh) as usize;
        match self.host_open.get(slot).copied().flatten() {
            Some(ru) => self.layout.pages_per_ru - self.rus[ru as usize].written,
            None => self.layout.pages_per_ru,
        }
    }

    /// Bytes of heap the simulator's metadata takes (maps, unit table, victim index, ledger).
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.l2p.capacity() * size_of::<u32>()
            + self.p2l.capacity() * size_of::<u32>()
            + self.rus.capacity() * size_of::<RuMeta>()
            + self
                .free
                .iter()
                .map(|q| q.capacity() * size_of::<u32>())
                .sum::<usize>()
            + (self.host_open.capacity() + self.gc_open.capacity()) * size_of::<Option<u32>>()
            + self.victims.heap_bytes()
            + self.ledger.as_ref().map_or(0, HandleLedger::heap_bytes)
    }

    /// Checks internal invariants (tests): valid counts match the maps, every mapped page
    /// points back, free units are empty.
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        let ppr = self.layout.pages_per_ru;
        let mut valid = vec![0u32; self.rus.len()];
        for (lpn, &ppn) in self.l2p.iter().enumerate() {
            if ppn == NIL {
                continue;
            }
            if self.p2l[ppn as usize] != lpn as u32 {
                return Err(format!(
                    "lpn {lpn} -> ppn {ppn} -> {}",
                    self.p2l[ppn as usize]
                ));
            }
            valid[(ppn / ppr) as usize] += 1;
        }
        for (ru, m) in self.rus.iter().enumerate() {
            if m.valid != valid[ru] {
                return Err(format!(
                    "unit {ru} counts {} valid pages, maps say {}",
                    m.valid, valid[ru]
                ));
            }
            if m.state == RuState::Free && (m.valid != 0 || m.written != 0) {
                return Err(format!("free unit {ru} is not empty"));
            }
        }
        let live = self.p2l.iter().filter(|&&l| l != NIL).count();
        let mapped = self.l2p.iter().filter(|&&p| p != NIL).count();
        if live != mapped {
            return Err(format!(
                "{live} live physical pages but {mapped} mapped logical pages"
            ));
        }
        if let Some(l) = &self.ledger {
            let mut valid = vec![0u64; l.counters.len()];
            for (lpn, &ppn) in self.l2p.iter().enumerate() {
                if ppn != NIL {
                    valid[usize::from(l.owner[lpn])] += 1;
                }
            }
            for (h, c) in l.counters.iter().enumerate() {
                if c.valid_pages != valid[h] {
                    return Err(format!(
                        "handle {h} counts {} valid pages, the maps say {}",
                        c.valid_pages, valid[h]
                    ));
                }
            }
            let host: u64 = l.counters.iter().map(|c| c.host_pages_written).sum();
            let gc: u64 = l.counters.iter().map(|c| c.gc_pages_written).sum();
            if host != self.stats.host_pages_written || gc != self.stats.gc_pages_written {
                return Err(format!(
                    "handles sum to {host} host and {gc} relocated pages, the device counts {} and {}",
                    self.stats.host_pages_written, self.stats.gc_pages_written
                ));
            }
        }
        Ok(())
    }
}
