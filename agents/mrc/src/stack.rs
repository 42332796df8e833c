//! LRU stack with O(log n) reuse distances (Olken's algorithm).
//!
//! Every reference takes the next timestamp ("slot"); a key's weight lives at
//! the slot of its last reference. The reuse distance of a key is the total
//! weight at slots at or after its previous slot: the distinct objects (or
//! their bytes) touched since, plus itself. That is a suffix sum, kept by a
//! Fenwick tree.
//!
//! Hand-written rather than taken from a crate because the speed target needs
//! its shape. The Fenwick tree indexes blocks of slots, not slots, so it is
//! small enough to stay in cache, and the part of a block is summed from a
//! flat array: when every key weighs 1 (curves by objects) that array is just
//! the bitset of live slots and the sum one popcount, so a reference touches
//! the map, a bitset of 1 bit per slot and the tree; with byte weights it is
//! a `u32` per slot, in blocks of 16 (one cache line). Order-statistic tree
//! crates allocate a node per key and chase pointers on every reference.
//! When slots run out the live slots are compacted in stack order (amortised
//! O(1) per reference: the array is kept at least twice the live keys), so
//! timestamps never overflow.

use crate::hash::KeyMap;

/// log2 of the slots per tree block: a whole bitset word when counting, a
/// cache line of `u32` weights otherwise.
const COUNTING_BLOCK_BITS: u32 = 6;
const WEIGHTED_BLOCK_BITS: u32 = 4;
const MIN_SLOTS: usize = 256;

#[derive(Debug, Clone)]
pub struct LruStack {
    /// key -> slot of its last reference.
    map: KeyMap<u32>,
    slot_key: Vec<u64>,
    /// Weight at each slot, 0 once the key moved on; empty when every key
    /// weighs 1 (the live bits are the weights then).
    weight: Vec<u32>,
    counting: bool,
    block_bits: u32,
    /// One bit per slot: holds a key's last reference. Needed besides the
    /// weights because a zero-byte object has weight 0 yet is on the stack.
    live: Vec<u64>,
    /// 1-based Fenwick tree over per-block weight sums, except for
    /// `pending`: changes to the newest block wait there until references
    /// move on to the next block. Queries only ever sum blocks before the
    /// one asked about, which are never the newest, so almost every
    /// reference saves one tree walk.
    tree: Vec<u64>,
    pending_block: usize,
    pending: u64,
    next: usize,
    live_total: u64,
}

impl Default for LruStack {
    fn default() -> Self {
        Self::new()
    }
}

impl LruStack {
    /// A stack where each key weighs what `access` says (e.g. its bytes).
    pub fn new() -> Self {
        Self::build(false)
    }

    /// A stack where every key weighs 1 (`access` ignores the weight):
    /// distances count objects, and less memory is touched per reference.
    pub fn counting() -> Self {
        Self::build(true)
    }

    fn build(counting: bool) -> Self {
        let slots = MIN_SLOTS;
        let block_bits = if counting {
            COUNTING_BLOCK_BITS
        } else {
            WEIGHTED_BLOCK_BITS
        };
        LruStack {
            map: KeyMap::default(),
            slot_key: vec![0; slots],
            weight: if counting { Vec::new() } else { vec![0; slots] },
            counting,
            block_bits,
            live: vec![0; slots / 64],
            tree: vec![0; (slots >> block_bits) + 1],
            pending_block: 0,
            pending: 0,
            next: 0,
            live_total: 0,
        }
    }

    /// Keys on the stack.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Total weight of the keys on the stack (the working set so far).
    pub fn total_weight(&self) -> u64 {
        self.live_total
    }

    pub fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    /// Reference `key` with weight `w` (ignored by a counting stack), moving
    /// it to the top. Returns its reuse distance — the weight of the stack
    /// from the top down to and including the key, as it was before this
    /// reference — or `None` on a first reference.
    #[inline]
    pub fn access(&mut self, key: u64, w: u32) -> Option<u64> {
        if self.next == self.slot_key.len() {
            self.compact();
        }
        let slot = self.next;
        let distance = match self.map.insert(key, slot as u32) {
            Some(old) => {
                let old = old as usize;
                let d = self.suffix_sum(old);
                self.clear_slot(old);
                Some(d)
            }
            None => None,
        };
        self.set_slot(slot, key, w);
        self.next += 1;
        distance
    }

    /// Drop `key` from the stack (SHARDS fixed-size evicts sampled keys).
    pub fn remove(&mut self, key: u64) -> bool {
        match self.map.remove(&key) {
            Some(slot) => {
                self.clear_slot(slot as usize);
                true
            }
            None => false,
        }
    }

    /// Weight at slots `>= slot`.
    #[inline]
    fn suffix_sum(&self, slot: usize) -> u64 {
        let block = slot >> self.block_bits;
        let start = block << self.block_bits;
        let before_in_block: u64 = if self.counting {
            // The block is one aligned bitset word (64 slots).
            let word = self.live[slot >> 6];
            let below_slot = (1u64 << (slot & 63)) - 1;
            (word & below_slot).count_ones() as u64
        } else {
            self.weight[start..slot].iter().map(|&w| w as u64).sum()
        };
        let mut before_blocks = 0u64;
        let mut i = block;
        while i > 0 {
            before_blocks = before_blocks.wrapping_add(self.tree[i]);
            i &= i - 1;
        }
        self.live_total - before_blocks - before_in_block
    }

    #[inline]
    fn clear_slot(&mut self, slot: usize) {
        let w = if self.counting {
            1
        } else {
            let w = self.weight[slot] as u64;
            self.weight[slot] = 0;
            w
        };
        self.live[slot >> 6] &= !(1u64 << (slot & 63));
        self.live_total -= w;
        self.block_add(slot >> self.block_bits, w.wrapping_neg());
    }

    #[inline]
    fn set_slot(&mut self, slot: usize, key: u64, w: u32) {
        let w = if self.counting {
            1
        } else {
            self.weight[slot] = w;
            w as u64
        };
        self.slot_key[slot] = key;
        self.live[slot >> 6] |= 1u64 << (slot & 63);
        self.live_total += w;
        self.block_add(slot >> self.block_bits, w);
    }

    /// Add `delta` to block `block`, deferring changes to the newest block.
    #[inline]
    fn block_add(&mut self, block: usize, delta: u64) {
        if block == self.pending_block {
            self.pending = self.pending.wrapping_add(delta);
        } else if block > self.pending_block {
            // References moved on to a new block: the old one is complete.
            let (b, d) = (self.pending_block, self.pending);
            self.tree_add(b, d);
            self.pending_block = block;
            self.pending = delta;
        } else {
            self.tree_add(block, delta);
        }
    }

    /// Add `delta` (two's complement for subtraction) to block `block`.
    #[inline]
    fn tree_add(&mut self, block: usize, delta: u64) {
        let n = self.tree.len() - 1;
        let mut i = block + 1;
        while i <= n {
            self.tree[i] = self.tree[i].wrapping_add(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Renumber live slots 0.. in stack order, doubling the arrays first if
    /// more than half the slots are live (so the next compaction is at least
    /// as many references away as there are keys).
    fn compact(&mut self) {
        let slots = self.slot_key.len();
        let live = self.map.len();
        let new_slots = if live * 2 > slots { slots * 2 } else { slots };
        // A live slot's new number is its rank among live slots. Renumber
        // the map by walking it in memory order with per-word ranks, rather
        // than looking every key up (a cache miss each on a large map).
        let mut rank = Vec::with_capacity(self.live.len());
        let mut acc = 0u32;
        for &word in &self.live {
            rank.push(acc);
            acc += word.count_ones();
        }
        let live_bits = &self.live;
        for v in self.map.values_mut() {
            let s = *v as usize;
            let below = live_bits[s >> 6] & ((1u64 << (s & 63)) - 1);
            *v = rank[s >> 6] + below.count_ones();
        }
        let mut j = 0usize;
        for s in 0..slots {
            if self.live[s >> 6] & (1u64 << (s & 63)) == 0 {
                continue;
            }
            self.slot_key[j] = self.slot_key[s];
            if !self.counting {
                self.weight[j] = self.weight[s];
            }
            j += 1;
        }
        self.slot_key.resize(new_slots, 0);
        if !self.counting {
            self.weight.resize(new_slots, 0);
            self.weight[j..].iter_mut().for_each(|w| *w = 0);
        }
        self.live.clear();
        self.live.resize(new_slots / 64, 0);
        for s in 0..j {
            self.live[s >> 6] |= 1u64 << (s & 63);
        }
        self.next = j;
        self.rebuild_tree();
    }

    /// O(n) Fenwick construction from the weights (nothing pending after).
    fn rebuild_tree(&mut self) {
        self.pending_block = 0;
        self.pending = 0;
        let block = 1usize << self.block_bits;
        let blocks = self.slot_key.len() / block;
        self.tree.clear();
        self.tree.resize(blocks + 1, 0);
        for b in 0..blocks {
            let range = b * block..(b + 1) * block;
            let s: u64 = if self.counting {
                self.live[b].count_ones() as u64
            } else {
                self.weight[range].iter().map(|&w| w as u64).sum()
            };
            self.tree[b + 1] = self.tree[b + 1].wrapping_add(s);
            let parent = (b + 1) + ((b + 1) & (b + 1).wrapping_neg());
            if parent <= blocks {
                let v = self.tree[b + 1];
                self.tree[parent] = self.tree[parent].wrapping_add(v);
            }
        }
    }

    /// Bytes held, from capacities.
    pub fn footprint_bytes(&self) -> usize {
        crate::policies::map_bytes(&self.map)
            + self.slot_key.capacity() * 8
            + self.weight.capacity() * 4
            + self.live.capacity() * 8
            + self.tree.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference distances by walking a Vec as the LRU stack.
    fn naive(trace: &[(u64, u32)]) -> Vec<Option<u64>> {
        let mut stack: Vec<(u64, u32)> = Vec::new();
        trace
            .iter()
            .map(|&(k, w)| {
                let pos = stack.iter().position(|&(x, _)| x == k);
                let d = pos.map(|p| stack[..=p].iter().map(|&(_, w)| w as u64).sum());
                if let Some(p) = pos {
                    stack.remove(p);
                }
                stack.insert(0, (k, w));
                d
            })
            .collect()
    }

    #[test]
    fn distances_match_a_naive_stack_through_compactions() {
        // Small key space and many references: many compactions, some growth.
        let mut x = 12345u64;
        let trace: Vec<(u64, u32)> = (0..20_000)
            .map(|i| {
                x = crate::hash::mix64(x);
                let key = if i < 10_000 { x % 50 } else { x % 700 };
                (key, (key % 7) as u32)
            })
            .collect();
        let mut s = LruStack::new();
        let got: Vec<Option<u64>> = trace.iter().map(|&(k, w)| s.access(k, w)).collect();
        assert_eq!(got, naive(&trace));
        let ones: Vec<(u64, u32)> = trace.iter().map(|&(k, _)| (k, 1)).collect();
        let mut c = LruStack::counting();
        let got: Vec<Option<u64>> = trace.iter().map(|&(k, w)| c.access(k, w)).collect();
        assert_eq!(got, naive(&ones));
    }

    #[test]
    fn remove_takes_a_key_off_the_stack() {
        let mut s = LruStack::counting();
        s.access(1, 1);
        s.access(2, 1);
        s.access(3, 1);
        assert!(s.remove(2));
        assert!(!s.remove(2));
        assert_eq!(s.access(1, 1), Some(2));
        assert_eq!(s.len(), 2);
    }
}
