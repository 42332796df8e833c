//! A `top`-style live view of every tenant: IOPS, bandwidth, p50/p99
//! latency and the sampling rate, from the kernel's maps.
//!
//! Works on any [`MetricsMaps`]: the agent's own (in process) or a running
//! agent's pinned maps (`lachesis-top`, `lachesis-agent top`).

use crate::counters::{Layer, Op, TenantStats};
use crate::error::Result;
use crate::maps::MetricsMaps;
use crate::tenants::{rate_of_threshold, TenantId};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::time::{Duration, Instant};

/// One tenant over one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct TopRow {
    pub tenant: TenantId,
    pub name: String,
    /// Application IOs (syscall + io_uring layers) per second.
    pub read_iops: f64,
    pub write_iops: f64,
    /// Application bytes per second.
    pub read_bps: f64,
    pub write_bps: f64,
    /// Application latency, reads and writes together.
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
    /// Block layer (bios) per second and bio latency p99.
    pub block_iops: f64,
    pub block_p99: Option<Duration>,
    /// Configured SHARDS rate (T / 2^24).
    pub sampling_rate: f64,
    /// Samples per second reaching user space.
    pub samples_per_sec: f64,
}

/// A snapshot of every configured tenant's counters.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub at: Option<Instant>,
    pub tenants: BTreeMap<TenantId, (String, u32, TenantStats)>,
}

pub fn snapshot(maps: &MetricsMaps) -> Result<Snapshot> {
    let mut tenants = BTreeMap::new();
    for (t, cfg) in maps.tenants()? {
        tenants.insert(t, (cfg.name, cfg.threshold, maps.tenant_stats(t)?));
    }
    Ok(Snapshot {
        at: Some(Instant::now()),
        tenants,
    })
}

/// Rows for the interval between two snapshots.
pub fn rows(prev: &Snapshot, cur: &Snapshot) -> Vec<TopRow> {
    let secs = match (prev.at, cur.at) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => 0.0,
    }
    .max(1e-9);
    cur.tenants
        .iter()
        .map(|(&tenant, (name, threshold, now))| {
            let d = prev
                .tenants
                .get(&tenant)
                .map_or(*now, |(_, _, before)| now.since(before));
            let (r, w) = (d.application(Op::Read), d.application(Op::Write));
            let mut lat = r.latency;
            lat.merge(&w.latency);
            let blk = d.layer(Layer::Block);
            TopRow {
                tenant,
                name: name.clone(),
                read_iops: r.ops as f64 / secs,
                write_iops: w.ops as f64 / secs,
                read_bps: r.bytes as f64 / secs,
                write_bps: w.bytes as f64 / secs,
                p50: lat.p50(),
                p99: lat.p99(),
                block_iops: blk.ops as f64 / secs,
                block_p99: blk.latency.p99(),
                sampling_rate: rate_of_threshold(*threshold),
                samples_per_sec: d.sampled as f64 / secs,
            }
        })
        .collect()
}

fn fmt_dur(d: Option<Duration>) -> String {
    match d {
        None => "-".into(),
        Some(d) if d < Duration::from_micros(1) => format!("{}ns", d.as_nanos()),
        Some(d) if d < Duration::from_millis(1) => format!("{:.1}us", d.as_nanos() as f64 / 1e3),
        Some(d) if d < Duration::from_secs(1) => format!("{:.2}ms", d.as_nanos() as f64 / 1e6),
        Some(d) => format!("{:.2}s", d.as_secs_f64()),
    }
}

fn fmt_bw(bps: f64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bps >= MIB {
        format!("{:.1}MiB/s", bps / MIB)
    } else {
        format!("{:.0}KiB/s", bps / 1024.0)
    }
}

/// The table, one line per tenant.
pub fn render(rows: &[TopRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>4} {:<16} {:>9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}",
        "ID",
        "TENANT",
        "R_IOPS",
        "W_IOPS",
        "R_BW",
        "W_BW",
        "P50",
        "P99",
        "BLK_IOPS",
        "BLK_P99",
        "RATE",
        "SAMPLES/s"
    );
    for r in rows {
        let name: String = r.name.chars().take(16).collect();
        let _ = writeln!(
            s,
            "{:>4} {:<16} {:>9.0} {:>9.0} {:>11} {:>11} {:>9} {:>9} {:>9.0} {:>9} {:>7.4}% {:>9.1}",
            r.tenant,
            name,
            r.read_iops,
            r.write_iops,
            fmt_bw(r.read_bps),
            fmt_bw(r.write_bps),
            fmt_dur(r.p50),
            fmt_dur(r.p99),
            r.block_iops,
            fmt_dur(r.block_p99),
            r.sampling_rate * 100.0,
            r.samples_per_sec,
        );
    }
    s
}

/// Print the table every `interval`, `iterations` times (forever if None).
/// `clear` redraws in place with ANSI escapes (for a terminal).
pub fn run(
    maps: &MetricsMaps,
    interval: Duration,
    iterations: Option<u64>,
    clear: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let mut prev = snapshot(maps)?;
    let mut n = 0u64;
    while iterations.is_none_or(|max| n < max) {
        std::thread::sleep(interval);
        let cur = snapshot(maps)?;
        let table = render(&rows(&prev, &cur));
        if clear {
            write!(out, "\x1b[H\x1b[2J")?;
        }
        write!(out, "{table}")?;
        if !clear {
            writeln!(out)?;
        }
        out.flush()?;
        prev = cur;
        n += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_formats_an_idle_tenant() {
        let row = TopRow {
            tenant: 3,
            name: "tenant-with-a-very-long-name".into(),
            read_iops: 0.0,
            write_iops: 0.0,
            read_bps: 0.0,
            write_bps: 0.0,
            p50: None,
            p99: None,
            block_iops: 0.0,
            block_p99: None,
            sampling_rate: 0.01,
            samples_per_sec: 0.0,
        };
        let s = render(&[row]);
        assert!(s.contains("tenant-with-a-ve"));
        assert!(s.contains("1.0000%"));
        assert_eq!(s.lines().count(), 2);
    }

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(fmt_dur(Some(Duration::from_micros(58))), "58.0us");
        assert_eq!(fmt_dur(Some(Duration::from_millis(3))), "3.00ms");
        assert_eq!(fmt_dur(None), "-");
    }
}
