//! Re-reference interval prediction with 3 bits (SRRIP-HP, Jaleel et al.
//! ISCA'10), the policy Kangaroo's RRIParoo approximates per flash set.
//!
//! Every object has a predicted re-reference value (RRPV) 0..=7. New objects
//! enter at 6 ("long"), so a scan is evicted before anything that was hit;
//! a hit sets 0. Eviction takes an object at 7, oldest first; when there is
//! none, every RRPV ages by the amount that brings the largest to 7. Objects
//! sit in one list per RRPV, so aging is renaming lists (a rotation), not
//! touching objects: O(1) per reference where a scan of the cache would be
//! O(n). A hit moves an object out of the middle of its list, hence linked
//! lists (a ring buffer with stale entries measured slower and larger).

use super::list::{map_bytes, Lists};
use super::Policy;
use crate::hash::KeyMap;

const LEVELS: u8 = 8;
const MAX: u8 = LEVELS - 1;
const INSERT: u8 = LEVELS - 2;

#[derive(Debug, Clone)]
pub struct Rrip {
    capacity: u64,
    used: u64,
    map: KeyMap<u32>,
    lists: Lists,
    /// Physical list holding RRPV `v` is `(v + base) % 8`.
    base: u8,
}

impl Rrip {
    pub fn new(capacity: u64) -> Self {
        Rrip {
            capacity,
            used: 0,
            map: KeyMap::default(),
            lists: Lists::new(LEVELS as usize),
            base: 0,
        }
    }

    fn list_of(&self, rrpv: u8) -> u8 {
        (rrpv + self.base) % LEVELS
    }

    fn evict_one(&mut self) -> bool {
        let top = (0..=MAX)
            .rev()
            .find(|&v| self.lists.len(self.list_of(v)) > 0);
        let Some(top) = top else { return false };
        // Age everything by MAX - top: list for RRPV v becomes v + k.
        let k = MAX - top;
        self.base = (self.base + LEVELS - k) % LEVELS;
        let Some(t) = self.lists.tail(self.list_of(MAX)) else {
            return false;
        };
        let n = self.lists.remove(t);
        self.map.remove(&n.key);
        self.used -= n.weight;
        true
    }
}

impl Policy for Rrip {
    fn access(&mut self, key: u64, weight: u64) -> bool {
        if let Some(&i) = self.map.get(&key) {
            let l = self.list_of(0);
            self.lists.move_to_head(i, l);
            return true;
        }
        if weight > self.capacity {
            return false;
        }
        while self.used + weight > self.capacity {
            if !self.evict_one() {
                break;
            }
        }
        let l = self.list_of(INSERT);
        let i = self.lists.push_head(l, key, weight);
        self.map.insert(key, i);
        self.used += weight;
        false
    }

    fn footprint_bytes(&self) -> usize {
        map_bytes(&self.map) + self.lists.footprint_bytes()
    }
}
