//! FwSets (§5.3, §5.4.1): the set-associative part, each set split into a hot subset (new and
//! unpopular objects, rewritten on every update) and a cold subset (objects that were read,
//! rewritten only every `cold_every`-th update), each one 4 KiB page in the [`Store`].
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
use crate::Result;

/// Hash functions per key: with about 3 filter bits per object, 2 is the optimum.
const BLOOM_HASHES: u32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Hot = 0,
    Cold = 1,
}

impl Kind {
    pub const BOTH: [Kind; 2] = [Kind::Hot, Kind::Cold];

    /// The store owner of a subset.
    pub fn owner(self, set: u32) -> u32 {
        set * 2 + self as u32
    }

    pub fn of_owner(owner: u32) -> (u32, Kind) {
        (
            owner / 2,
            if owner.is_multiple_of(2) {
                Kind::Hot
            } else {
                Kind::Cold
            },
        )
    }
}

/// A subset read back: its objects (RRIP hit bits folded in) and whether it was damaged.
pub struct Subset {
    pub objs: Vec<Obj>,
    pub corrupt: bool,
}

/// What a lookup found.
pub struct Lookup {
    pub value: Option<Vec<u8>>,
    pub corrupt: bool,
}

pub struct FwSets {
    /// Page of each subset in the store (`NONE`: empty), indexed by `Kind::owner`.
    loc: Vec<u32>,
    /// Updates since the last hot/cold re-split, per set.
    pub updates: Vec<u8>,
    blooms: [BucketBlooms; 2],
    hits: [BitTable; 2],
    pub objects: u64,
}

impl FwSets {
    pub fn new(sets: u32, bloom_bits: usize, hit_bits: usize) -> FwSets {
        let n = sets as usize;
        let bloom = || BucketBlooms::new(n, bloom_bits as u32, BLOOM_HASHES);
        FwSets {
            loc: vec![NONE; 2 * n],
            updates: vec![0; n],
            blooms: [bloom(), bloom()],
            hits: [BitTable::new(n, hit_bits), BitTable::new(n, hit_bits)],
            objects: 0,
        }
    }

    pub fn loc(&self, set: u32, kind: Kind) -> u32 {
        self.loc[kind.owner(set) as usize]
    }

    pub fn may_contain(&self, set: u32, kind: Kind, h: u64) -> bool {
        self.loc(set, kind) != NONE && self.blooms[kind as usize].may_contain(set as usize, h)
    }

    fn read_page(
        &self,
        store: &Store,
        span: &Span,
        set: u32,
        kind: Kind,
    ) -> Result<Option<Vec<u8>>> {
        let at = self.loc(set, kind);
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
        kind: Kind,
        h: u64,
        key: &[u8],
    ) -> Result<Lookup> {
        let mut out = Lookup {
            value: None,
            corrupt: false,
        };
        if !self.may_contain(set, kind, h) {
            return Ok(out);
        }
        let Some(buf) = self.read_page(store, span, set, kind)? else {
            return Ok(out);
        };
        match page::find_kset(&buf, key) {
            Ok(Some((i, v))) => {
                let hits = &mut self.hits[kind as usize];
                if i < hits.width() {
                    hits.set(set as usize, i);
                }
                out.value = Some(v.to_vec());
            }
            Ok(None) => {}
            Err(()) => out.corrupt = true,
        }
        Ok(out)
    }

    /// Reads a subset with its objects' RRIP predictions, hit bits folded in.
    pub fn read(&self, store: &Store, span: &Span, set: u32, kind: Kind) -> Result<Subset> {
        let Some(buf) = self.read_page(store, span, set, kind)? else {
            return Ok(Subset {
                objs: Vec::new(),
                corrupt: false,
            });
        };
        let parsed = page::parse_kset(&buf);
        let hits = &self.hits[kind as usize];
        let objs = parsed
            .objs
            .iter()
            .enumerate()
            .map(|(i, o)| Obj {
                key: o.key.to_vec(),
                value: o.value.to_vec(),
                rrip: if i < hits.width() && hits.get(set as usize, i) {
                    NEAR
                } else {
                    parsed.rrip[i]
                },
            })
            .collect();
        Ok(Subset {
            objs,
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
        kind: Kind,
        objs: &[Obj],
        before: usize,
    ) -> Result<usize> {
        let slot = kind.owner(set) as usize;
        let mut kept = objs;
        let page = if objs.is_empty() {
            NONE
        } else {
            let buf = page::encode_kset(objs);
            match store.append(span, kind as usize, kind.owner(set), &buf)? {
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
        self.blooms[kind as usize].rebuild(set as usize, kept.iter().map(|o| key_hash(&o.key)));
        self.hits[kind as usize].clear_row(set as usize);
        self.objects = self.objects.saturating_sub(before as u64) + kept.len() as u64;
        Ok(objs.len() - kept.len())
    }

    /// Forgets a subset whose page was reclaimed without being rewritten.
    pub fn forget(&mut self, set: u32, kind: Kind, count: usize) {
        self.loc[kind.owner(set) as usize] = NONE;
        self.blooms[kind as usize].rebuild(set as usize, std::iter::empty());
        self.hits[kind as usize].clear_row(set as usize);
        self.objects = self.objects.saturating_sub(count as u64);
    }

    /// DRAM of the subset pages, counters, Bloom filters and hit bits.
    pub fn dram_bytes(&self) -> (usize, usize, usize) {
        (
            self.loc.capacity() * 4 + self.updates.capacity(),
            self.blooms.iter().map(BucketBlooms::bytes).sum(),
            self.hits.iter().map(BitTable::dram_bytes).sum(),
        )
    }
}
