//! The agent's Prometheus metrics in the OpenMetrics text format (`prometheus-client`), every
//! name prefixed `lachesis_` and labelled with the agent's `host`.
//!
//! IO, cache and device numbers are those of the last telemetry report
//! ([`crate::telemetry::LatestReport`]): one source for the bus and for Prometheus, so a scrape
//! and the controller's telemetry agree. The bus-lag numbers are read at the scrape
//! ([`BusLag`], filled in by `src/metrics_http.rs`). The README's "Metrics" lists them all.

use std::borrow::Cow;
use std::sync::Arc;

use lachesis_device::dlwa::measured_dlwa;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::telemetry::{StageKindReport, StageTelemetry, Telemetry, TenantCache, TenantTelemetry};

/// Where the agent stands on the bus at the scrape. None: not known (never read, or Redis did
/// not answer the probe).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BusLag {
    /// Seconds since the control loop last read desired state.
    pub since_last_read_s: Option<f64>,
    /// Inbox entries after the last one the agent read.
    pub inbox_backlog: Option<u64>,
    /// Generation in the desired key.
    pub desired_generation: Option<u64>,
    /// Generation the agent runs.
    pub applied_generation: u64,
    /// Whether Redis answered the scrape's probe.
    pub redis_up: bool,
}

/// The text of one scrape.
pub fn render(host_id: &str, report: Option<(u64, Arc<Telemetry>)>, bus: BusLag) -> String {
    let mut registry = Registry::with_prefix_and_labels(
        "lachesis",
        [(Cow::Borrowed("host"), Cow::Owned(host_id.to_string()))].into_iter(),
    );
    registry.register_collector(Box::new(Scrape { report, bus }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String does not fail");
    out
}

/// The Content-Type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug)]
struct Scrape {
    report: Option<(u64, Arc<Telemetry>)>,
    bus: BusLag,
}

type Labels = Vec<(&'static str, String)>;

/// A sample's value: counters are u64 at the source and stay exact.
#[derive(Debug, Clone, Copy)]
enum V {
    Count(u64),
    Level(f64),
}

/// One family: its samples under one descriptor; a family without samples is left out.
fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    samples: Vec<(Labels, V)>,
) -> std::fmt::Result {
    let Some((_, first)) = samples.first() else {
        return Ok(());
    };
    let kind = match first {
        V::Count(_) => MetricType::Counter,
        V::Level(_) => MetricType::Gauge,
    };
    let mut m = enc.encode_descriptor(name, help, unit.as_ref(), kind)?;
    for (labels, v) in &samples {
        let e = m.encode_family(labels)?;
        match *v {
            V::Count(n) => ConstCounter::new(n).encode(e)?,
            V::Level(x) => ConstGauge::new(x).encode(e)?,
        }
    }
    Ok(())
}

fn op(tenant: &str, op: &str) -> Labels {
    vec![("tenant", tenant.to_string()), ("op", op.to_string())]
}

fn one(v: Option<V>) -> Vec<(Labels, V)> {
    v.map(|v| (vec![], v)).into_iter().collect()
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let e = &mut enc;
        if let Some((n, t)) = &self.report {
            family(
                e,
                "telemetry_reports",
                "Telemetry reports the agent built (the values below are the last one's)",
                None,
                one(Some(V::Count(*n))),
            )?;
            let at = t.sent_at.to_datetime().unix_timestamp_nanos() as f64 / 1e9;
            family(
                e,
                "telemetry_report_timestamp",
                "When the last telemetry report was built (Unix time)",
                Some(Unit::Seconds),
                one(Some(V::Level(at))),
            )?;
            tenants(e, t)?;
            stages(e, t)?;
            devices(e, t)?;
        }
        let b = &self.bus;
        family(
            e,
            "bus_up",
            "1 if Redis answered this scrape's bus probe",
            None,
            one(Some(V::Level(if b.redis_up { 1.0 } else { 0.0 }))),
        )?;
        family(
            e,
            "bus_desired_read_age",
            "Seconds since the agent last read desired state (desired key or inbox)",
            Some(Unit::Seconds),
            one(b.since_last_read_s.map(V::Level)),
        )?;
        family(
            e,
            "bus_inbox_backlog",
            "Inbox entries after the last one the agent read",
            Some(Unit::Other("entries".into())),
            one(b.inbox_backlog.map(|n| V::Level(n as f64))),
        )?;
        family(
            e,
            "bus_desired_generation",
            "Generation in the host's desired key",
            None,
            one(b.desired_generation.map(|g| V::Level(g as f64))),
        )?;
        family(
            e,
            "bus_applied_generation",
            "Generation the agent has applied",
            None,
            one(Some(V::Level(b.applied_generation as f64))),
        )
    }
}

fn tenants(e: &mut DescriptorEncoder, t: &Telemetry) -> std::fmt::Result {
    let ts = &t.tenants;
    let both = |f: fn(&TenantTelemetry) -> (u64, u64)| -> Vec<(Labels, V)> {
        ts.iter()
            .flat_map(|x| {
                let (r, w) = f(x);
                [
                    (op(&x.name, "read"), V::Count(r)),
                    (op(&x.name, "write"), V::Count(w)),
                ]
            })
            .collect()
    };
    family(
        e,
        "tenant_io_ops",
        "Operations the tenant's applications issued (eBPF: syscall and io_uring layers)",
        None,
        both(|x| (x.ops_read, x.ops_written)),
    )?;
    family(
        e,
        "tenant_io",
        "Bytes the tenant's applications read and wrote (eBPF)",
        Some(Unit::Bytes),
        both(|x| (x.bytes_read, x.bytes_written)),
    )?;
    let p99: Vec<(Labels, V)> = ts
        .iter()
        .filter_map(|x| x.latency_us_p99.map(|l| (x, l)))
        .flat_map(|(x, l)| {
            [("read", l.read), ("write", l.write)]
                .into_iter()
                .filter_map(move |(o, v)| v.map(|us| (op(&x.name, o), V::Level(us / 1e6))))
        })
        .collect();
    family(
        e,
        "tenant_io_latency_p99",
        "p99 IO latency over the last telemetry interval",
        Some(Unit::Seconds),
        p99,
    )?;
    let tenant = |name: &str| vec![("tenant", name.to_string())];
    let curve = ts
        .iter()
        .filter_map(|x| {
            x.curve
                .as_ref()
                .map(|c| (tenant(&x.name), V::Count(c.references)))
        })
        .collect();
    family(
        e,
        "tenant_curve_references",
        "4 KiB block references the tenant's miss-ratio curve covers",
        None,
        curve,
    )?;
    let shadow = |f: fn(&TenantCache) -> V| -> Vec<(Labels, V)> {
        ts.iter()
            .filter_map(|x| x.cache.as_ref().map(|c| (tenant(&x.name), f(c))))
            .collect()
    };
    family(
        e,
        "tenant_shadow_cache_hits",
        "Hits of the tenant's shadow cache at its allocated size",
        None,
        shadow(|c| V::Count(c.hits)),
    )?;
    family(
        e,
        "tenant_shadow_cache_misses",
        "Misses of the tenant's shadow cache at its allocated size",
        None,
        shadow(|c| V::Count(c.misses)),
    )?;
    family(
        e,
        "tenant_shadow_cache_size",
        "The tenant's allocated cache size (its shadow cache's)",
        Some(Unit::Bytes),
        shadow(|c| V::Level(c.size_bytes as f64)),
    )
}

fn stages(e: &mut DescriptorEncoder, t: &Telemetry) -> std::fmt::Result {
    let caches: Vec<&StageTelemetry> = t
        .stages
        .iter()
        .flatten()
        .filter(|s| s.kind == StageKindReport::Cache)
        .collect();
    let rows = |f: fn(&StageTelemetry) -> Option<u64>, counter: bool| -> Vec<(Labels, V)> {
        caches
            .iter()
            .filter_map(|s| {
                let labels = vec![
                    ("stage", s.name.clone()),
                    ("tenant", s.owner.clone().unwrap_or_default()),
                ];
                f(s).map(|n| {
                    (
                        labels,
                        if counter {
                            V::Count(n)
                        } else {
                            V::Level(n as f64)
                        },
                    )
                })
            })
            .collect()
    };
    let bytes = Some(Unit::Bytes);
    family(
        e,
        "stage_hits",
        "Block reads the cache stage served (summed over mounts)",
        None,
        rows(|s| s.hits, true),
    )?;
    family(
        e,
        "stage_misses",
        "Block reads the cache stage missed",
        None,
        rows(|s| s.misses, true),
    )?;
    family(
        e,
        "stage_read_hit",
        "Bytes read from the cache stage",
        bytes.clone(),
        rows(|s| s.bytes_read_hit, true),
    )?;
    family(
        e,
        "stage_read_miss",
        "Bytes read past the cache stage on misses",
        bytes.clone(),
        rows(|s| s.bytes_read_miss, true),
    )?;
    family(
        e,
        "stage_written",
        "Bytes written through the cache stage",
        bytes.clone(),
        rows(|s| s.bytes_written, true),
    )?;
    family(
        e,
        "stage_evictions",
        "Blocks the cache stage evicted",
        None,
        rows(|s| s.evictions, true),
    )?;
    family(
        e,
        "stage_writebacks",
        "Dirty blocks the cache stage wrote back",
        None,
        rows(|s| s.writebacks, true),
    )?;
    family(
        e,
        "stage_size",
        "Size desired state asks of the cache stage",
        bytes.clone(),
        rows(|s| s.size_bytes, false),
    )?;
    family(
        e,
        "stage_installed",
        "Size the cache stage holds now (summed over mounts)",
        bytes.clone(),
        rows(|s| s.installed_bytes, false),
    )?;
    family(
        e,
        "stage_dirty",
        "Dirty bytes in the cache stage",
        bytes,
        rows(|s| s.dirty_bytes, false),
    )
}

fn devices(e: &mut DescriptorEncoder, t: &Telemetry) -> std::fmt::Result {
    // Per device, then per placement handle: (labels, host bytes, media bytes).
    let per_device: Vec<(Labels, u64, Option<u64>)> = t
        .devices
        .iter()
        .map(|d| {
            (
                vec![("device", d.name.clone())],
                d.host_bytes_written,
                d.media_bytes_written,
            )
        })
        .collect();
    let per_handle: Vec<(Labels, u64, Option<u64>)> = t
        .devices
        .iter()
        .flat_map(|d| {
            d.handles.iter().flatten().map(|h| {
                let labels = vec![("device", d.name.clone()), ("handle", h.handle.to_string())];
                (labels, h.host_bytes_written, h.media_bytes_written)
            })
        })
        .collect();
    for (prefix, rows, what) in [
        ("device", &per_device, "the device"),
        (
            "device_handle",
            &per_handle,
            "the device with the placement handle",
        ),
    ] {
        family(
            e,
            &format!("{prefix}_host_written"),
            &format!("Bytes the host wrote to {what}"),
            Some(Unit::Bytes),
            rows.iter()
                .map(|(l, h, _)| (l.clone(), V::Count(*h)))
                .collect(),
        )?;
        family(
            e,
            &format!("{prefix}_media_written"),
            &format!("Bytes the host's writes to {what} caused on the media (where measured)"),
            Some(Unit::Bytes),
            rows.iter()
                .filter_map(|(l, _, m)| Some((l.clone(), V::Count((*m)?))))
                .collect(),
        )?;
        family(e, &format!("{prefix}_dlwa"),
               &format!("Device-level write amplification of {what} since the agent started: media / host bytes"),
               None,
               rows.iter()
                   .filter_map(|(l, h, m)| Some((l.clone(), V::Level(measured_dlwa((*m)?.into(), (*h).into())?))))
                   .collect())?;
    }
    Ok(())
}
