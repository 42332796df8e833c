//! One small Bloom filter per bucket, rebuilt whenever its bucket is rewritten (so deletions
//! need no counting filter), stored contiguously as the DRAM it really costs.
//!
//! Next to the filters, one bit per bucket says whether this cache wrote the bucket (or a
//! restored index says it did). A bucket it did not write holds data of an earlier life of the
//! device, from before a crash or an unsaved shutdown, and may hold an older copy of an object
//! whose newer one was lost with the DRAM state: such a bucket reads as empty, and the engines
//! do not merge its contents when they first rewrite it. Trimming cannot promise this (a
//! discard need not read back as zeroes); one bit per 4 KiB bucket can.

use crate::persist::{Dec, Enc};
use crate::Result;

/// Bloom filters for `n` buckets of `bits` bits each (0: no filter, only the written bits).
pub struct BucketBlooms {
    words: Vec<u64>,
    written: Vec<u64>,
    words_per: usize,
    bits: u64,
    hashes: u32,
}

/// A second, independent hash from the key hash: the bucket is chosen from the key hash's low
/// bits, so filter bits must not be derived from them directly.
#[inline]
fn mix(h: u64) -> u64 {
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl BucketBlooms {
    pub fn new(n: usize, bits: u32, hashes: u32) -> BucketBlooms {
        let words_per = (bits as usize).div_ceil(64);
        BucketBlooms {
            words: vec![0; n * words_per],
            written: vec![0; n.div_ceil(64)],
            words_per,
            bits: u64::from(bits),
            hashes: hashes.max(1),
        }
    }

    /// Whether this cache wrote `bucket` (see the module documentation).
    pub fn written(&self, bucket: usize) -> bool {
        self.written[bucket / 64] >> (bucket % 64) & 1 == 1
    }

    #[inline]
    fn positions(&self, h: u64) -> impl Iterator<Item = u64> + '_ {
        let m = mix(h);
        let (a, b) = (m & 0xffff_ffff, (m >> 32) | 1);
        (0..u64::from(self.hashes)).map(move |i| a.wrapping_add(i.wrapping_mul(b)) % self.bits)
    }

    pub fn may_contain(&self, bucket: usize, h: u64) -> bool {
        if !self.written(bucket) {
            return false;
        }
        let base = bucket * self.words_per;
        self.bits == 0
            || self
                .positions(h)
                .all(|p| self.words[base + (p / 64) as usize] & (1 << (p % 64)) != 0)
    }

    /// Replaces bucket's filter with one holding exactly `hashes` (the bucket was just
    /// written with them).
    pub fn rebuild(&mut self, bucket: usize, hashes: impl Iterator<Item = u64>) {
        self.written[bucket / 64] |= 1 << (bucket % 64);
        if self.bits == 0 {
            return;
        }
        let base = bucket * self.words_per;
        self.words[base..base + self.words_per].fill(0);
        for h in hashes {
            let ps: Vec<u64> = self.positions(h).collect();
            for p in ps {
                self.words[base + (p / 64) as usize] |= 1 << (p % 64);
            }
        }
    }

    /// DRAM the filters and the written bits take.
    pub fn bytes(&self) -> usize {
        (self.words.capacity() + self.written.capacity()) * 8
    }

    /// Appends the filters and written bits to a persisted index.
    pub fn save(&self, e: &mut Enc) {
        e.u64s(&self.words);
        e.u64s(&self.written);
    }

    /// Reads what [`BucketBlooms::save`] wrote for filters of this geometry, changing nothing
    /// on an error.
    pub fn load(&mut self, d: &mut Dec) -> Result<()> {
        let words = d.u64s("Bloom filters")?;
        let written = d.u64s("written buckets")?;
        if words.len() != self.words.len() || written.len() != self.written.len() {
            return Err(d.bad(format!(
                "{} filter words and {} written words for {} and {}",
                words.len(),
                written.len(),
                self.words.len(),
                self.written.len()
            )));
        }
        self.words = words;
        self.written = written;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut b = BucketBlooms::new(4, 64, 4);
        assert!(!b.may_contain(2, 0), "a bucket not written holds nothing");
        let members: Vec<u64> = (0..10u64).map(|i| i * 7919).collect();
        b.rebuild(2, members.iter().copied());
        assert!(members.iter().all(|&h| b.may_contain(2, h)));
        let fp = (1000..11000u64).filter(|&h| b.may_contain(2, h)).count();
        // 10 keys in 64 bits with 4 hashes: about 8% false positives.
        assert!(fp < 2000, "{fp} false positives in 10000");
        assert!(!b.may_contain(1, members[0]), "other buckets are empty");
        b.rebuild(2, std::iter::empty());
        assert!(!b.may_contain(2, members[0]));
    }
}
