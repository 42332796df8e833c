//! S3-FIFO (Yang et al., SOSP'23): a small FIFO (10% of the cache) filters
//! one-hit wonders, a main FIFO with 2-bit frequencies and reinsertion keeps
//! the rest, and a ghost FIFO of recently evicted keys sends a returning
//! key straight to main.
//!
//! An object leaves the small queue for main if it was hit at least once
//! while there (the paper's text; its pseudo-code says "more than once").
//! Its frequency restarts at 0 in main, so it must earn reinsertion there.
//! All three queues only ever pop at the front, so they are ring buffers.

use super::list::map_bytes;
use super::Policy;
use crate::hash::KeyMap;
use std::collections::VecDeque;

const MAX_FREQ: u8 = 3;

#[derive(Debug, Clone)]
pub struct S3Fifo {
    capacity: u64,
    small_target: u64,
    small_used: u64,
    main_used: u64,
    /// key -> frequency.
    freq: KeyMap<u8>,
    small: VecDeque<(u64, u64)>,
    main: VecDeque<(u64, u64)>,
    ghost: Ghost,
}

impl S3Fifo {
    pub fn new(capacity: u64) -> Self {
        let small_target = (capacity / 10).max(1);
        S3Fifo {
            capacity,
            small_target,
            small_used: 0,
            main_used: 0,
            freq: KeyMap::default(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: Ghost::new(capacity - small_target.min(capacity)),
        }
    }

    fn evict(&mut self) {
        if self.small_used >= self.small_target || self.main.is_empty() {
            self.evict_small();
        } else {
            self.evict_main();
        }
    }

    fn evict_small(&mut self) {
        while let Some((k, w)) = self.small.pop_front() {
            self.small_used -= w;
            match self.freq.get_mut(&k) {
                Some(f) if *f >= 1 => {
                    *f = 0;
                    self.main.push_back((k, w));
                    self.main_used += w;
                }
                _ => {
                    self.freq.remove(&k);
                    self.ghost.insert(k, w);
                    return;
                }
            }
        }
        self.evict_main();
    }

    fn evict_main(&mut self) {
        while let Some((k, w)) = self.main.pop_front() {
            match self.freq.get_mut(&k) {
                Some(f) if *f > 0 => {
                    *f -= 1;
                    self.main.push_back((k, w));
                }
                _ => {
                    self.freq.remove(&k);
                    self.main_used -= w;
                    return;
                }
            }
        }
    }
}

impl Policy for S3Fifo {
    fn access(&mut self, key: u64, weight: u64) -> bool {
        if let Some(f) = self.freq.get_mut(&key) {
            *f = (*f + 1).min(MAX_FREQ);
            return true;
        }
        if weight > self.capacity {
            return false;
        }
        let returning = self.ghost.take(key);
        while self.small_used + self.main_used + weight > self.capacity {
            let before = self.small_used + self.main_used;
            self.evict();
            if self.small_used + self.main_used == before {
                break;
            }
        }
        self.freq.insert(key, 0);
        if returning {
            self.main.push_back((key, weight));
            self.main_used += weight;
        } else {
            self.small.push_back((key, weight));
            self.small_used += weight;
        }
        false
    }

    fn footprint_bytes(&self) -> usize {
        map_bytes(&self.freq)
            + (self.small.capacity() + self.main.capacity()) * 16
            + self.ghost.footprint_bytes()
    }
}

/// Keys only, as much weight as the main queue holds. A key taken out early
/// (a ghost hit) leaves a stale queue entry, recognised by its sequence
/// number, instead of an O(n) removal.
#[derive(Debug, Clone)]
struct Ghost {
    capacity: u64,
    used: u64,
    seq: u64,
    queue: VecDeque<(u64, u64)>,
    /// key -> (sequence number of its live queue entry, weight).
    live: KeyMap<(u64, u64)>,
}

impl Ghost {
    fn new(capacity: u64) -> Self {
        Ghost {
            capacity,
            used: 0,
            seq: 0,
            queue: VecDeque::new(),
            live: KeyMap::default(),
        }
    }

    fn insert(&mut self, key: u64, weight: u64) {
        if weight > self.capacity {
            return;
        }
        if let Some((_, w)) = self.live.insert(key, (self.seq, weight)) {
            self.used -= w;
        }
        self.queue.push_back((key, self.seq));
        self.seq += 1;
        self.used += weight;
        if self.queue.len() > 2 * self.live.len() + 64 {
            // Ghost hits left mostly stale entries: drop them in one pass.
            let live = &self.live;
            self.queue
                .retain(|&(k, s)| live.get(&k).is_some_and(|&(ls, _)| ls == s));
        }
        while self.used > self.capacity {
            let Some((k, s)) = self.queue.pop_front() else {
                break;
            };
            if let Some(&(live_seq, w)) = self.live.get(&k) {
                if live_seq == s {
                    self.live.remove(&k);
                    self.used -= w;
                }
            }
        }
    }

    fn take(&mut self, key: u64) -> bool {
        match self.live.remove(&key) {
            Some((_, w)) => {
                self.used -= w;
                true
            }
            None => false,
        }
    }

    fn footprint_bytes(&self) -> usize {
        map_bytes(&self.live) + self.queue.capacity() * 16
    }
}
