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
        while self.used + weight > self.capacity {
            let Some(t) = self.list.tail(0) else { break };
            let n = self.list.remove(t);
            self.map.remove(&n.key);
            self.used -= n.weight;
        }
        let i = self.list.push_head(0, key, weight);
        self.map.insert(key, i);
        self.used += weight;
        false
    }

    fn footprint_bytes(&self) -> usize {
        map_bytes(&self.map) + self.list.footprint_bytes()
    }
}
