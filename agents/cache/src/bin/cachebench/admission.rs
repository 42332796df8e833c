//! Admission by reuse (`--admit-reuse SLOTS`): a missed object is set only if it was missed
//! before, recently enough that its trace is still in a small table of key fingerprints (as
//! CacheLib's reject-first admission policy). One-hit wonders are never written to flash.
//!
//! The table is direct-mapped: a key's hash picks a slot, the slot keeps an 8-bit fingerprint
//! of the last key missed there. A miss whose fingerprint is already in its slot is admitted;
//! otherwise the fingerprint is written there and the object is not set. A slot is not
//! cleared on admission, so a key admitted, evicted and missed again is admitted at once while
//! its trace lasts. Fingerprints collide (another key with the same slot and fingerprint): that
//! admits an object missed once, never refuses one missed twice in a row at its slot.
//! DRAM: one byte per slot (`dram_bytes`), reported by cachebench beside the engine's.

/// The table of fingerprints of recently missed keys.
pub struct ReuseFilter {
    slots: Vec<u8>,
}

fn mix(mut h: u64) -> u64 {
    // splitmix64's finaliser: the workload's keys are dense integers.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl ReuseFilter {
    /// A table of `slots` fingerprints (at least one).
    pub fn new(slots: usize) -> Self {
        ReuseFilter {
            slots: vec![0; slots.max(1)],
        }
    }

    /// A miss of `key`: whether to set it (it was missed before and its trace is still here).
    pub fn admit(&mut self, key: u64) -> bool {
        let h = mix(key);
        let slot = (h % self.slots.len() as u64) as usize;
        // 1..=255: 0 is an empty slot.
        let fp = ((h >> 56) as u8).max(1);
        if self.slots[slot] == fp {
            true
        } else {
            self.slots[slot] = fp;
            false
        }
    }

    pub fn dram_bytes(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_key_is_admitted_on_its_second_miss_not_its_first() {
        let mut f = ReuseFilter::new(1 << 16);
        assert!(!f.admit(7));
        assert!(f.admit(7));
        // The trace stays: admitted again while nothing overwrote its slot.
        assert!(f.admit(7));
        assert!(!f.admit(8));
    }

    proptest! {
        /// Against a naive model keeping each slot's whole key: every miss the model admits
        /// (the same key was the last missed at its slot) the filter admits too; the filter
        /// admits more only by fingerprint collisions, which are rare.
        #[test]
        fn matches_a_table_of_whole_keys(
            slots in 1usize..512,
            keys in proptest::collection::vec(0u64..2000, 1..3000),
        ) {
            let mut f = ReuseFilter::new(slots);
            let mut model: Vec<Option<u64>> = vec![None; slots];
            let mut extra = 0usize;
            for &k in &keys {
                let slot = (mix(k) % slots as u64) as usize;
                let expected = model[slot] == Some(k);
                let got = f.admit(k);
                if expected {
                    prop_assert!(got, "key {} missed twice at its slot was refused", k);
                } else if got {
                    extra += 1;
                }
                model[slot] = Some(k);
            }
            // 8-bit fingerprints: about 1/255 of the model's refusals become admissions.
            prop_assert!(extra * 20 <= keys.len() + 20, "{} collisions in {} misses", extra, keys.len());
        }
    }
}
