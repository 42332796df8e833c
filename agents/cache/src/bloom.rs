//! One small Bloom filter per bucket, rebuilt whenever its bucket is rewritten (so deletions
//! need no counting filter), stored contiguously as the DRAM it really costs.

/// Bloom filters for `n` buckets of `bits` bits each.
pub struct BucketBlooms {
    words: Vec<u64>,
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
        let words_per = (bits as usize).div_ceil(64).max(1);
        BucketBlooms {
            words: vec![0; n * words_per],
            words_per,
            bits: u64::from(bits.max(1)),
            hashes: hashes.max(1),
        }
    }

    #[inline]
    fn positions(&self, h: u64) -> impl Iterator<Item = u64> + '_ {
        let m = mix(h);
        let (a, b) = (m & 0xffff_ffff, (m >> 32) | 1);
        (0..u64::from(self.hashes)).map(move |i| a.wrapping_add(i.wrapping_mul(b)) % self.bits)
    }

    pub fn may_contain(&self, bucket: usize, h: u64) -> bool {
        let base = bucket * self.words_per;
        self.positions(h)
            .all(|p| self.words[base + (p / 64) as usize] & (1 << (p % 64)) != 0)
    }

    /// Replaces bucket's filter with one holding exactly `hashes`.
    pub fn rebuild(&mut self, bucket: usize, hashes: impl Iterator<Item = u64>) {
        let base = bucket * self.words_per;
        self.words[base..base + self.words_per].fill(0);
        for h in hashes {
            let ps: Vec<u64> = self.positions(h).collect();
            for p in ps {
                self.words[base + (p / 64) as usize] |= 1 << (p % 64);
            }
        }
    }

    /// DRAM the filters take.
    pub fn bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut b = BucketBlooms::new(4, 64, 4);
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
