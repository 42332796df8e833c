//! A DRAM LRU engine behind the cache crate's `Engine` trait, so the cache stage runs before
//! (and without) a flash device; a flash engine from `lachesis-cache` plugs in the same way.

use lachesis_cache::{Engine, EngineStats};
use lru::LruCache;

pub struct MemEngine {
    lru: LruCache<Vec<u8>, Vec<u8>>,
    capacity: usize,
    used: usize,
    /// FIFO: a hit does not move the object (evicted in insertion order).
    fifo: bool,
    stats: EngineStats,
    /// Where evicted objects go, when someone wants them (level-1 demotion).
    evicted: Option<Evicted>,
}

/// Objects a [`MemEngine`] evicted, (key, value), until their owner takes them.
pub type Evicted = std::sync::Arc<std::sync::Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;

impl MemEngine {
    /// An LRU engine holding at most `capacity` bytes of keys and values.
    pub fn new(capacity: usize) -> Self {
        MemEngine {
            lru: LruCache::unbounded(),
            capacity,
            used: 0,
            fifo: false,
            stats: EngineStats::default(),
            evicted: None,
        }
    }

    /// The same, keeping what it evicts in `evicted`.
    pub fn keeping_evicted(self, evicted: Evicted) -> Self {
        MemEngine {
            evicted: Some(evicted),
            ..self
        }
    }

    /// The same, evicting in insertion order (hits do not refresh an object).
    pub fn fifo(capacity: usize) -> Self {
        MemEngine {
            fifo: true,
            ..Self::new(capacity)
        }
    }

    fn evict_to(&mut self, capacity: usize) {
        while self.used > capacity {
            match self.lru.pop_lru() {
                Some((k, v)) => {
                    self.used -= k.len() + v.len();
                    self.stats.evictions += 1;
                    if let Some(e) = &self.evicted {
                        e.lock().unwrap_or_else(|e| e.into_inner()).push((k, v));
                    }
                }
                None => break,
            }
        }
    }
}

impl Engine for MemEngine {
    fn get(&mut self, key: &[u8]) -> lachesis_cache::Result<Option<Vec<u8>>> {
        self.stats.gets += 1;
        let v = if self.fifo {
            self.lru.peek(key).cloned()
        } else {
            self.lru.get(key).cloned()
        };
        if v.is_some() {
            self.stats.hits += 1;
        }
        Ok(v)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> lachesis_cache::Result<bool> {
        self.stats.sets += 1;
        self.delete_quiet(key);
        let size = key.len() + value.len();
        if size > self.capacity {
            self.stats.rejected_sets += 1;
            return Ok(false);
        }
        self.evict_to(self.capacity - size);
        self.lru.put(key.to_vec(), value.to_vec());
        self.used += size;
        self.stats.app_bytes_written += size as u64;
        Ok(true)
    }

    fn delete(&mut self, key: &[u8]) -> lachesis_cache::Result<bool> {
        self.stats.deletes += 1;
        Ok(self.delete_quiet(key))
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            objects: self.lru.len() as u64,
            ..self.stats.clone()
        }
    }

    fn dram_bytes(&self) -> usize {
        // Keys and values plus the LRU's per-entry node (two pointers and two Vec headers).
        self.used + self.lru.len() * (2 * 8 + 2 * 24)
    }

    /// In place: growing takes effect at once, shrinking evicts the least recently used (or,
    /// FIFO, the oldest) objects down to the new capacity.
    fn resize(&mut self, bytes: u64) -> lachesis_cache::Result<bool> {
        self.capacity = usize::try_from(bytes).unwrap_or(usize::MAX);
        self.evict_to(self.capacity);
        Ok(true)
    }
}

impl MemEngine {
    fn delete_quiet(&mut self, key: &[u8]) -> bool {
        match self.lru.pop(key) {
            Some(v) => {
                self.used -= key.len() + v.len();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_within_capacity() {
        let mut e = MemEngine::new(3 * (1 + 10));
        for k in [b"a", b"b", b"c"] {
            assert!(e.set(k, &[0; 10]).unwrap());
        }
        e.get(b"a").unwrap();
        e.set(b"d", &[1; 10]).unwrap();
        assert!(e.get(b"b").unwrap().is_none());
        assert!(e.get(b"a").unwrap().is_some());
        assert_eq!(e.stats().evictions, 1);
        assert!(!e.set(b"huge", &[0; 100]).unwrap());
        assert!(e.delete(b"a").unwrap());
        assert!(!e.delete(b"a").unwrap());
    }

    #[test]
    fn evicted_objects_are_kept_for_their_owner_and_deleted_ones_are_not() {
        let kept = Evicted::default();
        let mut e = MemEngine::new(2 * (1 + 10)).keeping_evicted(kept.clone());
        for k in [b"a", b"b", b"c"] {
            e.set(k, &[k[0]; 10]).unwrap();
        }
        e.delete(b"b").unwrap();
        e.resize(0).unwrap();
        let got: Vec<_> = std::mem::take(&mut *kept.lock().unwrap());
        assert_eq!(
            got,
            vec![
                (b"a".to_vec(), vec![b'a'; 10]),
                (b"c".to_vec(), vec![b'c'; 10])
            ]
        );
    }

    #[test]
    fn fifo_ignores_hits_and_resize_evicts_down() {
        let mut e = MemEngine::fifo(3 * 11);
        for k in [b"a", b"b", b"c"] {
            e.set(k, &[0; 10]).unwrap();
        }
        e.get(b"a").unwrap();
        e.set(b"d", &[1; 10]).unwrap();
        assert!(
            e.get(b"a").unwrap().is_none(),
            "FIFO evicts the oldest, hit or not"
        );
        assert!(e.resize(11).unwrap());
        assert_eq!(e.stats().objects, 1);
        assert!(e.get(b"d").unwrap().is_some());
        assert!(e.resize(5 * 11).unwrap());
        for k in [b"e", b"f", b"g", b"h"] {
            e.set(k, &[0; 10]).unwrap();
        }
        assert_eq!(e.stats().objects, 5);
    }
}
