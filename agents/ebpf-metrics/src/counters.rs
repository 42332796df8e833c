//! Per-tenant counters: ops, bytes and latency per layer and direction,
//! summed over CPUs.

use crate::error::{Error, Result};
use crate::histogram::LatencyHistogram;
use crate::layout::{as_bytes, from_bytes, RawTenantStats, NR_LAYERS, NR_OPS};
use crate::maps::MetricsMaps;
use crate::tenants::TenantId;
use libbpf_rs::{MapCore, MapFlags};

/// Where an IO was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// read/write/pread64/pwrite64/readv/writev/preadv(2)/pwritev(2) on
    /// regular files and block devices: entry to exit.
    Syscall,
    /// io_uring read/write requests: submission to completion.
    IoUring,
    /// bios: queue to completion (below the page cache; includes IO
    /// scheduler queueing). Also where SHARDS samples.
    Block,
    /// requests: issue to completion (device service time), charged to the
    /// tenant of the request's first bio.
    Device,
}

impl Layer {
    pub const ALL: [Layer; NR_LAYERS] =
        [Layer::Syscall, Layer::IoUring, Layer::Block, Layer::Device];

    fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Layer::Syscall => "syscall",
            Layer::IoUring => "io_uring",
            Layer::Block => "block",
            Layer::Device => "device",
        }
    }
}

/// Direction of an IO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Write,
}

impl Op {
    pub const ALL: [Op; NR_OPS] = [Op::Read, Op::Write];

    fn index(self) -> usize {
        self as usize
    }
}

impl From<Op> for lachesis_mrc::Op {
    fn from(op: Op) -> Self {
        match op {
            Op::Read => lachesis_mrc::Op::Read,
            Op::Write => lachesis_mrc::Op::Write,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpStats {
    pub ops: u64,
    pub bytes: u64,
    pub latency: LatencyHistogram,
}

impl OpStats {
    fn add(&mut self, o: &OpStats) {
        self.ops = self.ops.saturating_add(o.ops);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.latency.merge(&o.latency);
    }

    fn since(&self, e: &OpStats) -> OpStats {
        OpStats {
            ops: self.ops.saturating_sub(e.ops),
            bytes: self.bytes.saturating_sub(e.bytes),
            latency: self.latency.since(&e.latency),
        }
    }
}

/// A tenant's counters since its slot was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantStats {
    io: [[OpStats; NR_OPS]; NR_LAYERS],
    /// 4 KiB blocks the tenant's bios touched: the SHARDS reference count.
    pub blocks: u64,
    /// Blocks sampled and pushed to the ring buffer.
    pub sampled: u64,
    /// Blocks sampled but lost to a full ring buffer.
    pub sample_drops: u64,
}

impl TenantStats {
    pub fn get(&self, layer: Layer, op: Op) -> &OpStats {
        &self.io[layer.index()][op.index()]
    }

    /// Reads and writes of one layer together.
    pub fn layer(&self, layer: Layer) -> OpStats {
        let mut s = *self.get(layer, Op::Read);
        s.add(self.get(layer, Op::Write));
        s
    }

    /// What the application issued: syscall and io_uring layers together.
    pub fn application(&self, op: Op) -> OpStats {
        let mut s = *self.get(Layer::Syscall, op);
        s.add(self.get(Layer::IoUring, op));
        s
    }

    /// Counters accumulated since `earlier`.
    pub fn since(&self, earlier: &TenantStats) -> TenantStats {
        let mut out = TenantStats {
            blocks: self.blocks.saturating_sub(earlier.blocks),
            sampled: self.sampled.saturating_sub(earlier.sampled),
            sample_drops: self.sample_drops.saturating_sub(earlier.sample_drops),
            ..Default::default()
        };
        for l in 0..NR_LAYERS {
            for o in 0..NR_OPS {
                out.io[l][o] = self.io[l][o].since(&earlier.io[l][o]);
            }
        }
        out
    }

    /// Fraction of referenced blocks that were sampled (sampled + dropped
    /// over blocks); None before any block IO.
    pub fn measured_sampling_rate(&self) -> Option<f64> {
        (self.blocks > 0).then(|| (self.sampled + self.sample_drops) as f64 / self.blocks as f64)
    }

    fn add_raw(&mut self, r: &RawTenantStats) {
        for l in 0..NR_LAYERS {
            for o in 0..NR_OPS {
                let (dst, src) = (&mut self.io[l][o], &r.io[l][o]);
                dst.ops = dst.ops.wrapping_add(src.ops);
                dst.bytes = dst.bytes.wrapping_add(src.bytes);
                for (a, b) in dst.latency.buckets.iter_mut().zip(src.lat_hist) {
                    *a = a.wrapping_add(b);
                }
            }
        }
        self.blocks = self.blocks.wrapping_add(r.blocks);
        self.sampled = self.sampled.wrapping_add(r.sampled);
        self.sample_drops = self.sample_drops.wrapping_add(r.sample_drops);
    }
}

impl MetricsMaps {
    /// A tenant's counters, summed over CPUs.
    pub fn tenant_stats(&self, tenant: TenantId) -> Result<TenantStats> {
        self.check_tenant(tenant)?;
        let per_cpu = self
            .stats
            .lookup_percpu(as_bytes(&tenant), MapFlags::ANY)
            .map_err(|source| Error::Map {
                map: "stats",
                op: "lookup",
                source,
            })?
            .unwrap_or_default();
        let mut out = TenantStats::default();
        for cpu in &per_cpu {
            if let Some(raw) = from_bytes::<RawTenantStats>(cpu) {
                out.add_raw(&raw);
            }
        }
        Ok(out)
    }

    /// Counters of every configured tenant.
    pub fn all_stats(&self) -> Result<Vec<(TenantId, TenantStats)>> {
        self.tenants()?
            .into_iter()
            .map(|(t, _)| Ok((t, self.tenant_stats(t)?)))
            .collect()
    }
}
