//! The request stream of one client thread: which tenant, which key, get or set, how big the
//! value is. Keys and sizes come from `lachesis_cache::workload` (the Zipf and size
//! distributions lachesis-cachebench replays), so a kvload run and a cachebench run with the
//! same parameters ask for the same objects.

use lachesis_cache::workload::{SizeDist, Zipf};
use lachesis_mrc::hash::mix64;

use crate::args::{Config, Mode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Get,
    Set,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Index into the tenants' prefixes.
    pub tenant: usize,
    /// The key id (a scrambled popularity rank).
    pub key: u64,
    pub size: u32,
    pub kind: Kind,
}

pub struct Stream {
    zipf: Zipf,
    tenants: usize,
    sizes: SizeDist,
    mode: Mode,
    get_ratio: f64,
}

impl Stream {
    /// Thread `thread`'s stream: its own seed, the same key space.
    pub fn new(cfg: &Config, thread: usize) -> Result<Stream, String> {
        let seed = cfg.seed.wrapping_add(thread as u64);
        Ok(Stream {
            zipf: Zipf::new(cfg.keys, cfg.dist.alpha(), seed).map_err(|e| e.to_string())?,
            tenants: cfg.prefixes.len(),
            sizes: cfg.sizes,
            mode: cfg.mode,
            get_ratio: cfg.get_ratio,
        })
    }

    pub fn next_request(&mut self) -> Request {
        let tenant = if self.tenants > 1 {
            ((self.zipf.uniform() * self.tenants as f64) as usize).min(self.tenants - 1)
        } else {
            0
        };
        let key = self.zipf.next_key();
        let kind = match self.mode {
            Mode::Lookaside => Kind::Get,
            Mode::Mix if self.zipf.uniform() < self.get_ratio => Kind::Get,
            Mode::Mix => Kind::Set,
        };
        Request {
            tenant,
            key,
            size: self.sizes.size_of(key),
            kind,
        }
    }

    pub fn size_of(&self, key: u64) -> u32 {
        self.sizes.size_of(key)
    }
}

/// The key ids thread `thread` of `threads` sets in a prefill: every `threads`-th rank, as the
/// Zipf generator maps ranks to ids, so the threads together set each key once.
pub fn prefill_keys(keys: u64, thread: usize, threads: usize) -> impl Iterator<Item = u64> {
    (thread as u64..keys).step_by(threads).map(mix64)
}

/// The key on the wire: the tenant's prefix and the id in hex (fixed width, so every key of a
/// tenant has the same length).
pub fn key_name(prefix: &str, key: u64, out: &mut Vec<u8>) {
    use std::io::Write;
    out.clear();
    out.extend_from_slice(prefix.as_bytes());
    // Infallible: writing into a Vec.
    let _ = write!(out, "{key:016x}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{KeyDist, Phase};
    use std::collections::HashSet;

    fn config(keys: u64, mode: Mode, prefixes: &[&str]) -> Config {
        Config {
            server: "127.0.0.1:1".parse().unwrap(),
            threads: 2,
            pipeline: 1,
            keys,
            dist: KeyDist::Zipf(0.99),
            sizes: SizeDist::Uniform { min: 50, max: 300 },
            mode,
            get_ratio: 0.75,
            prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
            seed: 1,
            prefill: false,
            warmup: Phase::Requests(0),
            measure: Phase::Requests(1),
        }
    }

    #[test]
    fn requests_stay_in_the_key_space_with_sizes_in_range() {
        let cfg = config(1000, Mode::Lookaside, &["a:", "b:", "c:"]);
        let mut s = Stream::new(&cfg, 0).unwrap();
        let space: HashSet<u64> = prefill_keys(1000, 0, 1).collect();
        let mut tenants = [0u32; 3];
        for _ in 0..30_000 {
            let r = s.next_request();
            assert!(space.contains(&r.key));
            assert_eq!(r.kind, Kind::Get, "look-aside draws only gets");
            assert!((50..=300).contains(&r.size));
            assert_eq!(r.size, s.size_of(r.key), "a key always has the same size");
            tenants[r.tenant] += 1;
        }
        // Each tenant gets about a third; far from 0 or all.
        assert!(
            tenants.iter().all(|&n| (8_000..12_000).contains(&n)),
            "{tenants:?}"
        );
    }

    #[test]
    fn mix_follows_the_get_ratio() {
        let cfg = config(1000, Mode::Mix, &[""]);
        let mut s = Stream::new(&cfg, 0).unwrap();
        let gets = (0..40_000)
            .filter(|_| s.next_request().kind == Kind::Get)
            .count();
        assert!((29_000..31_000).contains(&gets), "{gets} of 40000 at 0.75");
    }

    #[test]
    fn threads_draw_different_streams_over_the_same_keys() {
        let cfg = config(100_000, Mode::Lookaside, &[""]);
        let (mut a, mut b) = (Stream::new(&cfg, 0).unwrap(), Stream::new(&cfg, 1).unwrap());
        let xs: Vec<u64> = (0..100).map(|_| a.next_request().key).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_request().key).collect();
        assert_ne!(xs, ys);
        let mut again = Stream::new(&cfg, 0).unwrap();
        assert_eq!(
            xs,
            (0..100)
                .map(|_| again.next_request().key)
                .collect::<Vec<_>>(),
            "seeded"
        );
    }

    #[test]
    fn prefill_covers_every_key_once() {
        let mut all: Vec<u64> = (0..3).flat_map(|t| prefill_keys(1001, t, 3)).collect();
        assert_eq!(all.len(), 1001);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 1001);
        // The ids the Zipf generator draws.
        let cfg = config(1001, Mode::Lookaside, &[""]);
        let mut s = Stream::new(&cfg, 0).unwrap();
        assert!((0..1000).all(|_| all.binary_search(&s.next_request().key).is_ok()));
    }

    #[test]
    fn key_names_carry_the_prefix() {
        let mut k = Vec::new();
        key_name("tenant-a:", 0xab, &mut k);
        assert_eq!(k, b"tenant-a:00000000000000ab");
        key_name("", u64::MAX, &mut k);
        assert_eq!(k, b"ffffffffffffffff");
    }
}
