//! S3-FIFO (Yang et al., SOSP'23), the variant of its authors' simulator,
//! libCacheSim (`S3FIFO.c`, the default `small-size-ratio=0.10,
//! ghost-size-ratio=0.90, move-to-main-threshold=2`), so that our full
//! simulation is the curve libCacheSim draws:
//!
//! - a small FIFO of `floor(C / 10)` units filters one-hit wonders; a main
//!   FIFO of the rest (`C - floor(C / 10)`) with 2-bit frequencies and
//!   reinsertion keeps the others; a ghost FIFO of keys (`floor(9 C / 10)`
//!   units) remembers what left the small queue unhit;
//! - every hit adds one to the object's frequency, capped at 3 (libCacheSim
//!   counts on and caps when it reinserts: the same thing);
//! - a miss whose key is in the ghost goes straight to main; any other miss
//!   goes to small, except before the cache's first eviction, while small is
//!   already full: then to main (libCacheSim's warm-up, which fills the
//!   whole cache instead of cycling the first objects through small);
//! - eviction takes from main when main holds more than its share (or small
//!   is empty), else from small;
//! - leaving small, an object hit at least twice there (frequency ≥ 2, the
//!   paper's pseudo-code "more than once") moves to main with frequency 0;
//!   any other goes to the ghost;
//! - leaving main, an object of frequency f > 0 is reinserted at the tail
//!   with f - 1; one of frequency 0 is evicted;
//! - an object must be smaller than the small queue to enter it (as large
//!   would flush it whole), and no larger to be admitted at all.
//!
//! One deliberate difference, for caches of fewer than 20 objects: there
//! libCacheSim's small queue holds at most one object, which it refuses to
//! admit, so nothing but ghost hits is cached (and it refuses to build a
//! cache of fewer than 10). Here the small queue is at least one unit and a
//! one-unit object always fits it, so a miniature cache of a few objects
//! (a large cache scaled by a small sampling rate) still behaves like S3-FIFO.
//! All three queues only ever pop at the front, so they are ring buffers.

use super::list::map_bytes;
use super::Policy;
use crate::hash::KeyMap;
use std::collections::VecDeque;

/// Hits counted per object (2 bits).
const MAX_FREQ: u8 = 3;
/// Hits in the small queue that earn a move to main.
const MOVE_TO_MAIN: u8 = 2;

#[derive(Debug, Clone)]
pub struct S3Fifo {
    capacity: u64,
    small_cap: u64,
    main_cap: u64,
    small_used: u64,
    main_used: u64,
    /// Nothing was evicted yet (libCacheSim's warm-up rule).
    warming: bool,
    /// key -> frequency.
    freq: KeyMap<u8>,
    small: VecDeque<(u64, u64)>,
    main: VecDeque<(u64, u64)>,
    ghost: Ghost,
}

/// `floor(c * num / 10)` without overflow.
fn tenths(c: u64, num: u64) -> u64 {
    ((c as u128 * num as u128) / 10) as u64
}

impl S3Fifo {
    pub fn new(capacity: u64) -> Self {
        let small_cap = tenths(capacity, 1).max(1).min(capacity);
        S3Fifo {
            capacity,
            small_cap,
            main_cap: capacity - small_cap,
            small_used: 0,
            main_used: 0,
            warming: true,
            freq: KeyMap::default(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: Ghost::new(tenths(capacity, 9)),
        }
    }

    fn evict(&mut self) {
        self.warming = false;
        if self.main_used > self.main_cap || self.small.is_empty() {
            self.evict_main();
        } else {
            self.evict_small();
        }
    }

    fn evict_small(&mut self) {
        while let Some((k, w)) = self.small.pop_front() {
            self.small_used -= w;
            match self.freq.get_mut(&k) {
                Some(f) if *f >= MOVE_TO_MAIN => {
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
        // Everything in small moved to main.
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
        // libCacheSim looks in the ghost (and forgets the key there) before
        // it asks whether the object may be admitted.
        let returning = self.ghost.take(key);
        if weight > self.small_cap {
            return false;
        }
        while self.small_used + self.main_used + weight > self.capacity {
            let before = self.small_used + self.main_used;
            self.evict();
            if self.small_used + self.main_used == before {
                break;
            }
        }
        if !returning && weight >= self.small_cap && weight > 1 {
            // Made room, then refused (libCacheSim's order).
            return false;
        }
        self.freq.insert(key, 0);
        if returning || (self.warming && self.small_used >= self.small_cap) {
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
