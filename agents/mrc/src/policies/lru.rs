//! Least recently used.

use super::list::{map_bytes, Lists};
use super::Policy;
use crate::hash::KeyMap;

#[derive(Debug, Clone)]
pub struct Lru {
    capacity: u64,
    used: u64,
    map: KeyMap<u32>,
    list: Lists,
}

impl Lru {
    pub fn new(capacity: u64) -> Self {
        Lru {
            capacity,
            used: 0,
            map: KeyMap::default(),
            list: Lists::new(1),
        }
    }

    /// A new capacity: the most recent objects that fit stay.
    pub fn resize(&mut self, capacity: u64) {
        self.capacity = capacity;
        self.evict_to(capacity);
    }

    /// Drops every object whose key `keep` refuses.
    pub fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        let gone: Vec<(u64, u32)> = self
            .map
            .iter()
            .filter(|(&k, _)| !keep(k))
            .map(|(&k, &i)| (k, i))
            .collect();
        for (k, i) in gone {
            self.used -= self.list.remove(i).weight;
            self.map.remove(&k);
        }
    }

    /// The cached keys, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.map.keys().copied()
    }

    /// Evicts from the tail until the objects take at most `room`.
    fn evict_to(&mut self, room: u64) {
        while self.used > room {
            let Some(t) = self.list.tail(0) else { break };
            let n = self.list.remove(t);
            self.map.remove(&n.key);
            self.used -= n.weight;
        }
    }
}

impl Policy for Lru {
    fn access(&mut self, key: u64, weight: u64) -> bool {
        if let Some(&i) = self.map.get(&key) {
            self.list.move_to_head(i, 0);
            return true;
        }
        if weight > self.capacity {
            return false;
        }
        self.evict_to(self.capacity - weight);
        let i = self.list.push_head(0, key, weight);
        self.map.insert(key, i);
        self.used += weight;
        false
    }

    fn footprint_bytes(&self) -> usize {
        map_bytes(&self.map) + self.list.footprint_bytes()
    }
}
