//! `--fill-objects N`: fill the cache with new keys until it holds N objects (or is full), so
//! that DRAM per object is measured at a known object count. The device keeps the data (the
//! engines read pages back to find keys), so a fill of N objects needs about N x object size
//! of memory for the simulated flash.

use std::time::Instant;

use lachesis_cache::workload::{value_for, SizeDist};
use serde::Serialize;

use crate::engines::{self, RunError};
use crate::report::{self, Report};
use crate::{steady, Args, Counts};

/// Sets between two looks at the engine's object count.
const CHECK_EVERY: u64 = 1024;
/// Keys read back after the fill (spread over all keys set): every hit must carry its key.
const READBACK: u64 = 1024;

/// What the fill did; in the report as `fill`.
#[derive(Clone, Debug, Serialize)]
pub struct Fill {
    pub target_objects: u64,
    /// Whether the engine held `target_objects`; false: it stopped growing below it.
    pub reached: bool,
    /// New keys set.
    pub keys_set: u64,
    /// Keys read back after the fill, and how many of them the cache still held.
    pub readback: u64,
    pub readback_hits: u64,
}

/// Whether the object count stopped growing: no 0.1% growth over as many sets as the cache
/// held at its last growth (a whole cache's worth of new keys), and at least 64 Ki sets, so a
/// cache that drops objects while its log fills is not taken for full.
struct Plateau {
    mark: u64,
    mark_at: u64,
}

impl Plateau {
    fn full(&mut self, held: u64, sets: u64) -> bool {
        if held > self.mark + self.mark / 1000 {
            (self.mark, self.mark_at) = (held, sets);
            return false;
        }
        sets - self.mark_at > self.mark.max(1 << 16)
    }
}

pub fn run(args: &Args, sizes: SizeDist) -> Result<Report, RunError> {
    let target = args.fill_objects;
    let mut bench = engines::build(args)?;
    let (device_pages, cache_pages) = bench.pages();
    let s0 = bench.snapshot();
    let mut c = Counts::default();
    let mut plateau = Plateau {
        mark: 0,
        mark_at: 0,
    };
    let start = Instant::now();
    let mut key = 0u64;
    let reached = loop {
        if key.is_multiple_of(CHECK_EVERY) {
            let held = bench.engine.stats().objects;
            if held >= target {
                break true;
            }
            if plateau.full(held, key) {
                break false;
            }
        }
        let v = value_for(key, sizes.size_of(key));
        let t = Instant::now();
        bench.engine.set(&key.to_le_bytes(), &v)?;
        c.set_time += t.elapsed();
        c.sets += 1;
        key += 1;
    };
    // The pages hold real data: a key the cache still finds must come back with its own value.
    let stride = (key / READBACK).max(1);
    let mut readback = 0;
    for k in (0..key).step_by(stride as usize) {
        let kb = k.to_le_bytes();
        let t = Instant::now();
        let got = bench.engine.get(&kb)?;
        c.get_time += t.elapsed();
        c.gets += 1;
        readback += 1;
        match got {
            Some(v) if v.len() >= 8 && v[..8] == kb => {}
            Some(_) => c.wrong += 1,
            None => c.misses += 1,
        }
    }
    let wall = start.elapsed();
    let s1 = bench.snapshot();
    let judgement = steady::judge(
        &s0.point(),
        &s1.point(),
        &s1.point(),
        device_pages,
        cache_pages,
        engines::PAGE_BYTES,
        &steady::Limits::default(),
    );
    let workload = format!(
        "fill: new keys until {target} objects are held, sizes {}",
        args.sizes.as_deref().unwrap_or("meta")
    );
    let total = c.sets + c.gets;
    let mut r = report::build(
        args,
        workload,
        total,
        total,
        &c,
        &Counts::default(),
        &s0,
        &s1,
        wall,
        &bench,
        judgement,
        0,
    );
    r.fill = Some(Fill {
        target_objects: target,
        reached,
        keys_set: key,
        readback,
        readback_hits: readback - c.misses - c.wrong,
    });
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::Plateau;

    #[test]
    fn plateau_needs_a_whole_cache_of_sets_without_growth() {
        let mut p = Plateau {
            mark: 0,
            mark_at: 0,
        };
        assert!(!p.full(100_000, 1_000));
        // 0.05% more is not growth; 100,000 more sets without growth is a full cache.
        assert!(!p.full(100_050, 50_000));
        assert!(!p.full(100_050, 101_000));
        assert!(p.full(100_050, 101_001));
        // Growth moves the mark.
        assert!(!p.full(200_000, 101_002));
        assert_eq!((p.mark, p.mark_at), (200_000, 101_002));
    }
}
