//! Synthetic write streams for measuring DLWA on the simulated SSD: uniform random overwrites
//! (a set-associative cache's buckets) and a FIFO log (a log-structured cache's regions),
//! mixed by share of host writes. Tests and the benchmarks use the same code.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::device::{Error, PlacementHandle, Result};

use super::SimSsd;

/// A contiguous range of logical pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub pages: u64,
}

/// One write stream.
#[derive(Clone, Debug)]
pub enum Stream {
    /// Uniformly random single-page overwrites within `region`.
    Random {
        region: Region,
        handle: PlacementHandle,
    },
    /// Sequential writes through `region`, wrapping around (a FIFO log). With
    /// `trim_pages = Some(n)` the log deallocates each n-page segment just before rewriting
    /// it, as a log-structured cache does when it evicts a region.
    Log {
        region: Region,
        handle: PlacementHandle,
        trim_pages: Option<u64>,
        cursor: u64,
    },
}

impl Stream {
    fn region(&self) -> Region {
        match self {
            Stream::Random { region, .. } | Stream::Log { region, .. } => *region,
        }
    }

    fn handle(&self) -> PlacementHandle {
        match self {
            Stream::Random { handle, .. } | Stream::Log { handle, .. } => *handle,
        }
    }
}

/// Streams chosen at random per page write, each with its share of host writes.
pub struct Mix {
    streams: Vec<Stream>,
    /// Cumulative share thresholds, scaled to u64 for a cheap comparison per write.
    thresholds: Vec<u64>,
    rng: SmallRng,
}

impl Mix {
    /// `streams` with their shares of host writes (must sum to 1).
    pub fn new(streams: Vec<(f64, Stream)>, seed: u64) -> Result<Mix> {
        let total: f64 = streams.iter().map(|(s, _)| *s).sum();
        if streams.is_empty()
            || (total - 1.0).abs() > 1e-9
            || streams.iter().any(|(s, _)| s.is_nan() || *s < 0.0)
        {
            return Err(Error::Config(format!(
                "stream shares must be >= 0 and sum to 1 (got {total})"
            )));
        }
        for (_, s) in &streams {
            if s.region().pages == 0 {
                return Err(Error::Config("a stream's region is empty".into()));
            }
            if let Stream::Log {
                region,
                trim_pages: Some(t),
                ..
            } = s
            {
                if *t == 0 || region.pages % t != 0 {
                    return Err(Error::Config(format!(
                        "log of {} pages is not a whole number of {t}-page segments",
                        region.pages
                    )));
                }
            }
        }
        let mut acc = 0.0;
        let thresholds = streams
            .iter()
            .map(|(share, _)| {
                acc += share;
                (acc.min(1.0) * u64::MAX as f64) as u64
            })
            .collect::<Vec<_>>();
        let streams = streams.into_iter().map(|(_, s)| s).collect();
        Ok(Mix {
            streams,
            thresholds,
            rng: SmallRng::seed_from_u64(seed),
        })
    }

    /// Writes one page from one stream.
    #[inline]
    pub fn step(&mut self, ssd: &mut SimSsd) -> Result<()> {
        let idx = if self.streams.len() == 1 {
            0
        } else {
            let x: u64 = self.rng.random();
            self.thresholds
                .iter()
                .position(|&t| x <= t)
                .unwrap_or(self.streams.len() - 1)
        };
        match &mut self.streams[idx] {
            Stream::Random { region, handle } => {
                let lpn = region.start + self.rng.random_range(0..region.pages);
                ssd.write_page(lpn, *handle)
            }
            Stream::Log {
                region,
                handle,
                trim_pages,
                cursor,
            } => {
                if let Some(t) = *trim_pages {
                    if *cursor % t == 0 {
                        ssd.deallocate_pages(region.start + *cursor, t)?;
                    }
                }
                let lpn = region.start + *cursor;
                *cursor = (*cursor + 1) % region.pages;
                ssd.write_page(lpn, *handle)
            }
        }
    }

    /// Writes `pages` pages, calling `progress(done)` every 2^20 pages.
    pub fn run(
        &mut self,
        ssd: &mut SimSsd,
        pages: u64,
        mut progress: impl FnMut(u64),
    ) -> Result<()> {
        const CHUNK: u64 = 1 << 20;
        let mut done = 0;
        while done < pages {
            let n = CHUNK.min(pages - done);
            for _ in 0..n {
                self.step(ssd)?;
            }
            done += n;
            progress(done);
        }
        Ok(())
    }

    /// Writes every page of every stream's region once, in order, with its handle: the
    /// "fill the device" phase before steady state.
    pub fn fill(&self, ssd: &mut SimSsd) -> Result<()> {
        for s in &self.streams {
            let r = s.region();
            ssd.write_pages(r.start, r.pages, s.handle())?;
        }
        Ok(())
    }
}

/// How the two-stream experiment places its streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segregation {
    /// Both streams through the default handle (a conventional SSD).
    OneHandle,
    /// The random stream and the log on different handles.
    TwoHandles,
    /// Different handles, and the log deallocates each reclaim-unit-sized segment as it wraps.
    TwoHandlesLogTrim,
}

/// The FDP paper's small-object/large-object cache mix: a random-rewrite stream over a small
/// region next to a FIFO log over the rest, at 100% utilisation.
#[derive(Clone, Copy, Debug)]
pub struct TwoStreams {
    /// Share of the logical space the random stream owns (the paper's SOC size, 0.04).
    pub random_space: f64,
    /// Share of host writes the random stream issues.
    pub random_writes: f64,
    pub segregation: Segregation,
}

impl TwoStreams {
    /// Splits `ssd`'s logical space and builds the mix. The log is a whole number of reclaim
    /// units so its trims free whole units; the random region takes the remainder.
    pub fn mix(&self, ssd: &SimSsd, seed: u64) -> Result<Mix> {
        let space_ok = self.random_space > 0.0 && self.random_space < 1.0;
        if !space_ok || !(0.0..=1.0).contains(&self.random_writes) {
            return Err(Error::Config(
                "random_space must be in (0, 1) and random_writes in [0, 1]".into(),
            ));
        }
        let total = ssd.logical_pages();
        let ppr = u64::from(ssd.pages_per_ru());
        let log_pages = ((total as f64 * (1.0 - self.random_space)) as u64) / ppr * ppr;
        if log_pages == 0 || log_pages >= total {
            return Err(Error::Config("device too small for this split".into()));
        }
        let random = Region {
            start: 0,
            pages: total - log_pages,
        };
        let log = Region {
            start: random.pages,
            pages: log_pages,
        };
        let (rh, lh) = match self.segregation {
            Segregation::OneHandle => (PlacementHandle(0), PlacementHandle(0)),
            _ => (PlacementHandle(0), PlacementHandle(1)),
        };
        let trim = (self.segregation == Segregation::TwoHandlesLogTrim).then_some(ppr);
        Mix::new(
            vec![
                (
                    self.random_writes,
                    Stream::Random {
                        region: random,
                        handle: rh,
                    },
                ),
                (
                    1.0 - self.random_writes,
                    Stream::Log {
                        region: log,
                        handle: lh,
                        trim_pages: trim,
                        cursor: 0,
                    },
                ),
            ],
            seed,
        )
    }
}

/// DLWA measured over a steady-state window.
#[derive(Clone, Copy, Debug)]
pub struct Measurement {
    pub dlwa: f64,
    pub host_pages: u64,
    pub media_pages: u64,
}

/// Fills the device through `mix`, writes `warmup` pages, then measures DLWA over `measure`
/// more pages. `progress(done)` counts pages written after the fill.
pub fn measure(
    ssd: &mut SimSsd,
    mix: &mut Mix,
    warmup: u64,
    measure: u64,
    mut progress: impl FnMut(u64),
) -> Result<Measurement> {
    mix.fill(ssd)?;
    mix.run(ssd, warmup, &mut progress)?;
    let before = ssd.stats();
    mix.run(ssd, measure, |d| progress(warmup + d))?;
    let after = ssd.stats();
    let host = after.host_pages_written - before.host_pages_written;
    let media = after.media_pages_written() - before.media_pages_written();
    Ok(Measurement {
        dlwa: media as f64 / host.max(1) as f64,
        host_pages: host,
        media_pages: media,
    })
}
