//! First in, first out: a hit changes nothing, so the queue is insertion
//! order (what a log-structured flash cache does without reinsertion). A
//! ring buffer rather than a linked list: the full simulations are bound by
//! memory traffic, and this leaves the map as the only random access.

use super::list::set_bytes;
use super::Policy;
use crate::hash::KeySet;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
pub struct Fifo {
    capacity: u64,
    used: u64,
    cached: KeySet,
    queue: VecDeque<(u64, u64)>,
}

impl Fifo {
    pub fn new(capacity: u64) -> Self {
        Fifo {
            capacity,
            used: 0,
            cached: KeySet::default(),
            queue: VecDeque::new(),
        }
    }
}

impl Policy for Fifo {
    fn access(&mut self, key: u64, weight: u64) -> bool {
        if self.cached.contains(&key) {
            return true;
        }
        if weight > self.capacity {
            return false;
        }
        while self.used + weight > self.capacity {
            let Some((k, w)) = self.queue.pop_front() else {
                break;
            };
            self.cached.remove(&k);
            self.used -= w;
        }
        self.queue.push_back((key, weight));
        self.cached.insert(key);
        self.used += weight;
        false
    }

    fn footprint_bytes(&self) -> usize {
        set_bytes(&self.cached) + self.queue.capacity() * 16
    }
}
