//! Synthetic key-value workloads for cachebench and the benchmarks: Zipf-popular keys whose
//! object sizes follow the small-object distributions of the Kangaroo and CacheLib papers'
//! Meta and Twitter traces (averages of a few hundred bytes, almost all under 2 KiB).

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::{Error, Result};
use lachesis_mrc::hash::mix64;

/// How big an object is. Sizes are a function of the key, so every set of a key stores the
/// same size, as in the traces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeDist {
    /// Every value this many bytes.
    Fixed(u32),
    /// Log-normal with this median and shape, clamped to `[16, 64 KiB]`.
    LogNormal { median: f64, sigma: f64 },
    /// Uniform in `[min, max]` bytes (memcached benchmarks' "50-300 B values").
    Uniform { min: u32, max: u32 },
    /// A whole cache's mix: `large_share` of the keys get a log-normal size of at least
    /// [`LARGE_MIN`] bytes with this median and shape, the rest [`SizeDist::META`]'s.
    WithLarge {
        large_share: f64,
        median: f64,
        sigma: f64,
    },
}

/// Where FairyWREN (§6.1) and the hybrid engines draw the line between small and large
/// objects: 2 KiB.
pub const LARGE_MIN: u32 = 2048;

impl SizeDist {
    /// Meta (Facebook) small objects: mean about 300 B, 99.5% under 2 KiB.
    pub const META: SizeDist = SizeDist::LogNormal {
        median: 200.0,
        sigma: 0.9,
    };
    /// Twitter (cluster traces): mean about 280 B, 99.4% under 2 KiB.
    pub const TWITTER: SizeDist = SizeDist::LogNormal {
        median: 170.0,
        sigma: 1.0,
    };

    /// A wide mix for hybrid caches: median 1 KiB, about two thirds of objects under 2 KiB
    /// but most bytes in larger ones (both engines of a hybrid get writes).
    pub const WIDE: SizeDist = SizeDist::LogNormal {
        median: 1000.0,
        sigma: 1.5,
    };

    /// Meta's whole-cache trace as FairyWREN §6.1 describes it: objects under 2 KiB are 95.2%
    /// of requests and 60.2% of the bytes requested. Keys are 4.8% large (2 KiB to 64 KiB,
    /// median 3 KiB: mean about 3.9 KiB, which puts 60% of the bytes in small objects with
    /// [`SizeDist::META`]'s mean of about 300 B); the rest are `META`'s.
    pub const META_WHOLE: SizeDist = SizeDist::WithLarge {
        large_share: 0.048,
        median: 3072.0,
        sigma: 0.6,
    };

    /// `meta`, `twitter`, `wide`, `fixed:N` or `uniform:MIN-MAX`.
    pub fn parse(s: &str) -> Result<SizeDist> {
        let bad = || {
            Error::Config(format!(
                "size distribution {s:?}: expected meta, meta-whole, twitter, wide, fixed:N or \
                 uniform:MIN-MAX with 8 <= MIN <= MAX"
            ))
        };
        match s {
            "meta" => Ok(SizeDist::META),
            "twitter" => Ok(SizeDist::TWITTER),
            "wide" => Ok(SizeDist::WIDE),
            "meta-whole" => Ok(SizeDist::META_WHOLE),
            _ if s.starts_with("uniform:") => {
                let (min, max) = s["uniform:".len()..].split_once('-').ok_or_else(bad)?;
                match (min.parse::<u32>(), max.parse::<u32>()) {
                    (Ok(min), Ok(max)) if 8 <= min && min <= max => {
                        Ok(SizeDist::Uniform { min, max })
                    }
                    _ => Err(bad()),
                }
            }
            _ => match s.strip_prefix("fixed:").map(str::parse::<u32>) {
                Some(Ok(n)) if n >= 8 => Ok(SizeDist::Fixed(n)),
                _ => Err(bad()),
            },
        }
    }

    /// The value size of `key`.
    pub fn size_of(&self, key: u64) -> u32 {
        match *self {
            SizeDist::Fixed(n) => n,
            SizeDist::Uniform { min, max } => {
                min + (mix64(key ^ 0x5143_a1e5) % (u64::from(max - min) + 1)) as u32
            }
            SizeDist::LogNormal { median, sigma } => log_normal(key, median, sigma, 16.0),
            SizeDist::WithLarge {
                large_share,
                median,
                sigma,
            } => {
                // Another hash than the sizes' own, so being large says nothing of the size.
                let u = (mix64(key ^ 0x1a76_e000) >> 11) as f64 / (1u64 << 53) as f64;
                if u < large_share {
                    log_normal(key, median, sigma, f64::from(LARGE_MIN))
                } else {
                    SizeDist::META.size_of(key)
                }
            }
        }
    }
}

/// A log-normal size with this median and shape drawn from `key`, clamped to `[min, 64 KiB]`.
fn log_normal(key: u64, median: f64, sigma: f64, min: f64) -> u32 {
    let h = mix64(key ^ 0x5143_a1e5);
    // Box-Muller from two 26-bit uniforms taken from one hash.
    let u1 = ((h >> 38) as f64 + 0.5) / (1u64 << 26) as f64;
    let u2 = (((h >> 12) & ((1 << 26) - 1)) as f64 + 0.5) / (1u64 << 26) as f64;
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (median * (sigma * z).exp()).clamp(min, 65536.0) as u32
}

/// Zipf-distributed keys over `n` objects: rank r has probability ∝ 1 / r^alpha. Ranks are
/// scrambled into key ids so that popularity is not correlated with the id.
pub struct Zipf {
    cdf: Vec<f64>,
    rng: SmallRng,
}

impl Zipf {
    pub fn new(n: u64, alpha: f64, seed: u64) -> Result<Zipf> {
        if n == 0 || n > 1 << 28 || !(alpha.is_finite() && alpha >= 0.0) {
            return Err(Error::Config(format!(
                "zipf over {n} objects with alpha {alpha}: need 1..=2^28 objects and alpha >= 0"
            )));
        }
        let mut cdf = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for r in 1..=n {
            sum += (r as f64).powf(-alpha);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Ok(Zipf {
            cdf,
            rng: SmallRng::seed_from_u64(seed),
        })
    }

    /// The next key id.
    pub fn next_key(&mut self) -> u64 {
        let u: f64 = self.rng.random();
        let rank = self.cdf.partition_point(|&c| c < u) as u64;
        mix64(rank)
    }

    /// A uniform draw in [0, 1) from the same generator (operation mix, admission).
    pub fn uniform(&mut self) -> f64 {
        self.rng.random()
    }
}

/// The value cachebench stores for `key`: the key's bytes first, so a hit can be checked.
pub fn value_for(key: u64, size: u32) -> Vec<u8> {
    let mut v = vec![0u8; size.max(8) as usize];
    v[..8].copy_from_slice(&key.to_le_bytes());
    for (i, b) in v[8..].iter_mut().enumerate() {
        *b = (key as u8).wrapping_add(i as u8);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FairyWREN §6.1's Meta trace: objects under 2 KiB are 95.2% of requests and 60.2% of
    /// the bytes (keys are drawn uniformly here, so objects stand for requests).
    #[test]
    fn meta_whole_has_the_papers_share_of_small_objects() {
        let n = 400_000u64;
        let sizes: Vec<u64> = (0..n)
            .map(|k| u64::from(SizeDist::META_WHOLE.size_of(mix64(k))))
            .collect();
        let small: Vec<u64> = sizes.iter().copied().filter(|&s| s < 2048).collect();
        let by_count = small.len() as f64 / n as f64;
        let by_bytes = small.iter().sum::<u64>() as f64 / sizes.iter().sum::<u64>() as f64;
        assert!((0.94..0.96).contains(&by_count), "{by_count}");
        assert!((0.58..0.62).contains(&by_bytes), "{by_bytes}");
        assert_eq!(SizeDist::parse("meta-whole").unwrap(), SizeDist::META_WHOLE);
    }

    #[test]
    fn size_distributions_match_the_papers() {
        for (dist, lo, hi) in [
            (SizeDist::META, 270.0, 400.0),
            (SizeDist::TWITTER, 250.0, 400.0),
        ] {
            let n = 200_000u64;
            let sizes: Vec<u32> = (0..n).map(|k| dist.size_of(mix64(k))).collect();
            let mean = sizes.iter().map(|&s| f64::from(s)).sum::<f64>() / n as f64;
            let small = sizes.iter().filter(|&&s| s < 2048).count() as f64 / n as f64;
            assert!((lo..hi).contains(&mean), "{dist:?}: mean {mean}");
            assert!(small > 0.95, "{dist:?}: {small} under 2 KiB");
        }
        assert_eq!(SizeDist::parse("fixed:200").unwrap(), SizeDist::Fixed(200));
        assert!(SizeDist::parse("fixed:x").is_err());
        let u = SizeDist::parse("uniform:50-300").unwrap();
        assert_eq!(u, SizeDist::Uniform { min: 50, max: 300 });
        let sizes: Vec<u32> = (0..10_000u64).map(|k| u.size_of(mix64(k))).collect();
        assert!(sizes.iter().all(|s| (50..=300).contains(s)));
        assert!(sizes.contains(&50) && sizes.contains(&300));
        for bad in [
            "uniform:300-50",
            "uniform:4-10",
            "uniform:50",
            "uniform:a-b",
        ] {
            assert!(SizeDist::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zipf_is_skewed() {
        let mut z = Zipf::new(1000, 1.0, 7).unwrap();
        let top = mix64(0);
        let hits = (0..100_000).filter(|_| z.next_key() == top).count();
        // P(rank 1) = 1 / H(1000) ≈ 0.134.
        assert!((12_000..15_000).contains(&hits), "{hits}");
        assert!(Zipf::new(0, 1.0, 1).is_err());
    }
}
