//! Kangaroo's two admission policies (§5.1, §5.3).
//!
//! - Pre-flash: an object leaving DRAM enters KLog with probability `p` (Table 3: 0.9), which
//!   scales the whole flash write rate by `p` without DRAM cost.
//! - Threshold: objects move from KLog to KSet only when at least `n` objects (Table 3: 2) in
//!   KLog map to the set, so every set rewrite is amortized over `n` or more objects. A victim
//!   below the threshold is dropped, or readmitted to KLog when it was hit while there.

use lachesis_mrc::hash::SplitMix64;

/// Pre-flash admission with a seeded generator (SplitMix64), so runs are reproducible.
pub struct PreFlash {
    rng: SplitMix64,
    /// Admit when the next 53-bit draw is below this.
    cutoff: u64,
}

impl PreFlash {
    pub fn new(probability: f64, seed: u64) -> PreFlash {
        PreFlash {
            rng: SplitMix64(seed),
            cutoff: (probability.clamp(0.0, 1.0) * (1u64 << 53) as f64) as u64,
        }
    }

    pub fn admit(&mut self) -> bool {
        (self.rng.next_u64() >> 11) < self.cutoff
    }

    /// The generator's position, so a restored cache continues the same sequence.
    pub fn state(&self) -> u64 {
        self.rng.0
    }

    pub fn set_state(&mut self, state: u64) {
        self.rng.0 = state;
    }
}

/// What happens to a group of KLog objects mapping to one set when one of them is flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupFate {
    /// Enough objects: all of them move to KSet in one set write.
    MoveToKSet,
    /// Too few: each flushed victim is dropped or readmitted.
    BelowThreshold,
}

pub fn threshold(group_size: usize, n: u32) -> GroupFate {
    if group_size >= n as usize {
        GroupFate::MoveToKSet
    } else {
        GroupFate::BelowThreshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_flash_admits_about_p() {
        let mut a = PreFlash::new(0.9, 7);
        let n = (0..100_000).filter(|_| a.admit()).count();
        assert!((89_000..91_000).contains(&n), "{n}");
        assert!((0..1000).all(|_| PreFlash::new(1.0, 1).admit()));
        let mut none = PreFlash::new(0.0, 1);
        assert!((0..1000).all(|_| !none.admit()));
    }

    #[test]
    fn threshold_counts_the_group() {
        assert_eq!(threshold(1, 2), GroupFate::BelowThreshold);
        assert_eq!(threshold(2, 2), GroupFate::MoveToKSet);
        assert_eq!(threshold(1, 1), GroupFate::MoveToKSet);
    }
}
