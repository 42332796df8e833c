//! The JSON report of a run: the measured phase's throughput, latency per command, hits and
//! misses (overall and per tenant), errors, and the server's statistics around the phase.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::args::{Config, Mode};
use crate::client::Counts;
use crate::run::{Outcome, ServerStats};

#[derive(Debug, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct TenantReport {
    pub gets: u64,
    pub hits: u64,
    pub misses: u64,
    pub miss_ratio: f64,
    pub sets: u64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub server: String,
    pub threads: usize,
    pub pipeline: usize,
    pub mode: String,
    pub get_ratio: Option<f64>,
    pub keys_per_tenant: u64,
    pub dist: String,
    pub value_size: String,
    pub tenants: Vec<String>,
    pub prefill_sets: u64,
    pub warmup_requests: u64,
    /// Draws of the request stream in the measured phase.
    pub requests: u64,
    /// Gets and sets sent in the measured phase (a look-aside miss makes two).
    pub ops: u64,
    pub wall_s: f64,
    pub ops_per_s: f64,
    pub get: Latency,
    pub set: Latency,
    pub hits: u64,
    pub misses: u64,
    pub miss_ratio: f64,
    pub not_stored: u64,
    pub server_errors: u64,
    pub first_server_error: Option<String>,
    /// Hits whose value was not the one stored for the key (must be 0).
    pub wrong_values: u64,
    pub per_tenant: BTreeMap<String, TenantReport>,
    pub stats_before: ServerStats,
    pub stats_after: ServerStats,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

pub fn build(cfg: &Config, args_dist: &str, args_size: &str, o: Outcome) -> Report {
    let m = &o.measured;
    let per_tenant: BTreeMap<String, TenantReport> = cfg
        .prefixes
        .iter()
        .zip(&m.tenants)
        .map(|(p, t)| {
            let report = TenantReport {
                gets: t.gets,
                hits: t.hits,
                misses: t.gets - t.hits,
                miss_ratio: ratio(t.gets - t.hits, t.gets),
                sets: t.sets,
            };
            (p.clone(), report)
        })
        .collect();
    let gets: u64 = m.tenants.iter().map(|t| t.gets).sum();
    let hits: u64 = m.tenants.iter().map(|t| t.hits).sum();
    let sets: u64 = m.tenants.iter().map(|t| t.sets).sum();
    let wall = m.ended.duration_since(m.started).as_secs_f64();
    let requests_of = |c: &Option<Counts>| c.as_ref().map_or(0, |c| c.requests);
    Report {
        server: cfg.server.to_string(),
        threads: cfg.threads,
        pipeline: cfg.pipeline,
        mode: format!("{:?}", cfg.mode).to_lowercase(),
        get_ratio: (cfg.mode == Mode::Mix).then_some(cfg.get_ratio),
        keys_per_tenant: cfg.keys,
        dist: args_dist.to_string(),
        value_size: args_size.to_string(),
        tenants: cfg.prefixes.clone(),
        prefill_sets: requests_of(&o.prefill),
        warmup_requests: requests_of(&o.warmup),
        requests: m.requests,
        ops: gets + sets,
        wall_s: wall,
        ops_per_s: if wall > 0.0 {
            (gets + sets) as f64 / wall
        } else {
            0.0
        },
        get: Latency::of(&m.get_ns),
        set: Latency::of(&m.set_ns),
        hits,
        misses: gets - hits,
        miss_ratio: ratio(gets - hits, gets),
        not_stored: m.not_stored,
        server_errors: m.errors,
        first_server_error: m.first_error.clone(),
        wrong_values: m.wrong_values,
        per_tenant,
        stats_before: o.before,
        stats_after: o.after,
    }
}
