//! What of one declared file range has been read, in 64 KiB blocks aligned to file offsets
//! (the range's first and last block may be partial: a block is the range's bytes in it).
//!
//! A block is covered from its start onwards: a read that reaches the end of what is covered
//! extends it and carries the block's CRC-32 on, so sequential foreground reads of any size
//! (the kernel's readahead does not align to blocks) cover whole blocks, while a read in a
//! block's middle counts for nothing (the dispatcher reads that block itself). A block the
//! dispatcher has claimed takes no foreground bytes until it is done: each byte counts once.

/// Block size of coverage and checksums.
pub const BLOCK: u64 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Claimed,
    Done,
}

#[derive(Debug, Clone, Copy)]
struct Block {
    state: State,
    /// Bytes covered from the block's start.
    prefix: u32,
    /// CRC-32 of those bytes.
    crc: u32,
}

/// Bytes a call covered, by whom.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Covered {
    pub foreground: u64,
    pub dispatched: u64,
    pub shared: u64,
}

#[derive(Debug)]
pub struct Coverage {
    start: u64,
    end: u64,
    blocks: Vec<Block>,
    /// No open block lies before it (blocks are claimed in order).
    cursor: usize,
    done: usize,
}

/// A claimed block's bytes still to read: `[off, off + len)`; covered bytes before `off`
/// (foreground) are already in its CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub block: usize,
    pub off: u64,
    pub len: u64,
}

impl Coverage {
    /// The bytes `[start, end)` of a file.
    pub fn new(start: u64, end: u64) -> Self {
        let n = if end > start {
            (end.div_ceil(BLOCK) - start / BLOCK) as usize
        } else {
            0
        };
        Coverage {
            start,
            end,
            blocks: vec![
                Block {
                    state: State::Open,
                    prefix: 0,
                    crc: 0
                };
                n
            ],
            cursor: 0,
            done: 0,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_done(&self) -> bool {
        self.done == self.blocks.len()
    }

    /// Block `i`'s bytes `[s, e)`.
    fn span(&self, i: usize) -> (u64, u64) {
        let first = self.start / BLOCK;
        let s = ((first + i as u64) * BLOCK).max(self.start);
        let e = ((first + i as u64 + 1) * BLOCK).min(self.end);
        (s, e)
    }

    /// Counts the bytes `data`, read at `off`, extend; `shared`: the reader is the dispatcher
    /// working for another job.
    pub fn observe(&mut self, off: u64, data: &[u8], shared: bool) -> Covered {
        let mut out = Covered::default();
        let end = off + data.len() as u64;
        if data.is_empty() || end <= self.start || off >= self.end {
            return out;
        }
        let first = self.start / BLOCK;
        let lo = (off.max(self.start) / BLOCK - first) as usize;
        let hi = ((end.min(self.end) - 1) / BLOCK - first) as usize;
        for i in lo..=hi {
            let (s, e) = self.span(i);
            let b = self.blocks[i];
            if b.state != State::Open {
                continue;
            }
            let from = s + b.prefix as u64;
            if from < off || from >= end {
                continue;
            }
            let to = e.min(end);
            let piece = &data[(from - off) as usize..(to - off) as usize];
            let mut h = crc32fast::Hasher::new_with_initial(b.crc);
            h.update(piece);
            let blk = &mut self.blocks[i];
            blk.crc = h.finalize();
            blk.prefix += piece.len() as u32;
            if s + blk.prefix as u64 == e {
                blk.state = State::Done;
                self.done += 1;
                let n = e - s;
                if shared {
                    out.shared += n;
                } else {
                    out.foreground += n;
                }
            }
        }
        out
    }

    /// The next open block, claimed for the dispatcher.
    pub fn claim(&mut self) -> Option<Claim> {
        while self.cursor < self.blocks.len() {
            let i = self.cursor;
            self.cursor += 1;
            if self.blocks[i].state == State::Open {
                self.blocks[i].state = State::Claimed;
                let (s, e) = self.span(i);
                let off = s + self.blocks[i].prefix as u64;
                return Some(Claim {
                    block: i,
                    off,
                    len: e - off,
                });
            }
        }
        None
    }

    /// Bytes of open blocks (what the dispatcher would still read).
    pub fn remaining(&self) -> u64 {
        self.blocks[self.cursor.min(self.blocks.len())..]
            .iter()
            .enumerate()
            .filter(|(_, b)| b.state == State::Open)
            .map(|(j, b)| {
                let (s, e) = self.span(self.cursor + j);
                e - s - b.prefix as u64
            })
            .sum()
    }

    /// The dispatcher read `data` for a claim: the block is done. Returns the bytes it counts
    /// as foreground (its prefix) and dispatched.
    pub fn complete(&mut self, c: Claim, data: &[u8]) -> Covered {
        let (s, e) = self.span(c.block);
        let b = &mut self.blocks[c.block];
        debug_assert_eq!(b.state, State::Claimed);
        let mut h = crc32fast::Hasher::new_with_initial(b.crc);
        h.update(data);
        b.crc = h.finalize();
        b.state = State::Done;
        self.done += 1;
        Covered {
            foreground: e - s - c.len,
            dispatched: c.len,
            shared: 0,
        }
    }

    /// A claim whose read failed goes back to open (read again later).
    pub fn release(&mut self, c: Claim) {
        self.blocks[c.block].state = State::Open;
        self.cursor = self.cursor.min(c.block);
    }

    /// The range's checksum once done: CRC-32 of its blocks' CRC-32s (little endian).
    pub fn digest(&self) -> Option<u32> {
        if !self.is_done() {
            return None;
        }
        let mut h = crc32fast::Hasher::new();
        for b in &self.blocks {
            h.update(&b.crc.to_le_bytes());
        }
        Some(h.finalize())
    }
}

/// The digest of `data` read at `start` as [`Coverage::digest`] computes it (tests and tools).
pub fn digest_of(start: u64, data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    let mut off = start;
    let mut rest = data;
    while !rest.is_empty() {
        let n = ((off / BLOCK + 1) * BLOCK - off).min(rest.len() as u64) as usize;
        h.update(&crc32fast::hash(&rest[..n]).to_le_bytes());
        off += n as u64;
        rest = &rest[n..];
    }
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    #[test]
    fn sequential_unaligned_reads_cover_every_block_and_checksum_it() {
        let d = data(300_000);
        let mut c = Coverage::new(1000, 300_000);
        let mut off = 1000u64;
        let mut got = Covered::default();
        for n in [16_384usize, 32_768, 100_000, 5, 131_072, 20_000] {
            let e = (off as usize + n).min(d.len());
            let r = c.observe(off, &d[off as usize..e], false);
            got.foreground += r.foreground;
            off = e as u64;
        }
        assert!(c.is_done());
        assert_eq!(got.foreground, c.bytes());
        assert_eq!(c.digest(), Some(digest_of(1000, &d[1000..])));
        assert_eq!(c.claim(), None);
    }

    #[test]
    fn a_read_in_a_blocks_middle_counts_for_nothing() {
        let d = data(BLOCK as usize * 2);
        let mut c = Coverage::new(0, BLOCK * 2);
        let r = c.observe(100, &d[100..BLOCK as usize * 2], false);
        // Block 1 is read whole, block 0 from its middle.
        assert_eq!(r.foreground, BLOCK);
        let claim = c.claim().unwrap();
        assert_eq!((claim.block, claim.off, claim.len), (0, 0, BLOCK));
        let r = c.complete(claim, &d[..BLOCK as usize]);
        assert_eq!((r.dispatched, r.foreground), (BLOCK, 0));
        assert_eq!(c.digest(), Some(digest_of(0, &d)));
    }

    #[test]
    fn the_dispatcher_reads_the_rest_of_a_partly_covered_block_and_claimed_blocks_take_no_foreground(
    ) {
        let d = data(BLOCK as usize * 2);
        let mut c = Coverage::new(0, BLOCK * 2);
        c.observe(0, &d[..1000], false);
        let claim = c.claim().unwrap();
        assert_eq!((claim.off, claim.len), (1000, BLOCK - 1000));
        // A foreground read of the claimed block while the dispatcher reads it.
        assert_eq!(
            c.observe(1000, &d[1000..BLOCK as usize], false),
            Covered::default()
        );
        assert_eq!(c.remaining(), BLOCK);
        let r = c.complete(claim, &d[1000..BLOCK as usize]);
        assert_eq!((r.foreground, r.dispatched), (1000, BLOCK - 1000));
        let claim = c.claim().unwrap();
        c.release(claim);
        let claim = c.claim().unwrap();
        c.complete(claim, &d[BLOCK as usize..]);
        assert_eq!(c.digest(), Some(digest_of(0, &d)));
    }

    #[test]
    fn an_empty_range_is_done() {
        let c = Coverage::new(5, 5);
        assert!(c.is_done());
        assert_eq!(c.digest(), Some(crc32fast::hash(&[])));
    }
}
