//! `StageConfig::change_to`, the one keep/resize/rebuild decision of every stage reconciler,
//! against a naive model: which fields differ between the live stage's config and the new one.

use lachesis_switch::{
    CacheConfig, CacheEngine, Eviction, LogConfig, RateLimitConfig, StageChange, StageConfig,
    WriteMode,
};
use proptest::prelude::*;

/// A stage from a few small choices, so that two drawn stages often differ in one field only.
fn stage() -> impl Strategy<Value = StageConfig> {
    let cache = (0u8..2, 1u64..4, 0u8..2, 0u8..2, 0u8..2).prop_map(|(e, mib, w, ev, owner)| {
        StageConfig::Cache(CacheConfig {
            name: "s".into(),
            owner: (owner == 1).then(|| "t".into()),
            engine: [CacheEngine::Dram, CacheEngine::Loc][e as usize],
            size_bytes: mib << 20,
            write_mode: [WriteMode::Through, WriteMode::Back][w as usize],
            eviction: [Eviction::Lru, Eviction::Fifo][ev as usize],
            max_dirty_bytes: 1 << 20,
            device: None,
            placement: vec![],
            next: None,
            serves: None,
            exclusive: false,
        })
    });
    let log = (0u8..2, prop::option::of(1u64..3)).prop_map(|(d, reclaim)| {
        let mut l = LogConfig::local("s", None, ["/l/a", "/l/b"][d as usize]);
        l.reclaim_bytes_per_s = reclaim;
        StageConfig::Log(l)
    });
    let qos = prop::option::of(1u64..3).prop_map(|bytes| {
        StageConfig::RateLimit(RateLimitConfig {
            name: "s".into(),
            owner: None,
            iops: None,
            bytes_per_s: bytes,
            min_bytes_per_s: None,
            priority: None,
        })
    });
    prop_oneof![cache, log, qos]
}

/// The decision spelled out field by field.
fn naive(old: &StageConfig, new: &StageConfig) -> StageChange {
    if old == new {
        return StageChange::Keep;
    }
    match (old, new) {
        (StageConfig::Cache(a), StageConfig::Cache(b)) => {
            let only_size = a.engine == b.engine
                && a.write_mode == b.write_mode
                && a.eviction == b.eviction
                && a.owner == b.owner
                && a.max_dirty_bytes == b.max_dirty_bytes;
            if only_size {
                StageChange::Resize {
                    from: a.size_bytes,
                    to: b.size_bytes,
                }
            } else {
                StageChange::Rebuild
            }
        }
        (StageConfig::Log(a), StageConfig::Log(b)) if a.dir == b.dir => {
            StageChange::Reclaim(b.reclaim_bytes_per_s)
        }
        _ => StageChange::Rebuild,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn change_to_is_the_naive_decision(old in stage(), new in stage()) {
        prop_assert_eq!(old.change_to(&new), naive(&old, &new));
    }
}
