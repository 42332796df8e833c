//! KLog's compact partitioned index (§5.2, Table 2).
//!
//! Each partition's index is split into tables; each table is a hash table with separate
//! chaining whose buckets correspond one-to-one to KSet sets, so ENUMERATE-SET is one bucket
//! walk. Entries live in a per-table slab and are 48 bits, packed in three `u16`:
//!
//! | field | bits | why that many |
//! |---|---|---|
//! | page offset in the partition's log | 19 | `log2(partition log / 4 KiB)` |
//! | tag (key hash bits beyond the set) | 9 | the bucket already fixes the set |
//! | next entry in the chain | 16 | a slot in the table's slab, not a pointer |
//! | RRIP prediction | 3 | RRIParoo's 3-bit predictions |
//! | valid | 1 | free slots are chained through `next` |
//!
//! Bucket heads are 16-bit slab slots too.

/// Largest partition log, in pages, an entry can address.
pub const MAX_PAGES: u32 = 1 << 19;
/// Slots per table (`u16::MAX` is the null slot).
pub const MAX_SLOTS: usize = u16::MAX as usize;
pub const TAG_BITS: u32 = 9;
pub const NIL: u16 = u16::MAX;

use crate::persist::{Dec, Enc};
use crate::Result;

/// The decoded fields of an index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Page within the partition's log.
    pub page: u32,
    pub tag: u16,
    pub rrip: u8,
}

fn pack(e: Entry, next: u16, valid: bool) -> [u16; 3] {
    let v: u64 = u64::from(e.page)
        | u64::from(e.tag) << 19
        | u64::from(next) << 28
        | u64::from(e.rrip & 7) << 44
        | u64::from(valid) << 47;
    [v as u16, (v >> 16) as u16, (v >> 32) as u16]
}

fn unpack(s: [u16; 3]) -> (Entry, u16, bool) {
    let v = u64::from(s[0]) | u64::from(s[1]) << 16 | u64::from(s[2]) << 32;
    (
        Entry {
            page: (v & (MAX_PAGES as u64 - 1)) as u32,
            tag: (v >> 19 & 0x1ff) as u16,
            rrip: (v >> 44 & 7) as u8,
        },
        (v >> 28) as u16,
        v >> 47 & 1 == 1,
    )
}

struct Table {
    heads: Vec<u16>,
    slots: Vec<[u16; 3]>,
    free: u16,
}

/// All partitions' tables.
pub struct Index {
    tables: Vec<Table>,
    tables_per_part: u32,
    live: u64,
}

/// A slab slot, valid within one bucket's table.
pub type SlotId = u16;

impl Index {
    /// `buckets_per_part` buckets in each of `parts` partitions, spread over `tables_per_part`
    /// tables whose slabs are preallocated for `slots_per_table` entries.
    pub fn new(
        parts: u32,
        buckets_per_part: u32,
        tables_per_part: u32,
        slots_per_table: usize,
    ) -> Index {
        let heads = buckets_per_part.div_ceil(tables_per_part) as usize;
        let tables = (0..parts * tables_per_part)
            .map(|_| Table {
                heads: vec![NIL; heads],
                slots: Vec::with_capacity(slots_per_table.min(MAX_SLOTS)),
                free: NIL,
            })
            .collect();
        Index {
            tables,
            tables_per_part,
            live: 0,
        }
    }

    #[inline]
    fn locate(&self, part: u32, bucket: u32) -> (usize, usize) {
        let t = self.tables_per_part;
        ((part * t + bucket % t) as usize, (bucket / t) as usize)
    }

    /// Adds an entry at the head of its bucket; `false` when the table's slab is full.
    pub fn insert(&mut self, part: u32, bucket: u32, e: Entry) -> bool {
        let (t, b) = self.locate(part, bucket);
        let table = &mut self.tables[t];
        let slot = if table.free != NIL {
            let s = table.free;
            table.free = unpack(table.slots[s as usize]).1;
            s
        } else if table.slots.len() < MAX_SLOTS {
            table.slots.push([0; 3]);
            (table.slots.len() - 1) as u16
        } else {
            return false;
        };
        table.slots[slot as usize] = pack(e, table.heads[b], true);
        table.heads[b] = slot;
        self.live += 1;
        true
    }

    /// The bucket's entries, newest first (ENUMERATE-SET).
    pub fn bucket(&self, part: u32, bucket: u32) -> Vec<(SlotId, Entry)> {
        self.iter(part, bucket).collect()
    }

    /// The bucket's entries without collecting them (the lookup path).
    pub fn iter(&self, part: u32, bucket: u32) -> impl Iterator<Item = (SlotId, Entry)> + '_ {
        let (t, b) = self.locate(part, bucket);
        let table = &self.tables[t];
        let mut s = table.heads[b];
        std::iter::from_fn(move || {
            (s != NIL).then(|| {
                let (e, next, valid) = unpack(table.slots[s as usize]);
                debug_assert!(valid);
                let here = s;
                s = next;
                (here, e)
            })
        })
    }

    /// Unlinks a slot from its bucket and frees it.
    pub fn remove(&mut self, part: u32, bucket: u32, slot: SlotId) {
        let (t, b) = self.locate(part, bucket);
        let table = &mut self.tables[t];
        let (e, next, _) = unpack(table.slots[slot as usize]);
        if table.heads[b] == slot {
            table.heads[b] = next;
        } else {
            let mut s = table.heads[b];
            loop {
                assert!(s != NIL, "slot {slot} not in bucket {bucket}");
                let (pe, pnext, pvalid) = unpack(table.slots[s as usize]);
                if pnext == slot {
                    table.slots[s as usize] = pack(pe, next, pvalid);
                    break;
                }
                s = pnext;
            }
        }
        table.slots[slot as usize] = pack(e, table.free, false);
        table.free = slot;
        self.live -= 1;
    }

    pub fn set_rrip(&mut self, part: u32, bucket: u32, slot: SlotId, rrip: u8) {
        let (t, _) = self.locate(part, bucket);
        let s = &mut self.tables[t].slots[slot as usize];
        let (mut e, next, valid) = unpack(*s);
        e.rrip = rrip;
        *s = pack(e, next, valid);
    }

    /// Saves every table's heads and slab as they are.
    pub fn save(&self, e: &mut Enc) {
        for t in &self.tables {
            e.u16s(&t.heads);
            e.u16s(&t.slots.iter().flatten().copied().collect::<Vec<u16>>());
            e.u16(t.free);
        }
        e.u64(self.live);
    }

    /// Reads what [`Index::save`] wrote into a fresh index of the same geometry. Every chain
    /// is walked first: a slot out of range, in two chains or in a cycle, a free slot in a
    /// bucket, or an entry `live_page` rejects refuses the whole index.
    pub fn load(&mut self, d: &mut Dec, live_page: impl Fn(u32, u32) -> bool) -> Result<()> {
        let mut tables = Vec::with_capacity(self.tables.len());
        let mut live = 0u64;
        for (ti, old) in self.tables.iter().enumerate() {
            let heads = d.u16s("KLog bucket heads")?;
            let flat = d.u16s("KLog index entries")?;
            let free = d.u16("KLog free slot")?;
            if heads.len() != old.heads.len() || flat.len() % 3 != 0 || flat.len() / 3 > MAX_SLOTS {
                return Err(d.bad(format!("KLog index table {ti} out of shape")));
            }
            // Keep the slab's preallocation, which the DRAM figures count.
            let mut slots = Vec::with_capacity(old.slots.capacity());
            slots.extend(flat.chunks(3).map(|c| [c[0], c[1], c[2]]));
            let part = ti as u32 / self.tables_per_part;
            let mut seen = vec![false; slots.len()];
            let chains = heads.iter().map(|&h| (h, true)).chain([(free, false)]);
            for (mut s, valid_chain) in chains {
                while s != NIL {
                    let Some(slot) = slots.get(s as usize) else {
                        return Err(d.bad(format!("KLog index slot {s} past table {ti}'s end")));
                    };
                    if std::mem::replace(&mut seen[s as usize], true) {
                        return Err(d.bad(format!("KLog index slot {s} chained twice")));
                    }
                    let (e, next, valid) = unpack(*slot);
                    if valid != valid_chain || (valid && !live_page(part, e.page)) {
                        return Err(d.bad(format!("KLog index entry {s} of table {ti}")));
                    }
                    live += u64::from(valid);
                    s = next;
                }
            }
            if seen.iter().any(|s| !s) {
                return Err(d.bad(format!("KLog index table {ti} has unreachable slots")));
            }
            tables.push(Table { heads, slots, free });
        }
        if d.u64("KLog entry count")? != live {
            return Err(d.bad("KLog entry count"));
        }
        self.tables = tables;
        self.live = live;
        Ok(())
    }

    /// Entries currently indexed.
    pub fn len(&self) -> u64 {
        self.live
    }

    /// DRAM of entries (slabs) and of bucket heads.
    pub fn dram_bytes(&self) -> (usize, usize) {
        let slots = self.tables.iter().map(|t| t.slots.capacity() * 6).sum();
        let heads = self.tables.iter().map(|t| t.heads.capacity() * 2).sum();
        (slots, heads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::Kind;

    #[test]
    fn entries_pack_into_48_bits() {
        let e = Entry {
            page: MAX_PAGES - 1,
            tag: 0x1ff,
            rrip: 5,
        };
        assert_eq!(unpack(pack(e, 1234, true)), (e, 1234, true));
        let e = Entry {
            page: 0,
            tag: 0,
            rrip: 0,
        };
        assert_eq!(unpack(pack(e, NIL, false)), (e, NIL, false));
    }

    /// A saved index comes back as it was; one whose chains are broken (a cycle, a slot past
    /// the slab, an entry on a dead page) is refused whole, leaving the index empty.
    #[test]
    fn saved_chains_are_checked_on_load() {
        let e = |page| Entry {
            page,
            tag: 1,
            rrip: 6,
        };
        let mut ix = Index::new(1, 4, 1, 8);
        for p in 0..5 {
            assert!(ix.insert(0, p % 2, e(p)));
        }
        let slot = ix.bucket(0, 1)[0].0;
        ix.remove(0, 1, slot);
        let mut enc = Enc::default();
        ix.save(&mut enc);
        let load = |bytes: &[u8], live: &dyn Fn(u32) -> bool| {
            let mut fresh = Index::new(1, 4, 1, 8);
            let r = fresh.load(
                &mut crate::persist::decode(Kind::Kangaroo, bytes),
                |_, p| live(p),
            );
            (r, fresh)
        };
        let (r, back) = load(&enc.0, &|_| true);
        r.unwrap();
        assert_eq!(back.len(), 4);
        assert_eq!(back.bucket(0, 0), ix.bucket(0, 0));
        assert_eq!(back.bucket(0, 1), ix.bucket(0, 1));
        let (r, back) = load(&enc.0, &|p| p != 2);
        assert!(r.unwrap_err().to_string().contains("entry"));
        assert_eq!(back.len(), 0);
        // Bucket 0's head is its newest entry (page 4); point its `next` at itself.
        let head = ix.tables[0].heads[0] as usize;
        let mut cyclic = ix.tables[0].slots[head];
        let (entry, _, valid) = unpack(cyclic);
        cyclic = pack(entry, head as u16, valid);
        let mut bad = enc.0.clone();
        // Layout: heads (len u64 + 4 × u16), then slots (len u64 + 3 u16 per slot).
        let at = 8 + 4 * 2 + 8 + head * 6;
        for (i, w) in cyclic.iter().enumerate() {
            bad[at + 2 * i..at + 2 * i + 2].copy_from_slice(&w.to_le_bytes());
        }
        let (r, _) = load(&bad, &|_| true);
        assert!(r.unwrap_err().to_string().contains("chained twice"));
    }

    #[test]
    fn buckets_chain_and_free_slots_are_reused() {
        let mut ix = Index::new(2, 10, 3, 4);
        for i in 0..5u32 {
            assert!(ix.insert(
                1,
                7,
                Entry {
                    page: i,
                    tag: i as u16,
                    rrip: 6
                }
            ));
        }
        assert!(ix.insert(
            1,
            4,
            Entry {
                page: 9,
                tag: 9,
                rrip: 6
            }
        ));
        let b = ix.bucket(1, 7);
        assert_eq!(
            b.iter().map(|(_, e)| e.page).collect::<Vec<_>>(),
            vec![4, 3, 2, 1, 0]
        );
        // Bucket 4 shares partition 1's table 1 (4 % 3 == 7 % 3) with bucket 7 but not its chain.
        assert_eq!(ix.bucket(1, 4).len(), 1);
        assert!(ix.bucket(0, 7).is_empty());
        ix.remove(1, 7, b[2].0);
        ix.remove(1, 7, b[0].0);
        ix.set_rrip(1, 7, b[4].0, 2);
        let after: Vec<_> = ix
            .bucket(1, 7)
            .iter()
            .map(|(_, e)| (e.page, e.rrip))
            .collect();
        assert_eq!(after, vec![(3, 6), (1, 6), (0, 2)]);
        assert_eq!(ix.len(), 4);
        assert!(ix.insert(
            1,
            7,
            Entry {
                page: 11,
                tag: 0,
                rrip: 6
            }
        ));
        assert_eq!(ix.tables[4].slots.len(), 6, "freed slot reused");
    }
}
