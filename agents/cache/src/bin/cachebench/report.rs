//! What cachebench measures, over the requests after the warm-up.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::args::Args;
use crate::engines::{Bench, Snapshot};
use crate::steady::Judgement;
use crate::Counts;

/// One part of the engine over the window.
#[derive(Debug, Serialize)]
pub struct PartWindow {
    pub name: String,
    pub bytes_written: u64,
    pub bytes_per_request: f64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub engine: String,
    pub workload: String,
    pub handles: String,
    /// --wren-span: the cache spans the device's over-provisioning too.
    pub wren_span: bool,
    pub flash_bytes: u64,
    /// Share of the device's logical space the cache occupies.
    pub utilization: f64,
    pub overprovisioning: f64,
    pub requests: u64,
    /// Requests before the window: the warm-up ran until the cache was warm.
    pub warmup_requests: u64,
    pub measured_requests: u64,
    /// Whether the window was at steady state (see `steady`); false only with
    /// --allow-transient, otherwise no report is printed.
    pub steady_state: bool,
    pub steady: Judgement,
    /// Host bytes each part of the engine wrote in the window.
    pub parts: Vec<PartWindow>,
    /// The engine's own counters over the window (set writes by cause, objects moved...).
    pub counters: std::collections::BTreeMap<String, u64>,
    /// The engine's sizes (FairyWREN: sets, reserved and spare FwSets pages...).
    pub layout: std::collections::BTreeMap<String, u64>,
    pub gets: u64,
    pub misses: u64,
    pub miss_ratio: f64,
    pub sets: u64,
    pub deletes: u64,
    /// Engine flash bytes / application bytes set.
    pub alwa: f64,
    /// Device media bytes / host bytes (relocation by garbage collection).
    pub dlwa: f64,
    /// Host bytes the engine wrote to the device per request.
    pub device_bytes_per_request: f64,
    /// Host bytes written per second of wall time.
    pub device_write_mb_s: f64,
    /// Media bytes written per request (what the flash endures).
    pub media_bytes_per_request: f64,
    pub dram_bytes: usize,
    pub objects: u64,
    pub dram_bits_per_object: f64,
    /// --admit-reuse: the driver's table of fingerprints (not in dram_bytes).
    pub admission_dram_bytes: usize,
    pub ops_per_s: f64,
    /// Gets (sets) per second of time spent inside get (set): one core each.
    pub gets_per_s: f64,
    pub sets_per_s: f64,
    pub wall_s: f64,
    pub corrupt_reads: u64,
    /// Hits whose value did not start with the key (must be 0).
    pub wrong_values: u64,
    /// --fill-objects: what the fill did (absent for a workload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<crate::fill::Fill>,
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

#[allow(clippy::too_many_arguments)]
pub fn build(
    args: &Args,
    workload: String,
    requests: u64,
    measured: u64,
    c: &Counts,
    c0: &Counts,
    s0: &Snapshot,
    s1: &Snapshot,
    wall: Duration,
    bench: &Bench,
    steady: Judgement,
    admission_dram_bytes: usize,
) -> Report {
    let gets = c.gets - c0.gets;
    let misses = c.misses - c0.misses;
    let app = (s1.stats.app_bytes_written - s0.stats.app_bytes_written) as f64;
    let flash = (s1.stats.flash_bytes_written - s0.stats.flash_bytes_written) as f64;
    let host = (s1.fdp.host_bytes_written - s0.fdp.host_bytes_written) as f64;
    let media = (s1.fdp.media_bytes_written - s0.fdp.media_bytes_written) as f64;
    let dram = bench.engine.dram_bytes();
    let objects = s1.stats.objects;
    let get_t = (c.get_time - c0.get_time).as_secs_f64();
    let set_t = (c.set_time - c0.set_time).as_secs_f64();
    let parts = s1
        .parts
        .iter()
        .map(|p| {
            let before = s0
                .parts
                .iter()
                .find(|q| q.name == p.name)
                .map_or(0, |q| q.bytes_written);
            let bytes = p.bytes_written.saturating_sub(before);
            PartWindow {
                name: p.name.clone(),
                bytes_written: bytes,
                bytes_per_request: ratio(bytes as f64, measured as f64),
            }
        })
        .collect();
    let counters = s1
        .counters
        .iter()
        .map(|(k, v)| {
            let before = s0.counters.iter().find(|(q, _)| q == k).map_or(0, |c| c.1);
            (k.clone(), v.saturating_sub(before))
        })
        .collect();
    Report {
        layout: bench.engine.layout().into_iter().collect(),
        engine: format!("{:?}", args.engine).to_lowercase(),
        workload,
        handles: format!("{:?}", args.handles).to_lowercase(),
        wren_span: args.wren_span,
        flash_bytes: bench.flash_bytes,
        utilization: bench.flash_bytes as f64 / bench.device_bytes as f64,
        overprovisioning: args.op,
        requests,
        warmup_requests: requests - measured,
        measured_requests: measured,
        steady_state: steady.steady(),
        steady,
        parts,
        counters,
        gets,
        misses,
        miss_ratio: ratio(misses as f64, gets as f64),
        sets: c.sets - c0.sets,
        deletes: c.deletes - c0.deletes,
        alwa: ratio(flash, app),
        dlwa: ratio(media, host),
        device_bytes_per_request: ratio(host, measured as f64),
        device_write_mb_s: ratio(host / 1e6, wall.as_secs_f64()),
        media_bytes_per_request: ratio(media, measured as f64),
        dram_bytes: dram,
        objects,
        dram_bits_per_object: ratio(dram as f64 * 8.0, objects as f64),
        admission_dram_bytes,
        ops_per_s: ratio(measured as f64, wall.as_secs_f64()),
        gets_per_s: ratio(gets as f64, get_t),
        sets_per_s: ratio((c.sets - c0.sets) as f64, set_t),
        wall_s: wall.as_secs_f64(),
        corrupt_reads: s1.stats.corrupt_reads,
        wrong_values: c.wrong,
        fill: None,
    }
}

/// Why no figure is printed: the failed conditions and the counts they rest on.
pub fn refusal(r: &Report) -> String {
    let mut out = format!(
        "lachesis-cachebench: not at steady state, no figure printed ({} requests, {} of them warm-up); run more requests (or a larger footprint):",
        r.requests, r.warmup_requests
    );
    for f in &r.steady.failures {
        out.push_str(&format!("\n  - {f}"));
    }
    out.push_str(&format!("\n{}", steady_lines(r)));
    out
}

fn steady_lines(r: &Report) -> String {
    let j = &r.steady;
    let logs: Vec<String> = j
        .logs
        .iter()
        .map(|l| {
            format!(
                "{} {:.2} wraps ({} units reclaimed)",
                l.name, l.wraps, l.evictions
            )
        })
        .collect();
    format!(
        "steady state    {}: {:.1}% of the device written before the window, {:.2} device writes in it, DLWA {:.3} | {:.3} by halves{}{}",
        if r.steady_state { "yes" } else { "NO (figures below are not steady-state)" },
        j.written_fraction * 100.0,
        j.device_writes,
        j.dlwa_first_half,
        j.dlwa_second_half,
        if logs.is_empty() { "" } else { "; " },
        logs.join(", ")
    )
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "engine          {} ({} handles)",
            self.engine, self.handles
        )?;
        writeln!(f, "workload        {}", self.workload)?;
        writeln!(
            f,
            "flash           {:.1} MiB, {:.0}% of the device, {:.0}% OP",
            self.flash_bytes as f64 / 1048576.0,
            self.utilization * 100.0,
            self.overprovisioning * 100.0
        )?;
        writeln!(
            f,
            "requests        {} ({} measured)",
            self.requests, self.measured_requests
        )?;
        writeln!(f, "{}", steady_lines(self))?;
        let parts: Vec<String> = self
            .parts
            .iter()
            .map(|p| format!("{} {:.0}", p.name, p.bytes_per_request))
            .collect();
        writeln!(f, "parts           {} B/request", parts.join(", "))?;
        writeln!(f, "miss ratio      {:.4}", self.miss_ratio)?;
        writeln!(f, "ALWA            {:.3}", self.alwa)?;
        writeln!(f, "DLWA            {:.3}", self.dlwa)?;
        writeln!(
            f,
            "device writes   {:.0} B/request, {:.1} MB/s",
            self.device_bytes_per_request, self.device_write_mb_s
        )?;
        writeln!(
            f,
            "DRAM            {:.2} MiB, {} objects, {:.1} bits/object",
            self.dram_bytes as f64 / 1048576.0,
            self.objects,
            self.dram_bits_per_object
        )?;
        if let Some(fill) = &self.fill {
            writeln!(
                f,
                "fill            {} keys set, target {} objects {}; {} of {} keys read back held",
                fill.keys_set,
                fill.target_objects,
                if fill.reached {
                    "reached"
                } else {
                    "NOT reached (the cache is full below it)"
                },
                fill.readback_hits,
                fill.readback
            )?;
        }
        writeln!(
            f,
            "throughput      {:.0} ops/s; {:.0} gets/s, {:.0} sets/s per core",
            self.ops_per_s, self.gets_per_s, self.sets_per_s
        )?;
        writeln!(
            f,
            "integrity       {} corrupt reads, {} wrong values",
            self.corrupt_reads, self.wrong_values
        )
    }
}
