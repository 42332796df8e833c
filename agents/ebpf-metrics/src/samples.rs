//! SHARDS samples from the kernel, and per-tenant miss-ratio curves.
//!
//! The kernel pushes one [`Sample`] per sampled 4 KiB block to a ring
//! buffer. [`SampleReader`] drains it into any [`SampleSink`];
//! [`ShardsSinks`] is the sink the agent uses: one `lachesis-mrc` SHARDS
//! estimator per tenant, fed the keys the kernel sampled, told how many
//! references were not sampled (from the block counters), and, for
//! fixed-size SHARDS, lowering the kernel's threshold as its sample fills.

use crate::counters::{Op, TenantStats};
use crate::error::{Error, Result};
use crate::layout::{from_bytes, RawSample};
use crate::loader::EbpfMetrics;
use crate::maps::MetricsMaps;
use crate::tenants::{threshold_for_rate, TenantId, SHARDS_P};
use lachesis_mrc::{Curve, MrcEstimator, ShardsFixedRate, ShardsFixedSize, Unit};
use libbpf_rs::{RingBuffer, RingBufferBuilder};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes in one sampled block.
pub const BLOCK_BYTES: u32 = 4096;

/// One sampled 4 KiB block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub tenant: TenantId,
    /// Whole-disk device, kernel encoding (`major << 20 | minor`).
    pub dev: u32,
    /// 4 KiB block number on that disk.
    pub block: u64,
    pub op: Op,
    /// Length of the bio the block was part of.
    pub io_bytes: u32,
    /// `hash(key) mod 2^24`, the value compared with the threshold.
    pub hash: u32,
    /// `CLOCK_MONOTONIC` ns at bio queue.
    pub time_ns: u64,
}

impl Sample {
    /// The SHARDS key: the same 64-bit value the kernel hashed, so
    /// `lachesis_mrc::hash::sample_value(s.key(), 0) == s.hash`.
    pub fn key(&self) -> u64 {
        shards_key(self.dev, self.block)
    }

    fn from_raw(r: &RawSample) -> Sample {
        Sample {
            tenant: r.tenant,
            dev: r.dev,
            block: r.block,
            op: if r.op == 1 { Op::Write } else { Op::Read },
            io_bytes: r.io_bytes,
            hash: r.hash,
            time_ns: r.time_ns,
        }
    }
}

/// `shards_key()` of lachesis.bpf.c: the block, with the device rotated
/// into the high bits so every bit of it survives.
pub fn shards_key(dev: u32, block: u64) -> u64 {
    block ^ (dev as u64).rotate_left(40)
}

/// `(major, minor)` of a kernel-encoded dev_t.
pub fn dev_major_minor(dev: u32) -> (u32, u32) {
    (dev >> 20, dev & 0xfffff)
}

/// Where samples go.
pub trait SampleSink {
    fn sample(&mut self, s: &Sample);
}

impl<F: FnMut(&Sample)> SampleSink for F {
    fn sample(&mut self, s: &Sample) {
        self(s)
    }
}

/// Reads the sample ring buffer. One per engine; `Send`, so it can live on
/// the agent's telemetry thread.
pub struct SampleReader {
    rb: RingBuffer<'static>,
    buf: Arc<Mutex<Vec<Sample>>>,
}

impl std::fmt::Debug for SampleReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleReader").finish_non_exhaustive()
    }
}

impl SampleReader {
    pub fn new(metrics: &EbpfMetrics) -> Result<Self> {
        let buf: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let sink = Arc::clone(&buf);
        let mut b = RingBufferBuilder::new();
        b.add(metrics.samples_map(), move |data: &[u8]| {
            if let Some(raw) = from_bytes::<RawSample>(data) {
                if let Ok(mut v) = sink.lock() {
                    v.push(Sample::from_raw(&raw));
                }
            }
            0
        })
        .map_err(Error::RingBuffer)?;
        Ok(SampleReader {
            rb: b.build().map_err(Error::RingBuffer)?,
            buf,
        })
    }

    /// Wait up to `timeout` for samples, then hand everything available to
    /// `sink`. Returns how many samples were delivered. The programs wake
    /// the reader only once a quarter of the ring buffer is filled, so a
    /// poll usually sleeps its whole `timeout` and then drains: poll at
    /// least every few seconds.
    pub fn poll(&mut self, timeout: Duration, sink: &mut dyn SampleSink) -> Result<usize> {
        self.rb.poll(timeout).map_err(Error::RingBuffer)?;
        self.rb.consume().map_err(Error::RingBuffer)?;
        Ok(self.deliver(sink))
    }

    /// Hand everything already in the ring buffer to `sink`, without waiting.
    pub fn drain(&mut self, sink: &mut dyn SampleSink) -> Result<usize> {
        self.rb.consume().map_err(Error::RingBuffer)?;
        Ok(self.deliver(sink))
    }

    fn deliver(&mut self, sink: &mut dyn SampleSink) -> usize {
        let batch = match self.buf.lock() {
            Ok(mut v) => std::mem::take(&mut *v),
            Err(_) => return 0,
        };
        for s in &batch {
            sink.sample(s);
        }
        batch.len()
    }
}

/// How a tenant's SHARDS sample is sized.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sizing {
    /// Fixed rate `R` in (0, 1]; the kernel threshold stays `R * 2^24`.
    /// Uses SHARDS_adj (the kernel's block counter gives the exact
    /// reference count it needs).
    FixedRate(f64),
    /// At most `S_max` sampled keys: the kernel starts at rate 1 and the
    /// threshold is lowered to the estimator's as the sample fills.
    FixedSize(usize),
}

enum Estimator {
    Rate(ShardsFixedRate),
    Size(ShardsFixedSize),
}

struct TenantMrc {
    est: Estimator,
    /// Counter values already accounted for.
    seen: TenantStats,
    samples: u64,
}

/// One SHARDS estimator per tenant, fed by [`SampleReader`].
///
/// Typical loop (agent telemetry thread): `reader.poll(1s, &mut sinks)`,
/// then `sinks.sync(&metrics)`, then publish `sinks.curve(t)`.
#[derive(Default)]
pub struct ShardsSinks {
    tenants: BTreeMap<TenantId, TenantMrc>,
    /// Samples for tenants without an estimator.
    pub unclaimed: u64,
}

impl std::fmt::Debug for ShardsSinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardsSinks")
            .field("tenants", &self.tenants.keys().collect::<Vec<_>>())
            .field("unclaimed", &self.unclaimed)
            .finish()
    }
}

impl ShardsSinks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Start an estimator for `tenant` with cache sizes `sizes` (in 4 KiB
    /// blocks) and set the kernel threshold to match.
    pub fn add_tenant(
        &mut self,
        maps: &MetricsMaps,
        tenant: TenantId,
        sizing: Sizing,
        sizes: Vec<u64>,
    ) -> Result<()> {
        let (est, threshold) = match sizing {
            Sizing::FixedRate(rate) => {
                let e = ShardsFixedRate::new(Unit::Objects, sizes, rate, true)?;
                let t = threshold_for_rate(e.rate());
                (Estimator::Rate(e), t)
            }
            Sizing::FixedSize(smax) => (
                Estimator::Size(ShardsFixedSize::new(Unit::Objects, sizes, smax, false)?),
                SHARDS_P,
            ),
        };
        maps.set_threshold(tenant, threshold)?;
        let seen = maps.tenant_stats(tenant)?;
        self.tenants.insert(
            tenant,
            TenantMrc {
                est,
                seen,
                samples: 0,
            },
        );
        Ok(())
    }

    pub fn remove_tenant(&mut self, tenant: TenantId) {
        self.tenants.remove(&tenant);
    }

    /// Account for references that were not sampled (from the kernel's
    /// block counters) and, for fixed-size tenants, lower the kernel's
    /// threshold to the estimator's. Call after each poll.
    pub fn sync(&mut self, maps: &MetricsMaps) -> Result<()> {
        for (&tenant, m) in self.tenants.iter_mut() {
            let now = maps.tenant_stats(tenant)?;
            let d = now.since(&m.seen);
            m.seen = now;
            match &mut m.est {
                Estimator::Rate(e) => {
                    // Dropped samples count as unsampled references: the
                    // reference happened, its key is unknown.
                    e.add_unsampled(d.blocks.saturating_sub(d.sampled));
                }
                Estimator::Size(e) => {
                    let t = (e.rate() * SHARDS_P as f64).round() as u32;
                    maps.lower_threshold(tenant, t)?;
                }
            }
        }
        Ok(())
    }

    /// The tenant's miss-ratio curve (cache sizes in 4 KiB blocks).
    pub fn curve(&self, tenant: TenantId) -> Option<Curve> {
        self.tenants.get(&tenant).map(|m| match &m.est {
            Estimator::Rate(e) => e.curve(),
            Estimator::Size(e) => e.curve(),
        })
    }

    /// The tenant's current sampling rate.
    pub fn rate(&self, tenant: TenantId) -> Option<f64> {
        self.tenants.get(&tenant).map(|m| match &m.est {
            Estimator::Rate(e) => e.rate(),
            Estimator::Size(e) => e.rate(),
        })
    }

    /// Samples delivered for the tenant so far.
    pub fn samples(&self, tenant: TenantId) -> u64 {
        self.tenants.get(&tenant).map_or(0, |m| m.samples)
    }
}

impl SampleSink for ShardsSinks {
    fn sample(&mut self, s: &Sample) {
        let Some(m) = self.tenants.get_mut(&s.tenant) else {
            self.unclaimed += 1;
            return;
        };
        m.samples += 1;
        match &mut m.est {
            Estimator::Rate(e) => e.record_sampled(s.key(), BLOCK_BYTES),
            // Re-checks the hash against its own (possibly lower)
            // threshold: samples queued before the kernel saw the lower
            // threshold are filtered here.
            Estimator::Size(e) => e.record(s.key(), BLOCK_BYTES, s.op.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_keeps_every_device_bit() {
        let a = shards_key(0xffff_ffff, 0);
        let b = shards_key(0x7fff_ffff, 0);
        assert_ne!(a, b);
        assert_eq!(shards_key(0, 42), 42);
    }

    #[test]
    fn major_minor() {
        assert_eq!(dev_major_minor((254 << 20) | 3), (254, 3));
    }
}
