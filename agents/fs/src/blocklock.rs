//! Striped per-block range locks for user-space IO: a read of a 4 KiB block sees it wholly
//! before or wholly after a concurrent write of it, never part of each (the backing file
//! system, a remote agent or a replica copy alone do not promise that for pread/pwrite).
//!
//! Block `b` of file `f` maps to a stripe; an IO takes the stripes of all its blocks in
//! ascending order (so two IOs never wait on each other in a cycle): shared for reads,
//! exclusive for writes. Neighbouring blocks of one file fall on neighbouring stripes, so
//! an IO of up to `STRIPES` blocks never waits on itself; two unrelated blocks may share a
//! stripe, which only costs them some parallelism.
//!
//! [`BlockLocks::waits`] counts the acquisitions that had to wait (contention, in the stats
//! file); tests use it to know that an IO is blocked on a block lock without sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{
    LockResult, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError, TryLockResult,
};

const BLOCK: u64 = 4096;
const STRIPES: usize = 4096;

pub struct BlockLocks {
    stripes: Vec<RwLock<()>>,
    waits: AtomicU64,
}

impl Default for BlockLocks {
    fn default() -> Self {
        BlockLocks {
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            waits: AtomicU64::new(0),
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
        self.lock(file, off, len, RwLock::try_read, RwLock::read)
    }

    pub fn write(&self, file: u64, off: u64, len: u64) -> Vec<RwLockWriteGuard<'_, ()>> {
        self.lock(file, off, len, RwLock::try_write, RwLock::write)
    }

    /// The range's stripes locked in order with `try_lock`, or `lock` (counted as a wait) when
    /// that would block; a poisoned stripe is taken as is.
    fn lock<'a, G>(
        &'a self,
        file: u64,
        off: u64,
        len: u64,
        try_lock: impl Fn(&'a RwLock<()>) -> TryLockResult<G>,
        lock: impl Fn(&'a RwLock<()>) -> LockResult<G>,
    ) -> Vec<G> {
        self.stripes_of(file, off, len)
            .into_iter()
            .map(|i| match try_lock(&self.stripes[i]) {
                Ok(g) => g,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    self.waits.fetch_add(1, Ordering::Relaxed);
                    lock(&self.stripes[i]).unwrap_or_else(|e| e.into_inner())
                }
            })
            .collect()
    }

    /// Stripe acquisitions that found the stripe taken and waited for it.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_read_of_a_block_waits_for_its_writer_other_blocks_do_not() {
        let l = BlockLocks::default();
        let released = AtomicBool::new(false);
        std::thread::scope(|s| {
            let w = l.write(7, 4096, 4096);
            let (tx, rx) = mpsc::channel();
            let (l, released) = (&l, &released);
            let tx2 = tx.clone();
            // Overlaps the written block by one byte: it must get its lock only after the
            // writer let go (it reports whether that had happened when it got it).
            s.spawn(move || {
                let _r = l.read(7, 8191, 2);
                tx.send(("overlapping", released.load(Ordering::SeqCst)))
                    .unwrap();
            });
            s.spawn(move || {
                let _r = l.read(7, 8192, 4096);
                tx2.send(("next block", released.load(Ordering::SeqCst)))
                    .unwrap();
            });
            // The deadlines only turn a hang into a failure.
            let guard = Duration::from_secs(60);
            assert_eq!(rx.recv_timeout(guard).unwrap(), ("next block", false));
            // The overlapping reader is blocked on the writer's stripe: wait until it waits.
            let mut polls = 0u32;
            while l.waits() == 0 {
                polls += 1;
                assert!(
                    polls < 60_000,
                    "the overlapping read never waited ({polls} polls)"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(
                rx.try_recv().is_err(),
                "a read passed a writer of its block"
            );
            released.store(true, Ordering::SeqCst);
            drop(w);
            assert_eq!(rx.recv_timeout(guard).unwrap(), ("overlapping", true));
        });
        assert_eq!(l.waits(), 1);
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
