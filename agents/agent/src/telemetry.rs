//! The telemetry message (`api-schemas/bus/telemetry.schema.json`): per-tenant IO counters and
//! miss-ratio curves, per-device write counters, added to the host's telemetry stream
//! ([`crate::bus::keys::telemetry`]) every interval.
//!
//! Deserialization enforces the schema (and what it cannot say: one miss ratio per size), like
//! the other bus messages in [`crate::bus`]; `tests/bus_contract.rs` checks both against the
//! fixtures.

use lachesis_switch::names::de_name;
use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};

use crate::bus::{is_valid_host_id, Timestamp};

/// `XADD MAXLEN ~` of the telemetry stream: telemetry is soft state, old entries only serve a slow reader.
pub const STREAM_MAXLEN: u64 = 10_000;
/// Longest curve the schema allows.
pub const MAX_CURVE_POINTS: usize = 256;

/// `"lachesis.telemetry/v1"`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TelemetrySchema;

impl TelemetrySchema {
    pub const VALUE: &'static str = "lachesis.telemetry/v1";
}

impl Serialize for TelemetrySchema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(Self::VALUE)
    }
}

impl<'de> Deserialize<'de> for TelemetrySchema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == Self::VALUE {
            Ok(TelemetrySchema)
        } else {
            Err(D::Error::custom(format!(
                "schema must be {:?}, got {s:?}",
                Self::VALUE
            )))
        }
    }
}

/// One report of one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    pub schema: TelemetrySchema,
    #[serde(deserialize_with = "de_host_id")]
    pub host_id: String,
    pub sent_at: Timestamp,
    #[serde(deserialize_with = "de_interval")]
    pub interval_s: f64,
    pub tenants: Vec<TenantTelemetry>,
    pub devices: Vec<DeviceTelemetry>,
    /// The installed stages and their counters; absent: no data path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<Vec<StageTelemetry>>,
    /// The declared maintenance IO jobs and their progress; absent: no data path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_io: Option<Vec<lachesis_declared::JobReport>>,
    /// The remote endpoints the data path forwards to, with their latency (tail-latency
    /// routing); absent: no data path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<EndpointTelemetry>>,
}

/// One remote endpoint (`HOST:PORT` of the agent serving it) as this host's data path sees
/// it: requests answered so far, the mean round trip of the recent window and the long-run
/// mean (microseconds), and whether the recent window is over twice the mean
/// (`lachesis_fs::remote::latency`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointTelemetry {
    pub addr: String,
    pub requests: u64,
    #[serde(deserialize_with = "de_latency_us")]
    pub recent_us: f64,
    #[serde(deserialize_with = "de_latency_us")]
    pub mean_us: f64,
    pub slow: bool,
}

fn de_latency_us<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let x = f64::deserialize(d)?;
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(D::Error::custom(format!("latency {x} must be 0 or more")))
    }
}

/// IO the tenant's applications issued (syscall and io_uring layers), cumulative since the
/// tenant's slot was created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantTelemetry {
    #[serde(deserialize_with = "de_name")]
    pub name: String,
    pub ops_read: u64,
    pub ops_written: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Over the last interval; None before any IO.
    pub latency_us_p99: Option<LatencyP99>,
    pub curve: Option<TelemetryCurve>,
    /// The tenant's cache at its allocated size; None without an allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<TenantCache>,
}

/// Hits and misses of a tenant's cache at `size_bytes`, measured by a shadow cache on the
/// SHARDS samples and scaled by the sampling rate; cumulative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantCache {
    pub size_bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

/// p99 latency in microseconds per direction; None without IO of that direction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyP99 {
    #[serde(deserialize_with = "de_latency")]
    pub read: Option<f64>,
    #[serde(deserialize_with = "de_latency")]
    pub write: Option<f64>,
}

/// `"lru"`, the only policy the eBPF curves model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CurvePolicy {
    Lru,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CurveAlgorithm {
    ShardsFixedSize,
    ShardsFixedRate,
}

/// `"bytes"`: curve sizes are cache sizes in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CurveUnit {
    Bytes,
}

/// A miss-ratio curve: `miss_ratios[i]` at cache size `sizes[i]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "CurveFields")]
pub struct TelemetryCurve {
    pub policy: CurvePolicy,
    pub algorithm: CurveAlgorithm,
    pub unit: CurveUnit,
    pub sizes: Vec<u64>,
    pub miss_ratios: Vec<f64>,
    /// 4 KiB block references the curve covers.
    pub references: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CurveFields {
    policy: CurvePolicy,
    algorithm: CurveAlgorithm,
    unit: CurveUnit,
    sizes: Vec<u64>,
    miss_ratios: Vec<f64>,
    references: u64,
}

impl TryFrom<CurveFields> for TelemetryCurve {
    type Error = String;

    fn try_from(f: CurveFields) -> Result<Self, String> {
        TelemetryCurve::new(f.algorithm, f.sizes, f.miss_ratios, f.references).map(|mut c| {
            c.policy = f.policy;
            c.unit = f.unit;
            c
        })
    }
}

impl TelemetryCurve {
    /// An LRU curve in bytes; checks what the schema requires.
    pub fn new(
        algorithm: CurveAlgorithm,
        sizes: Vec<u64>,
        miss_ratios: Vec<f64>,
        references: u64,
    ) -> Result<Self, String> {
        if sizes.len() != miss_ratios.len() {
            return Err(format!(
                "{} miss ratios for {} sizes",
                miss_ratios.len(),
                sizes.len()
            ));
        }
        if sizes.is_empty() || sizes.len() > MAX_CURVE_POINTS {
            return Err(format!(
                "a curve has 1 to {MAX_CURVE_POINTS} points, not {}",
                sizes.len()
            ));
        }
        if let Some(s) = sizes.iter().find(|&&s| s == 0) {
            return Err(format!("cache size {s} is below 1 byte"));
        }
        if let Some(m) = miss_ratios.iter().find(|m| !(0.0..=1.0).contains(*m)) {
            return Err(format!("miss ratio {m} is not in [0, 1]"));
        }
        Ok(TelemetryCurve {
            policy: CurvePolicy::Lru,
            algorithm,
            unit: CurveUnit::Bytes,
            sizes,
            miss_ratios,
            references,
        })
    }
}

/// Write counters of one of the host's flash devices, cumulative.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceTelemetry {
    #[serde(deserialize_with = "de_name")]
    pub name: String,
    pub host_bytes_written: u64,
    /// None when the device does not report media writes.
    pub media_bytes_written: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// As registered (the same kinds as `registration`).
    pub kind: Option<crate::bus::DeviceKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_handles: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_unit_bytes: Option<u64>,
    /// Per placement handle (a measuring device), in handle order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handles: Option<Vec<HandleTelemetry>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StageKindReport {
    #[default]
    Cache,
    Ratelimit,
    Log,
}

fn de_stage_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if lachesis_switch::stage::is_valid_stage_name(&s) {
        Ok(s)
    } else {
        Err(D::Error::custom(format!("invalid stage name {s:?}")))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandleTelemetry {
    pub handle: u16,
    pub host_bytes_written: u64,
    pub media_bytes_written: Option<u64>,
}

/// One installed stage (`desired-state` stages) and its counters, cumulative since the stage
/// was built. The cache fields are set for cache stages only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StageTelemetry {
    #[serde(deserialize_with = "de_stage_name")]
    pub name: String,
    pub kind: StageKindReport,
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<lachesis_switch::CacheEngine>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misses: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_read_hit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_read_miss: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_written: Option<u64>,
    /// The flash engine's bytes asked to store and bytes written to the device (its ALWA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_bytes_written: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flash_bytes_written: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evictions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writebacks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dirty_bytes: Option<u64>,
    /// Log stages: bytes copied back to the rest of the route (tail-latency reclaim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimed_bytes: Option<u64>,
    /// Two-level caches with demotion: a level-1 stage's clean evictions queued for the
    /// server level; a server-level stage's demoted blocks taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demoted_blocks: Option<u64>,
    /// A server-level stage's hits on blocks held because level 1 demoted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demotion_hits: Option<u64>,
    /// Qos stages: what the IO scheduler dispatched of the stage's class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<lachesis_fs::qos::Counters>,
    /// The data path that runs the stage; None: the FUSE switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_end: Option<FrontEnd>,
    /// A flash cache's engine parts with their placement handles (the KV front end's).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_parts"
    )]
    pub parts: Option<Vec<PartTelemetry>>,
}

/// Which data path runs a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FrontEnd {
    Fs,
    Kv,
}

/// One engine part of a flash cache stage: the handles it writes with and its counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartTelemetry {
    pub part: PartName,
    #[serde(deserialize_with = "de_part_handles")]
    pub handles: Vec<u16>,
    pub objects: u64,
    pub gets: u64,
    pub hits: u64,
    pub flash_bytes_written: u64,
    /// DRAM of the part's index and buffers (a level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartName {
    Kangaroo,
    Fairywren,
    Loc,
}

fn de_parts<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<PartTelemetry>>, D::Error> {
    let v = Vec::<PartTelemetry>::deserialize(d)?;
    if v.len() > 8 {
        return Err(D::Error::custom(format!(
            "parts: {} entries, at most 8",
            v.len()
        )));
    }
    Ok(Some(v))
}

fn de_part_handles<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u16>, D::Error> {
    let v = Vec::<u16>::deserialize(d)?;
    if v.len() > 4 {
        return Err(D::Error::custom(format!(
            "handles: {} entries, at most 4",
            v.len()
        )));
    }
    Ok(v)
}

fn de_host_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if is_valid_host_id(&s) {
        Ok(s)
    } else {
        Err(D::Error::custom(format!("invalid host_id {s:?}")))
    }
}

fn de_interval<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(D::Error::custom(format!("interval_s {v} must be above 0")))
    }
}

fn de_latency<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    match v {
        Some(x) if !(x.is_finite() && x >= 0.0) => {
            Err(D::Error::custom(format!("latency {x} must be 0 or more")))
        }
        _ => Ok(v),
    }
}

/// The last report the telemetry thread built, numbered, for read-outs beside the bus (the
/// Prometheus endpoint, `src/metrics_http.rs`): they show the numbers the stream carries, not a
/// second count of them.
#[derive(Debug, Default)]
pub struct LatestReport(std::sync::Mutex<Option<(u64, std::sync::Arc<Telemetry>)>>);

impl LatestReport {
    pub fn set(&self, report: Telemetry) {
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = last.as_ref().map_or(0, |(n, _)| *n) + 1;
        *last = Some((n, std::sync::Arc::new(report)));
    }

    /// How many reports were built, and the last; None before the first.
    pub fn get(&self) -> Option<(u64, std::sync::Arc<Telemetry>)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_checks_what_the_schema_cannot() {
        let c = TelemetryCurve::new(
            CurveAlgorithm::ShardsFixedSize,
            vec![4096, 8192],
            vec![0.5],
            3,
        );
        assert_eq!(c.unwrap_err(), "1 miss ratios for 2 sizes");
        let c = TelemetryCurve::new(CurveAlgorithm::ShardsFixedSize, vec![4096], vec![1.5], 3);
        assert!(c.unwrap_err().contains("1.5"));
        let c = TelemetryCurve::new(CurveAlgorithm::ShardsFixedSize, vec![], vec![], 0);
        assert!(c.is_err());
        let text = r#"{"policy":"lru","algorithm":"shards-fixed-size","unit":"bytes",
                       "sizes":[4096,8192],"miss_ratios":[1.0],"references":1}"#;
        let e = serde_json::from_str::<TelemetryCurve>(text).unwrap_err();
        assert!(e.to_string().contains("1 miss ratios for 2 sizes"), "{e}");
    }

    #[test]
    fn curve_serializes_with_its_constants() {
        let c = TelemetryCurve::new(CurveAlgorithm::ShardsFixedRate, vec![4096], vec![0.25], 9)
            .unwrap();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"policy":"lru","algorithm":"shards-fixed-rate","unit":"bytes",
                               "sizes":[4096],"miss_ratios":[0.25],"references":9})
        );
    }
}
