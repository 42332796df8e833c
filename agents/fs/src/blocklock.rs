//! Striped per-block range locks for user-space IO: a read of a 4 KiB block sees it wholly
//! before or wholly after a concurrent write of it, never part of each (the backing file
//! system, a remote agent or a replica copy alone do not promise that for pread/pwrite).
//!
//! Block `b` of file `f` maps to a stripe; an IO takes the stripes of all its blocks in
//! ascending order (so two IOs never wait on each other in a cycle): shared for reads,
//! exclusive for writes. Neighbouring blocks of one file fall on neighbouring stripes, so
//! an IO of up to `STRIPES` blocks never waits on itself; two unrelated blocks may share a
//! stripe, which only costs them some parallelism.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

const BLOCK: u64 = 4096;
const STRIPES: usize = 4096;

pub struct BlockLocks {
    stripes: Vec<RwLock<()>>,
}

impl Default for BlockLocks {
    fn default() -> Self {
        BlockLocks {
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
        }
    }
}

impl BlockLocks {
    /// The stripes of the blocks of `[off, off+len)` of `file`, ascending, each once.
    fn stripes_of(&self, file: u64, off: u64, len: u64) -> Vec<usize> {
        let n = self.stripes.len() as u64;
        if len == 0 {
            return vec![];
        }
        let (first, last) = (off / BLOCK, (off + len - 1) / BLOCK);
        if last - first + 1 >= n {
            return (0..n as usize).collect();
        }
        // A per-file start spreads files over the stripes.
        let base = file.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        let mut v: Vec<usize> = (first..=last)
            .map(|b| (base.wrapping_add(b) % n) as usize)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub fn read(&self, file: u64, off: u64, len: u64) -> Vec<RwLockReadGuard<'_, ()>> {
        self.stripes_of(file, off, len)
            .into_iter()
            .map(|i| self.stripes[i].read().unwrap_or_else(|e| e.into_inner()))
            .collect()
    }

    pub fn write(&self, file: u64, off: u64, len: u64) -> Vec<RwLockWriteGuard<'_, ()>> {
        self.stripes_of(file, off, len)
            .into_iter()
            .map(|i| self.stripes[i].write().unwrap_or_else(|e| e.into_inner()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_read_of_a_block_waits_for_its_writer_other_blocks_do_not() {
        let l = BlockLocks::default();
        std::thread::scope(|s| {
            let w = l.write(7, 4096, 4096);
            let (tx, rx) = mpsc::channel();
            let l = &l;
            let tx2 = tx.clone();
            // Overlaps the written block by one byte.
            s.spawn(move || {
                let _r = l.read(7, 8191, 2);
                tx.send("overlapping").unwrap();
            });
            s.spawn(move || {
                let _r = l.read(7, 8192, 4096);
                tx2.send("next block").unwrap();
            });
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(5)).unwrap(),
                "next block"
            );
            assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
            drop(w);
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(5)).unwrap(),
                "overlapping"
            );
        });
    }

    #[test]
    fn stripes_are_ascending_and_unique_and_large_ios_take_all() {
        let l = BlockLocks::default();
        let v = l.stripes_of(3, 100, 1 << 20);
        assert_eq!(v.len(), 257);
        assert!(v.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(l.stripes_of(3, 0, 1 << 30).len(), STRIPES);
        assert!(l.stripes_of(3, 5, 0).is_empty());
        // Readers share a stripe.
        let _a = l.read(1, 0, 4096);
        let _b = l.read(1, 0, 4096);
    }
}
