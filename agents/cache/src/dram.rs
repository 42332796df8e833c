//! The DRAM cache in front of the flash engines: LRU, bounded in bytes, write-back (an object
//! set by the application reaches flash when DRAM evicts it).

use std::collections::{BTreeMap, HashMap};

/// Per-object bookkeeping charged against the capacity besides key and value: the map and
/// order entries.
pub const OVERHEAD: usize = 64;

struct Item {
    value: Vec<u8>,
    tick: u64,
    /// Set by the application and not yet on flash.
    dirty: bool,
}

/// An object leaving DRAM.
pub struct Evicted {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub dirty: bool,
}

/// A byte-bounded LRU map.
#[derive(Default)]
pub struct DramLru {
    capacity: usize,
    used: usize,
    items: HashMap<Vec<u8>, Item>,
    order: BTreeMap<u64, Vec<u8>>,
    tick: u64,
}

fn cost(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + OVERHEAD
}

impl DramLru {
    pub fn new(capacity: usize) -> DramLru {
        DramLru {
            capacity,
            ..DramLru::default()
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Bytes charged (keys, values and per-object overhead).
    pub fn used(&self) -> usize {
        self.used
    }

    pub fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.tick += 1;
        let tick = self.tick;
        let item = self.items.get_mut(key)?;
        let k = self
            .order
            .remove(&item.tick)
            .expect("order holds every item");
        item.tick = tick;
        self.order.insert(tick, k);
        Some(item.value.clone())
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Evicted> {
        let item = self.items.remove(key)?;
        self.order.remove(&item.tick);
        self.used -= cost(key, &item.value);
        Some(Evicted {
            key: key.to_vec(),
            value: item.value,
            dirty: item.dirty,
        })
    }

    /// Inserts or replaces `key`; returns what had to leave to make room (possibly the new
    /// object itself, when it is larger than the whole cache).
    pub fn insert(&mut self, key: &[u8], value: &[u8], dirty: bool) -> Vec<Evicted> {
        self.remove(key);
        if cost(key, value) > self.capacity {
            return vec![Evicted {
                key: key.to_vec(),
                value: value.to_vec(),
                dirty,
            }];
        }
        self.tick += 1;
        self.used += cost(key, value);
        self.items.insert(
            key.to_vec(),
            Item {
                value: value.to_vec(),
                tick: self.tick,
                dirty,
            },
        );
        self.order.insert(self.tick, key.to_vec());
        self.shrink_to_fit()
    }

    fn shrink_to_fit(&mut self) -> Vec<Evicted> {
        let mut out = Vec::new();
        while self.used > self.capacity {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            let item = self.items.remove(&key).expect("order and items agree");
            self.used -= cost(&key, &item.value);
            out.push(Evicted {
                key,
                value: item.value,
                dirty: item.dirty,
            });
        }
        out
    }

    /// Copies of the objects not yet on flash, which are then counted clean: the caller
    /// writes them to flash (a save of the cache).
    pub fn take_dirty(&mut self) -> Vec<Evicted> {
        let mut out = Vec::new();
        for (key, item) in self.items.iter_mut().filter(|(_, i)| i.dirty) {
            item.dirty = false;
            out.push(Evicted {
                key: key.clone(),
                value: item.value.clone(),
                dirty: true,
            });
        }
        out
    }

    /// Changes the capacity; shrinking returns the objects evicted.
    pub fn set_capacity(&mut self, capacity: usize) -> Vec<Evicted> {
        self.capacity = capacity;
        self.shrink_to_fit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_order_and_byte_bound() {
        let mut c = DramLru::new(3 * cost(b"k0", b"v0"));
        for i in 0..3 {
            assert!(c.insert(format!("k{i}").as_bytes(), b"v0", true).is_empty());
        }
        assert_eq!(c.get(b"k0").as_deref(), Some(&b"v0"[..]));
        let out = c.insert(b"k3", b"v0", false);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key, b"k1", "least recently used leaves first");
        assert!(out[0].dirty);
        let out = c.set_capacity(cost(b"k0", b"v0"));
        assert_eq!(out.len(), 2);
        assert_eq!(c.len(), 1);
        let big = c.insert(b"big", &[0; 500], true);
        assert_eq!(
            big.len(),
            1,
            "an object larger than the cache passes through"
        );
        assert_eq!(big[0].key, b"big");
        let mut c = DramLru::new(1000);
        c.insert(b"clean", b"v", false);
        c.insert(b"dirty", b"v", true);
        let dirty = c.take_dirty();
        assert_eq!(dirty.len(), 1, "only the dirty object, not the clean one");
        assert!(c.take_dirty().is_empty(), "taken objects count clean");
    }
}
