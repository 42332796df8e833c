//! FwSets (§5.3, §5.4.1): the set-associative part, each set split into a hot subset (new and
//! unpopular objects, rewritten on every update) and a cold subset (objects that were read,
//! rewritten only every `cold_every`-th update): one 4 KiB page for the hot subset and
//! `cold_pages` for the cold one, each page in the [`Store`] on its own.
//!
//! DRAM per set: the page of each subset, an update counter, a Bloom filter and RRIParoo hit
//! bits per subset (as Kangaroo's KSet: the RRIP predictions are on flash with the objects).
//! A key is in at most one subset of its set.

use super::store::{Store, NONE};
use crate::bloom::BucketBlooms;
use crate::dev::Span;
use crate::kangaroo::hitbits::BitTable;
use crate::kangaroo::page::{self, Obj, PAGE};
use crate::kangaroo::rrip::NEAR;
use crate::object::key_hash;
use crate::persist::{Dec, Enc};
use crate::Result;

/// Hash functions per key: with about 3 filter bits per object, 2 is the optimum.
const BLOOM_HASHES: u32 = 2;

/// The hot subset of a set is its subset 0; subsets `1..=cold_pages` are its cold pages.
pub const HOT: u32 = 0;

/// The store stream a subset is written to: hot subsets and cold pages fill separate units.
pub fn stream(sub: u32) -> usize {
    usize::from(sub != HOT)
}

/// A subset read back: its objects (RRIP hit bits folded in) and whether it was damaged.
pub struct Subset {
    pub objs: Vec<Obj>,
    /// Whether each object was read since the page was written (its prediction is then NEAR).
    pub hit: Vec<bool>,
    pub corrupt: bool,
}

/// What a lookup found.
pub struct Lookup {
    pub value: Option<Vec<u8>>,
    pub corrupt: bool,
}

pub struct FwSets {
    /// Pages per set: the hot one and the cold ones.
    subsets: u32,
    /// Page of each subset in the store (`NONE`: empty), indexed by [`FwSets::owner`].
    loc: Vec<u32>,
    /// Updates since the last hot/cold re-split, per set.
    pub updates: Vec<u8>,
    /// A Bloom filter and RRIParoo hit bits per subset page.
    blooms: BucketBlooms,
    hits: BitTable,
    pub objects: u64,
}

impl FwSets {
    pub fn new(sets: u32, cold_pages: u32, bloom_bits: usize, hit_bits: usize) -> FwSets {
        let subsets = 1 + cold_pages;
        let n = sets as usize * subsets as usize;
        FwSets {
            subsets,
            loc: vec![NONE; n],
            updates: vec![0; sets as usize],
            blooms: BucketBlooms::new(n, bloom_bits as u32, BLOOM_HASHES),
            hits: BitTable::new(n, hit_bits),
            objects: 0,
        }
    }

    pub fn subsets(&self) -> u32 {
        self.subsets
    }

    /// The store owner (and the row of the DRAM tables) of a subset page.
    pub fn owner(&self, set: u32, sub: u32) -> u32 {
        set * self.subsets + sub
    }

    pub fn of_owner(&self, owner: u32) -> (u32, u32) {
        (owner / self.subsets, owner % self.subsets)
    }

    pub fn loc(&self, set: u32, sub: u32) -> u32 {
        self.loc[self.owner(set, sub) as usize]
    }

    pub fn may_contain(&self, set: u32, sub: u32, h: u64) -> bool {
        let row = self.owner(set, sub) as usize;
        self.loc[row] != NONE && self.blooms.may_contain(row, h)
    }

    fn read_page(&self, store: &Store, span: &Span, set: u32, sub: u32) -> Result<Option<Vec<u8>>> {
        let at = self.loc(set, sub);
        if at == NONE {
            return Ok(None);
        }
        let mut buf = vec![0u8; PAGE];
        store.read(span, at, &mut buf)?;
        Ok(Some(buf))
    }

    /// Looks `key` up in one subset (Bloom filter first), marking its hit bit when found.
    pub fn lookup(
        &mut self,
        store: &Store,
        span: &Span,
        set: u32,
        sub: u32,
        h: u64,
        key: &[u8],
    ) -> Result<Lookup> {
        let mut out = Lookup {
            value: None,
            corrupt: false,
        };
        if !self.may_contain(set, sub, h) {
            return Ok(out);
        }
        let Some(buf) = self.read_page(store, span, set, sub)? else {
            return Ok(out);
        };
        match page::find_kset(&buf, key) {
            Ok(Some((i, v))) => {
                let row = self.owner(set, sub) as usize;
                if i < self.hits.width() {
                    self.hits.set(row, i);
                }
                out.value = Some(v.to_vec());
            }
            Ok(None) => {}
            Err(()) => out.corrupt = true,
        }
        Ok(out)
    }

    /// Reads a subset with its objects' RRIP predictions, hit bits folded in.
    pub fn read(&self, store: &Store, span: &Span, set: u32, sub: u32) -> Result<Subset> {
        let Some(buf) = self.read_page(store, span, set, sub)? else {
            return Ok(Subset {
                objs: Vec::new(),
                hit: Vec::new(),
                corrupt: false,
            });
        };
        let parsed = page::parse_kset(&buf);
        let (hits, row) = (&self.hits, self.owner(set, sub) as usize);
        let hit: Vec<bool> = (0..parsed.objs.len())
            .map(|i| i < hits.width() && hits.get(row, i))
            .collect();
        let objs = parsed
            .objs
            .iter()
            .enumerate()
            .map(|(i, o)| Obj {
                key: o.key.to_vec(),
                value: o.value.to_vec(),
                rrip: if hit[i] { NEAR } else { parsed.rrip[i] },
            })
            .collect();
        Ok(Subset {
            objs,
            hit,
            corrupt: parsed.corrupt,
        })
    }

    /// Writes a subset as a new page (or records it empty), retiring its old page. When the
    /// store has no free unit the subset is dropped instead: a cache may always evict.
    /// Returns the objects dropped that way.
    pub fn write(
        &mut self,
        store: &mut Store,
        span: &Span,
        set: u32,
        sub: u32,
        objs: &[Obj],
        before: usize,
    ) -> Result<usize> {
        let slot = self.owner(set, sub) as usize;
        let mut kept = objs;
        let page = if objs.is_empty() {
            NONE
        } else {
            // FAR first, as RRIParoo writes a set: the hit bits cover a page's first
            // positions, so objects past them (a page of many small objects) are the ones
            // closest to NEAR, whose hits matter least (Kangaroo §5.4).
            let mut order: Vec<&Obj> = objs.iter().collect();
            order.sort_by_key(|o| std::cmp::Reverse(o.rrip));
            let buf = page::encode_kset_refs(&order);
            match store.append(span, stream(sub), slot as u32, &buf)? {
                Some(p) => p,
                None => {
                    kept = &[];
                    NONE
                }
            }
        };
        if self.loc[slot] != NONE {
            store.invalidate(self.loc[slot]);
        }
        self.loc[slot] = page;
        self.blooms
            .rebuild(slot, kept.iter().map(|o| key_hash(&o.key)));
        self.hits.clear_row(slot);
        self.objects = self.objects.saturating_sub(before as u64) + kept.len() as u64;
        Ok(objs.len() - kept.len())
    }

    /// Forgets a subset whose page was reclaimed without being rewritten.
    pub fn forget(&mut self, set: u32, sub: u32, count: usize) {
        let slot = self.owner(set, sub) as usize;
        self.loc[slot] = NONE;
        self.blooms.rebuild(slot, std::iter::empty());
        self.hits.clear_row(slot);
        self.objects = self.objects.saturating_sub(count as u64);
    }

    /// Saves the subset pages, update counters, Bloom filters, hit bits and object count.
    pub fn save(&self, e: &mut Enc) {
        e.u32s(self.loc.iter().copied());
        e.bytes(&self.updates);
        self.blooms.save(e);
        self.hits.save(e);
        e.u64(self.objects);
    }

    /// Reads what [`FwSets::save`] wrote into fresh sets of the same geometry, checking that
    /// subsets and the `store` (loaded first) name each other's pages. On an error the sets
    /// are to be thrown away.
    pub fn load(&mut self, d: &mut Dec, store: &Store) -> Result<()> {
        let loc = d.u32s("FwSets subset pages")?;
        let updates = d.bytes("FwSets update counters")?.to_vec();
        if loc.len() != self.loc.len() || updates.len() != self.updates.len() {
            return Err(d.bad("FwSets out of shape"));
        }
        let pages = u64::from(store.eus()) * u64::from(store.eu_pages());
        for (slot, &page) in loc.iter().enumerate() {
            if page != NONE && (u64::from(page) >= pages || store.owner(page) != slot as u32) {
                return Err(d.bad(format!("FwSets subset {slot} at page {page}")));
            }
        }
        for page in 0..pages as u32 {
            let o = store.owner(page);
            if o != NONE && loc.get(o as usize) != Some(&page) {
                return Err(d.bad(format!("FwSets page {page} owned by subset {o}")));
            }
        }
        self.blooms.load(d)?;
        self.hits.load(d)?;
        self.objects = d.u64("FwSets objects")?;
        (self.loc, self.updates) = (loc, updates);
        Ok(())
    }

    /// DRAM of the subset pages, counters, Bloom filters and hit bits.
    pub fn dram_bytes(&self) -> (usize, usize, usize) {
        (
            self.loc.capacity() * 4 + self.updates.capacity(),
            self.blooms.bytes(),
            self.hits.dram_bytes(),
        )
    }
}
