//! The DRAM cache in front of the flash engines: LRU, bounded in bytes, write-back (an object
//! set by the application reaches flash when DRAM evicts it).

use lru::LruCache;

/// Per-object bookkeeping charged against the capacity besides key and value: the map entry
/// and the list node.
pub const OVERHEAD: usize = 64;

struct Item {
    value: Vec<u8>,
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
///
/// On the `lru` crate's hash map with an intrusive list: a hit moves its node to the front in
/// O(1). An ordered map of access ticks did the same with a remove and an insert per hit, the
/// largest user-space cost of a KV get (docs/benchmarks/kv.md).
pub struct DramLru {
    capacity: usize,
    used: usize,
    /// Unbounded in entries: the bound is in bytes, kept by `shrink_to_fit`.
    items: LruCache<Vec<u8>, Item>,
}

impl Default for DramLru {
    fn default() -> Self {
        DramLru {
            capacity: 0,
            used: 0,
            items: LruCache::unbounded(),
        }
    }
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

    /// A copy of the value, the object now the most recently used.
    pub fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.items.get(key).map(|i| i.value.clone())
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Evicted> {
        let (key, item) = self.items.pop_entry(key)?;
        self.used -= cost(&key, &item.value);
        Some(Evicted {
            key,
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
        self.used += cost(key, value);
        self.items.put(
            key.to_vec(),
            Item {
                value: value.to_vec(),
                dirty,
            },
        );
        self.shrink_to_fit()
    }

    fn shrink_to_fit(&mut self) -> Vec<Evicted> {
        let mut out = Vec::new();
        while self.used > self.capacity {
            let Some((key, item)) = self.items.pop_lru() else {
                break;
            };
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

    /// The naive model: a list from least to most recently used, evicting from the front.
    #[derive(Default)]
    struct Model {
        capacity: usize,
        list: Vec<(Vec<u8>, Vec<u8>, bool)>,
    }

    impl Model {
        fn used(&self) -> usize {
            self.list.iter().map(|(k, v, _)| cost(k, v)).sum()
        }
        fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
            let i = self.list.iter().position(|(k, _, _)| k == key)?;
            let e = self.list.remove(i);
            let v = e.1.clone();
            self.list.push(e);
            Some(v)
        }
        fn remove(&mut self, key: &[u8]) -> Option<(Vec<u8>, Vec<u8>, bool)> {
            let i = self.list.iter().position(|(k, _, _)| k == key)?;
            Some(self.list.remove(i))
        }
        fn shrink(&mut self) -> Vec<(Vec<u8>, Vec<u8>, bool)> {
            let mut out = Vec::new();
            while self.used() > self.capacity && !self.list.is_empty() {
                out.push(self.list.remove(0));
            }
            out
        }
        fn insert(
            &mut self,
            key: &[u8],
            value: &[u8],
            dirty: bool,
        ) -> Vec<(Vec<u8>, Vec<u8>, bool)> {
            self.remove(key);
            if cost(key, value) > self.capacity {
                return vec![(key.to_vec(), value.to_vec(), dirty)];
            }
            self.list.push((key.to_vec(), value.to_vec(), dirty));
            self.shrink()
        }
    }

    fn triple(e: Evicted) -> (Vec<u8>, Vec<u8>, bool) {
        (e.key, e.value, e.dirty)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Get(u8),
        Insert(u8, usize, bool),
        Remove(u8),
        Capacity(usize),
        TakeDirty,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u8..24).prop_map(Op::Get),
            4 => (0u8..24, 0usize..200, any::<bool>()).prop_map(|(k, n, d)| Op::Insert(k, n, d)),
            1 => (0u8..24).prop_map(Op::Remove),
            1 => (0usize..2000).prop_map(Op::Capacity),
            1 => Just(Op::TakeDirty),
        ]
    }

    proptest::proptest! {
        /// Same values, same evictions in the same order, same bytes charged as the naive
        /// list, under any mix of operations and capacity changes.
        #[test]
        fn matches_a_naive_lru_list(ops in proptest::collection::vec(op(), 1..300)) {
            let mut c = DramLru::new(1000);
            let mut m = Model { capacity: 1000, ..Model::default() };
            for (i, o) in ops.into_iter().enumerate() {
                let key = |k: u8| vec![b'k', k];
                match o {
                    Op::Get(k) => proptest::prop_assert_eq!(c.get(&key(k)), m.get(&key(k))),
                    Op::Insert(k, n, d) => {
                        let v = vec![i as u8; n];
                        let got: Vec<_> = c.insert(&key(k), &v, d).into_iter().map(triple).collect();
                        proptest::prop_assert_eq!(got, m.insert(&key(k), &v, d));
                    }
                    Op::Remove(k) => {
                        proptest::prop_assert_eq!(c.remove(&key(k)).map(triple), m.remove(&key(k)));
                    }
                    Op::Capacity(n) => {
                        m.capacity = n;
                        let got: Vec<_> = c.set_capacity(n).into_iter().map(triple).collect();
                        proptest::prop_assert_eq!(got, m.shrink());
                    }
                    Op::TakeDirty => {
                        let mut got: Vec<_> = c.take_dirty().into_iter().map(triple).collect();
                        let mut want: Vec<_> = m.list.iter().filter(|e| e.2).cloned().collect();
                        m.list.iter_mut().for_each(|e| e.2 = false);
                        got.sort();
                        want.sort();
                        proptest::prop_assert_eq!(got, want);
                    }
                }
                proptest::prop_assert_eq!(c.used(), m.used());
                proptest::prop_assert_eq!(c.len(), m.list.len());
            }
        }
    }
}
