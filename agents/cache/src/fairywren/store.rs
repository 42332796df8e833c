//! The log-structured page store under FwSets (§5.3): sets cannot be overwritten in place on
//! WREN, so each subset is a page appended to an erase unit, and an erase unit is reclaimed
//! whole, by the engine, and then deallocated. Victims are chosen by [`Victims`]: §4.4's FIFO+
//! (oldest first, skipping units whose pages are all live), or by liveness (greedy, or LFS's
//! cost-benefit, which also weighs a unit's age).
//!
//! Each stream (hot subsets, cold subsets) has one active erase unit, written from its first
//! page to its last with the stream's placement handle, so on an FDP device every reclaim unit
//! holds pages of one stream written in one pass, and trimming the unit frees it without the
//! device relocating anything.
//!
//! FIFO+ runs the streams through one queue, so a cold unit, nearly all live because cold
//! subsets are rewritten every few updates only, comes round as often as a hot one and is
//! moved almost whole (measured: 29.3 of 32 pages live per victim). Choosing by liveness leaves
//! cold units alone until their pages have died, and takes hot units when they are mostly dead.
//!
//! The store knows which subset owns each live page (a `u32` per page in DRAM), so garbage
//! collection finds the live subsets of a victim without reading it.

use std::collections::VecDeque;

use lachesis_device::PlacementHandle;

use crate::dev::Span;
use crate::kangaroo::page::PAGE;
use crate::persist::{Dec, Enc};
use crate::Result;

/// No owner: a dead or never written page.
pub const NONE: u32 = u32::MAX;

/// How garbage collection picks the unit to reclaim among the full ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Victims {
    /// §4.4: the oldest unit with a dead page (what the paper's model analyses).
    FifoPlus,
    /// The unit with the fewest live pages (the oldest among equals).
    Greedy,
    /// Sprite LFS's cost-benefit: the most `(1 − u) · age / (1 + u)`, `u` the live share and
    /// `age` the pages the store wrote since the unit was sealed: an old cold unit is taken
    /// with more live pages than a young hot one, whose pages are still dying.
    CostBenefit,
}

impl Victims {
    /// The number saved with an index, so a restore with another policy is refused.
    pub fn code(self) -> u64 {
        match self {
            Victims::FifoPlus => 0,
            Victims::Greedy => 1,
            Victims::CostBenefit => 2,
        }
    }
}

pub struct Store {
    /// Offset of the store's first erase unit within the span.
    base: u64,
    eu_pages: u32,
    /// Owner of each page (`NONE` when dead).
    owner: Vec<u32>,
    /// Live pages of each erase unit.
    live: Vec<u32>,
    free: VecDeque<u32>,
    /// Full erase units, oldest first.
    sealed: VecDeque<u32>,
    /// Per unit: the stream it was opened for and the `clock` when it was sealed.
    stream_of: Vec<u8>,
    sealed_at: Vec<u64>,
    /// Pages appended over the store's life (saved with the index, unlike `page_writes`, the
    /// engine's counter): the age of a unit for cost-benefit.
    clock: u64,
    victims: Victims,
    /// Per stream: the active unit and its next page.
    active: Vec<Option<(u32, u32)>>,
    handles: Vec<PlacementHandle>,
    pub page_writes: u64,
    pub erases: u64,
    /// Per stream: pages written, units reclaimed, and pages still live in them when taken.
    pub stream_writes: Vec<u64>,
    pub stream_erases: Vec<u64>,
    pub stream_victim_live: Vec<u64>,
}

impl Store {
    pub fn new(base: u64, eus: u32, eu_pages: u32, handles: Vec<PlacementHandle>) -> Store {
        Store {
            base,
            eu_pages,
            owner: vec![NONE; (eus * eu_pages) as usize],
            live: vec![0; eus as usize],
            free: (0..eus).collect(),
            sealed: VecDeque::new(),
            stream_of: vec![0; eus as usize],
            sealed_at: vec![0; eus as usize],
            clock: 0,
            victims: Victims::FifoPlus,
            active: vec![None; handles.len()],
            stream_writes: vec![0; handles.len()],
            stream_erases: vec![0; handles.len()],
            stream_victim_live: vec![0; handles.len()],
            handles,
            page_writes: 0,
            erases: 0,
        }
    }

    /// The store with another victim policy (FIFO+ by default).
    pub fn with_victims(mut self, victims: Victims) -> Store {
        self.victims = victims;
        self
    }

    pub fn victims(&self) -> Victims {
        self.victims
    }

    pub fn free_eus(&self) -> u32 {
        self.free.len() as u32
    }

    pub fn eus(&self) -> u32 {
        self.live.len() as u32
    }

    fn offset(&self, page: u32) -> u64 {
        self.base + u64::from(page) * PAGE as u64
    }

    pub fn read(&self, span: &Span, page: u32, buf: &mut [u8]) -> Result<()> {
        span.read(self.offset(page), buf)
    }

    pub fn handles(&self) -> &[PlacementHandle] {
        &self.handles
    }

    pub fn eu_pages(&self) -> u32 {
        self.eu_pages
    }

    pub fn owner(&self, page: u32) -> u32 {
        self.owner[page as usize]
    }

    /// Appends a page for `owner` to `stream`'s active unit, opening a free one when it is
    /// full. `None` when no unit is free (the caller evicts instead of writing).
    pub fn append(
        &mut self,
        span: &Span,
        stream: usize,
        owner: u32,
        data: &[u8],
    ) -> Result<Option<u32>> {
        debug_assert_eq!(data.len(), PAGE);
        let (eu, next) = match self.active[stream] {
            Some(a) => a,
            None => match self.free.pop_front() {
                Some(eu) => {
                    self.stream_of[eu as usize] = stream as u8;
                    (eu, 0)
                }
                None => return Ok(None),
            },
        };
        let page = eu * self.eu_pages + next;
        span.write(self.offset(page), data, self.handles[stream])?;
        self.page_writes += 1;
        self.clock += 1;
        self.stream_writes[stream] += 1;
        self.owner[page as usize] = owner;
        self.live[eu as usize] += 1;
        self.active[stream] = if next + 1 == self.eu_pages {
            self.sealed.push_back(eu);
            self.sealed_at[eu as usize] = self.clock;
            None
        } else {
            Some((eu, next + 1))
        };
        Ok(Some(page))
    }

    /// Marks a page dead (its subset was rewritten elsewhere or dropped).
    pub fn invalidate(&mut self, page: u32) {
        if self.owner[page as usize] != NONE {
            self.owner[page as usize] = NONE;
            self.live[(page / self.eu_pages) as usize] -= 1;
        }
    }

    /// Takes the next unit to reclaim by the store's [`Victims`] policy; `None` when no unit
    /// is full.
    pub fn victim(&mut self) -> Option<u32> {
        let eu = self.pick()?;
        self.stream_victim_live[usize::from(self.stream_of[eu as usize])] +=
            u64::from(self.live[eu as usize]);
        Some(eu)
    }

    fn pick(&mut self) -> Option<u32> {
        let at = match self.victims {
            Victims::FifoPlus => return self.fifo_plus(),
            Victims::Greedy => self.best_by(|live, _| -f64::from(live)),
            Victims::CostBenefit => {
                let b = f64::from(self.eu_pages);
                self.best_by(|live, age| {
                    let u = f64::from(live) / b;
                    (1.0 - u) * age as f64 / (1.0 + u)
                })
            }
        }?;
        self.sealed.remove(at)
    }

    /// Position in `sealed` of the unit scoring highest by `score(live pages, age)`, the oldest
    /// among equals. A unit all live frees nothing: taken only when every unit is.
    fn best_by(&self, score: impl Fn(u32, u64) -> f64) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (i, &eu) in self.sealed.iter().enumerate() {
            let live = self.live[eu as usize];
            let s = if live == self.eu_pages {
                f64::NEG_INFINITY
            } else {
                score(live, self.clock - self.sealed_at[eu as usize])
            };
            if best.is_none_or(|(_, b)| s > b) {
                best = Some((i, s));
            }
        }
        best.map(|(i, _)| i)
    }

    /// FIFO+: takes the oldest full unit that has a dead page, moving units whose pages are all
    /// live to the back. When every full unit is all live, the oldest one.
    fn fifo_plus(&mut self) -> Option<u32> {
        for _ in 0..self.sealed.len() {
            let eu = self.sealed.pop_front()?;
            if self.live[eu as usize] < self.eu_pages {
                return Some(eu);
            }
            self.sealed.push_back(eu);
        }
        self.sealed.pop_front()
    }

    /// The live pages of a unit and their owners.
    pub fn live_pages(&self, eu: u32) -> Vec<(u32, u32)> {
        let first = eu * self.eu_pages;
        (first..first + self.eu_pages)
            .filter(|&p| self.owner[p as usize] != NONE)
            .map(|p| (p, self.owner[p as usize]))
            .collect()
    }

    /// Reclaims a unit taken by [`Store::victim`]: whatever is still live in it is dropped,
    /// and the unit is deallocated (trimmed) whole and becomes free.
    pub fn erase(&mut self, span: &Span, eu: u32) -> Result<Vec<u32>> {
        let dropped: Vec<u32> = self.live_pages(eu).into_iter().map(|(_, o)| o).collect();
        let first = eu * self.eu_pages;
        self.stream_erases[usize::from(self.stream_of[eu as usize])] += 1;
        self.owner[first as usize..(first + self.eu_pages) as usize].fill(NONE);
        self.live[eu as usize] = 0;
        span.trim(self.offset(first), u64::from(self.eu_pages) * PAGE as u64)?;
        self.erases += 1;
        self.free.push_back(eu);
        Ok(dropped)
    }

    /// Saves the page owners and the units' order (free, sealed, active per stream).
    pub fn save(&self, e: &mut Enc) {
        e.u32s(self.owner.iter().copied());
        e.u32s(self.free.iter().copied());
        e.u32s(self.sealed.iter().copied());
        e.u32s(self.active.iter().map(|a| a.map_or(NONE, |(eu, _)| eu)));
        e.u32s(self.active.iter().map(|a| a.map_or(0, |(_, next)| next)));
        e.u32s(self.stream_of.iter().map(|&s| u32::from(s)));
        e.u64s(&self.sealed_at);
        e.u64(self.clock);
    }

    /// Reads what [`Store::save`] wrote into a fresh store of the same geometry: every unit is
    /// free, sealed or active exactly once, a free unit and the unwritten tail of an active one
    /// own no page. Changes nothing on an error.
    pub fn load(&mut self, d: &mut Dec) -> Result<()> {
        let owner = d.u32s("FwSets page owners")?;
        let free: VecDeque<u32> = d.u32s("FwSets free units")?.into();
        let sealed: VecDeque<u32> = d.u32s("FwSets sealed units")?.into();
        let active_eus = d.u32s("FwSets active units")?;
        let active_next = d.u32s("FwSets active pages")?;
        let stream_of = d.u32s("FwSets unit streams")?;
        let sealed_at = d.u64s("FwSets unit ages")?;
        let clock = d.u64("FwSets clock")?;
        let eus = self.eus();
        if owner.len() != self.owner.len()
            || active_eus.len() != self.active.len()
            || active_next.len() != self.active.len()
            || stream_of.len() != eus as usize
            || sealed_at.len() != eus as usize
            || stream_of.iter().any(|&s| s as usize >= self.active.len())
            || sealed_at.iter().any(|&t| t > clock)
        {
            return Err(d.bad("FwSets store out of shape"));
        }
        let mut live = vec![0u32; eus as usize];
        for (p, o) in owner.iter().enumerate() {
            live[p / self.eu_pages as usize] += u32::from(*o != NONE);
        }
        let mut seen = vec![false; eus as usize];
        let mut once = |eu: u32| eu < eus && !std::mem::replace(&mut seen[eu as usize], true);
        let mut active = Vec::with_capacity(active_eus.len());
        for (&eu, &next) in active_eus.iter().zip(&active_next) {
            if eu == NONE {
                active.push(None);
                continue;
            }
            let first = (eu * self.eu_pages + next) as usize;
            let tail = owner.get(first..((eu + 1) * self.eu_pages) as usize);
            if !once(eu)
                || next == 0
                || next >= self.eu_pages
                || tail.is_none_or(|t| t.iter().any(|&o| o != NONE))
            {
                return Err(d.bad(format!("FwSets active unit {eu}")));
            }
            active.push(Some((eu, next)));
        }
        let listed = free.iter().all(|&eu| once(eu) && live[eu as usize] == 0)
            && sealed.iter().all(|&eu| once(eu));
        if !listed || seen.iter().any(|s| !s) {
            return Err(d.bad("FwSets units are not each free, sealed or active once"));
        }
        (self.owner, self.live, self.free, self.sealed, self.active) =
            (owner, live, free, sealed, active);
        self.stream_of = stream_of.into_iter().map(|s| s as u8).collect();
        (self.sealed_at, self.clock) = (sealed_at, clock);
        Ok(())
    }

    pub fn dram_bytes(&self) -> usize {
        self.owner.capacity() * 4
            + self.live.capacity() * 4
            + self.stream_of.capacity()
            + self.sealed_at.capacity() * 8
            + (self.free.capacity() + self.sealed.capacity()) * 4
    }
}
