//! KSet (§5.4): the large set-associative part. No DRAM index: a key hashes to one 4 KiB set,
//! a per-set Bloom filter saves most reads of sets that do not hold it, and RRIParoo's hit bits
//! record which objects were read since the set was last written.

use lachesis_device::PlacementHandle;

use super::hitbits::BitTable;
use super::page::{self, Obj, PAGE};
use super::rrip::{self, NEAR};
use crate::bloom::BucketBlooms;
use crate::dev::Span;
use crate::object::key_hash;
use crate::persist::{Dec, Enc};
use crate::Result;

/// Hash functions per key: with about 3 filter bits per object, 2 is the optimum (ln 2 · m/n).
const BLOOM_HASHES: u32 = 2;

pub struct KSet {
    /// Offset of set 0 within the engine's span.
    base: u64,
    handle: PlacementHandle,
    blooms: BucketBlooms,
    hits: BitTable,
    /// Objects stored (as of the last write of each set).
    pub objects: u64,
    pub set_writes: u64,
    pub evictions: u64,
    pub churn: rrip::SetChurn,
}

/// What a lookup found.
pub struct Lookup {
    pub value: Option<Vec<u8>>,
    /// The set failed its checksum somewhere.
    pub corrupt: bool,
}

impl KSet {
    pub fn new(
        base: u64,
        sets: u32,
        handle: PlacementHandle,
        bloom_bits: usize,
        hit_bits: usize,
    ) -> KSet {
        KSet {
            base,
            handle,
            blooms: BucketBlooms::new(sets as usize, bloom_bits as u32, BLOOM_HASHES),
            hits: BitTable::new(sets as usize, hit_bits),
            objects: 0,
            set_writes: 0,
            evictions: 0,
            churn: rrip::SetChurn::default(),
        }
    }

    pub fn handle(&self) -> PlacementHandle {
        self.handle
    }

    fn offset(&self, set: u32) -> u64 {
        self.base + u64::from(set) * PAGE as u64
    }

    pub fn may_contain(&self, set: u32, h: u64) -> bool {
        self.blooms.may_contain(set as usize, h)
    }

    /// A set's bytes; one this cache never wrote reads as empty (`crate::bloom`).
    fn read_page(&self, span: &Span, set: u32) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; PAGE];
        if self.blooms.written(set as usize) {
            span.read(self.offset(set), &mut buf)?;
        }
        Ok(buf)
    }

    /// Pages written, objects and their bytes on the page (header included), read from flash
    /// (a set that cannot be read counts as empty): what the sets hold, for cachebench.
    pub fn held(&self, span: &Span, sets: u32) -> (u64, u64, u64) {
        let (mut pages, mut objects, mut bytes) = (0, 0, 0);
        for set in (0..sets).filter(|&s| self.blooms.written(s as usize)) {
            let Ok(buf) = self.read_page(span, set) else {
                continue;
            };
            let parsed = page::parse_kset(&buf);
            pages += 1;
            objects += parsed.objs.len() as u64;
            bytes += parsed
                .objs
                .iter()
                .map(|o| page::kset_cost(o.key, o.value) as u64)
                .sum::<u64>();
        }
        (pages, objects, bytes)
    }

    pub fn lookup(&mut self, span: &Span, set: u32, h: u64, key: &[u8]) -> Result<Lookup> {
        if !self.may_contain(set, h) {
            return Ok(Lookup {
                value: None,
                corrupt: false,
            });
        }
        let buf = self.read_page(span, set)?;
        Ok(match page::find_kset(&buf, key) {
            Ok(Some((i, value))) => {
                if i < self.hits.width() {
                    self.hits.set(set as usize, i);
                }
                Lookup {
                    value: Some(value.to_vec()),
                    corrupt: false,
                }
            }
            Ok(None) => Lookup {
                value: None,
                corrupt: false,
            },
            Err(()) => Lookup {
                value: None,
                corrupt: true,
            },
        })
    }

    /// Rewrites `set`: objects in `incoming` replace same-key objects and are merged in by
    /// RRIParoo; objects whose key is in `drop_keys` or whose KLog tag is in `drop_tags` are
    /// removed. With `only_replace`, incoming objects go in only where they replace a copy
    /// already in the set (the set must not keep an older version of an object KLog dropped).
    /// Writes nothing when nothing would change. Returns whether the set was written.
    pub fn update(
        &mut self,
        span: &Span,
        set: u32,
        mut incoming: Vec<Obj>,
        drop_keys: &[Vec<u8>],
        drop_tags: &[u16],
        only_replace: bool,
    ) -> Result<bool> {
        let probe = |k: &Vec<u8>| self.may_contain(set, key_hash(k));
        if (only_replace || incoming.is_empty())
            && drop_tags.is_empty()
            && !incoming.iter().map(|o| &o.key).chain(drop_keys).any(probe)
        {
            return Ok(false);
        }
        let buf = self.read_page(span, set)?;
        let parsed = page::parse_kset(&buf);
        let before = parsed.objs.len();
        let mut existing = Vec::with_capacity(before);
        for (i, o) in parsed.objs.iter().enumerate() {
            let hit = i < self.hits.width() && self.hits.get(set as usize, i);
            existing.push(Obj {
                key: o.key.to_vec(),
                value: o.value.to_vec(),
                rrip: if hit { NEAR } else { parsed.rrip[i] },
            });
        }
        if only_replace {
            incoming.retain(|o| existing.iter().any(|e| e.key == o.key));
        }
        existing.retain(|e| {
            !drop_keys.contains(&e.key)
                && !drop_tags.contains(&super::tag_of(key_hash(&e.key)))
                && !incoming.iter().any(|o| o.key == e.key)
        });
        // A damaged set is rewritten from its readable part even when nothing readable
        // changes: an object behind the damage may be one that has to go, and lookups (which
        // do not checksum every object) could still find it.
        if incoming.is_empty() && existing.len() == before && !parsed.corrupt {
            return Ok(false);
        }
        self.churn.incoming(&incoming);
        let (keep, evicted) = rrip::merge(existing, incoming);
        self.churn.written(&keep);
        for e in &evicted {
            self.churn.evicted(&e.obj, e.incoming);
        }
        let buf = page::encode_kset(&keep);
        span.write(self.offset(set), &buf, self.handle)?;
        self.set_writes += 1;
        self.evictions += evicted.len() as u64;
        self.objects = self.objects.saturating_sub(before as u64) + keep.len() as u64;
        self.blooms
            .rebuild(set as usize, keep.iter().map(|o| key_hash(&o.key)));
        self.hits.clear_row(set as usize);
        Ok(true)
    }

    pub fn save(&self, e: &mut Enc) {
        e.u64(self.objects);
        self.blooms.save(e);
        self.hits.save(e);
    }

    /// Reads what [`KSet::save`] wrote into a fresh KSet of the same geometry.
    pub fn load(&mut self, d: &mut Dec) -> Result<()> {
        self.objects = d.u64("KSet object count")?;
        self.blooms.load(d)?;
        self.hits.load(d)
    }

    /// DRAM of the Bloom filters and of the hit bits.
    pub fn dram_bytes(&self) -> (usize, usize) {
        (self.blooms.bytes(), self.hits.dram_bytes())
    }
}
