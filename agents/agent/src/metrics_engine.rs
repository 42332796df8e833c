//! The agent's eBPF metrics engine and its telemetry thread.
//!
//! At start-up the agent loads the BPF programs ([`MetricsEngine::load`]; a host without BTF or
//! the tracepoints gets an error naming what is missing, and the agent runs on without eBPF
//! metrics). [`spawn`] then runs one thread that
//! - follows the applied desired state and keeps the kernel's cgroup → tenant map in step
//!   ([`TenantMap`]: every tenant with a `cgroup` classifier gets a slot; classifiers whose
//!   cgroup does not exist yet are retried every interval),
//! - drains the SHARDS sample ring buffer into one fixed-size SHARDS estimator per tenant,
//!   and into a shadow cache per tenant with an allocated size (desired-state `caches`,
//!   [`shadow_cache`]), which measures the hit ratio the tenant gets at that size,
//! - every interval adds a [`Telemetry`] message to the host's telemetry stream.
//!
//! A thread rather than a task: ring-buffer polling blocks, and the bus side is one `XADD` per
//! interval, so a blocking Redis connection is enough.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lachesis_ebpf_metrics::{
    cgroup_dir, cgroup_id, EbpfMetrics, Error as EbpfError, LoadOptions, MetricsMaps, Op,
    SampleReader, ShardsSinks, Sizing, TenantId, TenantStats,
};
use lachesis_switch::{ClassifierKind, Tenant};
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

pub mod datapath_curves;
mod shadow_cache;
pub use shadow_cache::ShadowCache;

use crate::bus::{keys, CacheSize, Device, DeviceKind, Timestamp};
use crate::devices::OpenDevice;
use crate::state::Applied;
use crate::telemetry::{
    CurveAlgorithm, DeviceTelemetry, LatencyP99, StageTelemetry, Telemetry, TelemetryCurve,
    TelemetrySchema, TenantTelemetry, STREAM_MAXLEN,
};

/// SHARDS samples 4 KiB blocks; curve sizes are counted in them.
pub const BLOCK_BYTES: u64 = 4096;
/// Default `S_max` of each tenant's fixed-size SHARDS estimator (8 K keys: SHARDS's MAE is
/// about 0.01 there, at a few hundred KiB per tenant).
pub const DEFAULT_SAMPLE_KEYS: usize = 8192;
/// Longest the thread blocks on the ring buffer, so it notices new desired state and shutdown.
const POLL: Duration = Duration::from_millis(200);

/// Cache sizes of every curve, in 4 KiB blocks: 1 MiB to 1 TiB, two points per doubling.
pub fn curve_sizes() -> Vec<u64> {
    (0..=40)
        .map(|i| (2f64.powf(8.0 + i as f64 / 2.0)).round() as u64)
        .collect()
}

/// What changed in the tenant map, in the order the kernel maps must be updated.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Slots to clear (tenants that went away).
    pub removed: Vec<TenantId>,
    /// cgroup ids no tenant claims any more.
    pub unmapped: Vec<u64>,
    /// New tenants and their slots.
    pub added: Vec<(TenantId, String)>,
    /// cgroup id → slot, new or moved.
    pub mapped: Vec<(u64, TenantId)>,
    /// Problems not reported by the previous update (unresolvable classifiers, full slots).
    pub problems: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty()
            && self.unmapped.is_empty()
            && self.added.is_empty()
            && self.mapped.is_empty()
    }
}

/// The desired tenants as the kernel sees them: tenant → slot, cgroup id → slot.
#[derive(Debug)]
pub struct TenantMap {
    max_tenants: u32,
    slots: BTreeMap<String, TenantId>,
    cgroups: BTreeMap<u64, TenantId>,
    reported: BTreeSet<String>,
}

impl TenantMap {
    pub fn new(max_tenants: u32) -> Self {
        TenantMap {
            max_tenants,
            slots: BTreeMap::new(),
            cgroups: BTreeMap::new(),
            reported: BTreeSet::new(),
        }
    }

    /// Tenants with a slot, by name.
    pub fn slots(&self) -> &BTreeMap<String, TenantId> {
        &self.slots
    }

    pub fn cgroups(&self) -> &BTreeMap<u64, TenantId> {
        &self.cgroups
    }

    /// Bring the map in step with `desired`; `resolve` turns a cgroup classifier's value into
    /// a cgroup id. A tenant keeps its slot (and so its counters) while it stays desired.
    pub fn update(
        &mut self,
        desired: &[Tenant],
        resolve: &mut dyn FnMut(&str) -> Result<u64, String>,
    ) -> Changes {
        let mut problems = BTreeSet::new();
        let mut want_tenants = BTreeSet::new();
        let mut want_cgroups: BTreeMap<u64, &str> = BTreeMap::new();
        for t in desired {
            let values: Vec<&str> = t
                .classifiers
                .iter()
                .filter(|c| c.kind == ClassifierKind::Cgroup)
                .map(|c| c.value.as_str())
                .collect();
            if values.is_empty() {
                continue;
            }
            want_tenants.insert(t.name.as_str());
            for v in values {
                match resolve(v) {
                    Ok(id) => {
                        if let Some(first) = want_cgroups.get(&id) {
                            if *first != t.name {
                                problems.insert(format!(
                                    "cgroup {v:?} (id {id}) is a classifier of tenants {first} and \
                                     {}; its IO is charged to {first}",
                                    t.name
                                ));
                            }
                        } else {
                            want_cgroups.insert(id, t.name.as_str());
                        }
                    }
                    Err(e) => {
                        problems.insert(format!(
                            "tenant {}: cgroup classifier {v:?}: {e}; its IO is not counted \
                             until the cgroup exists",
                            t.name
                        ));
                    }
                }
            }
        }

        let mut ch = Changes::default();
        self.slots.retain(|name, slot| {
            let keep = want_tenants.contains(name.as_str());
            if !keep {
                ch.removed.push(*slot);
            }
            keep
        });
        // Clearing a slot unmaps its cgroups in the kernel too.
        self.cgroups.retain(|_, slot| !ch.removed.contains(slot));
        for name in want_tenants {
            if self.slots.contains_key(name) {
                continue;
            }
            let used: BTreeSet<TenantId> = self.slots.values().copied().collect();
            match (0..self.max_tenants).find(|s| !used.contains(s)) {
                Some(slot) => {
                    self.slots.insert(name.to_string(), slot);
                    ch.added.push((slot, name.to_string()));
                }
                None => {
                    problems.insert(format!(
                        "tenant {name}: all {} eBPF tenant slots are in use; its IO is not counted",
                        self.max_tenants
                    ));
                }
            }
        }
        let want: BTreeMap<u64, TenantId> = want_cgroups
            .into_iter()
            .filter_map(|(id, name)| self.slots.get(name).map(|&s| (id, s)))
            .collect();
        for (&id, _) in self.cgroups.iter().filter(|(id, _)| !want.contains_key(id)) {
            ch.unmapped.push(id);
        }
        for (&id, &slot) in &want {
            if self.cgroups.get(&id) != Some(&slot) {
                ch.mapped.push((id, slot));
            }
        }
        self.cgroups = want;
        ch.problems = problems.difference(&self.reported).cloned().collect();
        self.reported = problems;
        ch
    }
}

/// How to load the engine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Pin the maps here for `lachesis-agent top`; pinning is skipped (with a warning) if it
    /// fails.
    pub pin_dir: Option<PathBuf>,
    /// `S_max` of each tenant's estimator.
    pub sample_keys: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            pin_dir: None,
            sample_keys: DEFAULT_SAMPLE_KEYS,
        }
    }
}

/// The loaded programs, the sample reader and one SHARDS estimator per tenant.
pub struct MetricsEngine {
    metrics: EbpfMetrics,
    reader: SampleReader,
    sinks: ShardsSinks,
    map: TenantMap,
    sample_keys: usize,
    sizes: Vec<u64>,
    /// Counters at the previous report, for per-interval latency.
    last: BTreeMap<TenantId, TenantStats>,
    /// Allocated cache sizes by tenant name, and the shadow cache of each slot that has one.
    allocated: BTreeMap<String, u64>,
    shadows: BTreeMap<TenantId, ShadowCache>,
}

impl std::fmt::Debug for MetricsEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsEngine")
            .field("metrics", &self.metrics)
            .field("map", &self.map)
            .finish_non_exhaustive()
    }
}

impl MetricsEngine {
    /// Load and attach the BPF programs. [`EbpfError::is_unsupported`] errors name the missing
    /// kernel feature (BTF, a tracepoint, privileges).
    pub fn load(opts: &EngineOptions) -> Result<Self, EbpfError> {
        let load = |pin_dir: Option<PathBuf>| {
            EbpfMetrics::load(&LoadOptions {
                pin_dir,
                ..Default::default()
            })
        };
        let metrics = match load(opts.pin_dir.clone()) {
            Err(EbpfError::Pin { path, message }) => {
                warn!(
                    path = %path.display(),
                    "eBPF metrics: cannot pin maps ({message}); `lachesis-agent top` will not see \
                     this agent"
                );
                load(None)?
            }
            other => other?,
        };
        for lost in metrics.degraded() {
            warn!("eBPF metrics degraded: {lost}");
        }
        let reader = SampleReader::new(&metrics)?;
        let max = metrics.max_tenants();
        Ok(MetricsEngine {
            metrics,
            reader,
            sinks: ShardsSinks::new(),
            map: TenantMap::new(max),
            sample_keys: opts.sample_keys,
            sizes: curve_sizes(),
            last: BTreeMap::new(),
            allocated: BTreeMap::new(),
            shadows: BTreeMap::new(),
        })
    }

    pub fn maps(&self) -> &MetricsMaps {
        &self.metrics
    }

    /// Whether the maps are pinned (visible to `lachesis-agent top`).
    pub fn pinned(&self) -> bool {
        !self.metrics.pinned().is_empty()
    }

    pub fn tenant_map(&self) -> &TenantMap {
        &self.map
    }

    /// Bring the kernel's tenant map in step with `desired`. Map errors are logged: a tenant
    /// whose update failed is retried by the next call.
    pub fn apply_tenants(&mut self, desired: &[Tenant]) {
        let mut resolve = |v: &str| {
            cgroup_dir(v)
                .and_then(|d| cgroup_id(&d))
                .map_err(|e| e.to_string())
        };
        let ch = self.map.update(desired, &mut resolve);
        for p in &ch.problems {
            warn!("eBPF metrics: {p}");
        }
        if ch.is_empty() {
            return;
        }
        let m = &self.metrics;
        let mut failed = false;
        for &slot in &ch.removed {
            self.sinks.remove_tenant(slot);
            self.shadows.remove(&slot);
            self.last.remove(&slot);
            if let Err(e) = m.remove_tenant(slot) {
                error!(slot, error = %e, "eBPF metrics: cannot clear tenant slot");
                failed = true;
            }
        }
        for &id in &ch.unmapped {
            if let Err(e) = m.unmap_cgroup(id) {
                error!(cgroup_id = id, error = %e, "eBPF metrics: cannot unmap cgroup");
                failed = true;
            }
        }
        for (slot, name) in &ch.added {
            let r = m.set_tenant(*slot, name, 0).and_then(|()| {
                self.sinks.add_tenant(
                    m,
                    *slot,
                    Sizing::FixedSize(self.sample_keys),
                    self.sizes.clone(),
                )
            });
            match r {
                Ok(()) => {
                    self.last
                        .insert(*slot, m.tenant_stats(*slot).unwrap_or_default());
                }
                Err(e) => {
                    error!(tenant = %name, slot, error = %e, "eBPF metrics: cannot add tenant");
                    failed = true;
                }
            }
        }
        for &(id, slot) in &ch.mapped {
            if let Err(e) = m.map_cgroup(id, slot) {
                error!(cgroup_id = id, slot, error = %e, "eBPF metrics: cannot map cgroup");
                failed = true;
            }
        }
        if failed {
            // Forget everything so the next call re-plans from scratch.
            self.map = TenantMap::new(m.max_tenants());
        }
        info!(
            tenants = self.map.slots().len(),
            cgroups = self.map.cgroups().len(),
            added = ch.added.len(),
            removed = ch.removed.len(),
            "eBPF metrics: tenant map updated"
        );
    }

    /// Size the tenants' shadow caches as allocated (`caches` of the desired state); call
    /// after [`Self::apply_tenants`] so new slots get theirs. A resized shadow keeps its counters.
    pub fn apply_caches(&mut self, caches: &[CacheSize]) {
        self.allocated = caches
            .iter()
            .map(|c| (c.tenant.clone(), c.size_bytes))
            .collect();
        let want = sized_slots(self.map.slots(), &self.allocated);
        self.shadows.retain(|slot, _| want.contains_key(slot));
        for (slot, size) in want {
            let rate = self.sinks.rate(slot).unwrap_or(1.0);
            self.shadows
                .entry(slot)
                .and_modify(|s| s.resize(size))
                .or_insert_with(|| ShadowCache::new(size, rate));
        }
    }

    /// Wait up to `timeout` for samples and feed them to the estimators and shadow caches.
    pub fn poll(&mut self, timeout: Duration) -> Result<usize, EbpfError> {
        let (sinks, shadows) = (&mut self.sinks, &mut self.shadows);
        let mut both = |s: &lachesis_ebpf_metrics::Sample| {
            lachesis_ebpf_metrics::SampleSink::sample(sinks, s);
            if let Some(c) = shadows.get_mut(&s.tenant) {
                c.access(s.key(), s.hash);
            }
        };
        let n = self.reader.poll(timeout, &mut both)?;
        self.sinks.sync(&self.metrics)?;
        for (&slot, c) in self.shadows.iter_mut() {
            if let Some(rate) = self.sinks.rate(slot) {
                c.set_rate(rate);
            }
        }
        Ok(n)
    }

    /// Every tenant's counters and curve, now.
    pub fn tenant_reports(&mut self) -> Vec<TenantTelemetry> {
        let mut out = Vec::new();
        for (name, &slot) in self.map.slots() {
            let now = match self.metrics.tenant_stats(slot) {
                Ok(s) => s,
                Err(e) => {
                    error!(tenant = %name, error = %e, "eBPF metrics: cannot read counters");
                    continue;
                }
            };
            let prev = self.last.insert(slot, now).unwrap_or_default();
            let curve = self
                .sinks
                .curve(slot)
                .and_then(|c| tenant_curve(&c.sizes, &c.miss_ratio, now.blocks));
            let mut report = tenant_report(name, &now, &now.since(&prev), curve);
            report.cache = self.shadows.get(&slot).map(ShadowCache::report);
            out.push(report);
        }
        out
    }
}

/// A tenant's telemetry: cumulative application counters, p99 over `interval`.
pub fn tenant_report(
    name: &str,
    total: &TenantStats,
    interval: &TenantStats,
    curve: Option<TelemetryCurve>,
) -> TenantTelemetry {
    let (r, w) = (total.application(Op::Read), total.application(Op::Write));
    let p99 = |op| {
        interval
            .application(op)
            .latency
            .quantile_ns(0.99)
            .map(|ns| round_to(ns / 1000.0, 1000.0))
    };
    let (pr, pw) = (p99(Op::Read), p99(Op::Write));
    TenantTelemetry {
        name: name.to_string(),
        ops_read: r.ops,
        ops_written: w.ops,
        bytes_read: r.bytes,
        bytes_written: w.bytes,
        latency_us_p99: (pr.is_some() || pw.is_some()).then_some(LatencyP99 {
            read: pr,
            write: pw,
        }),
        curve,
        cache: None,
    }
}

/// Slot → allocated size of every tenant that has both.
pub fn sized_slots(
    slots: &BTreeMap<String, TenantId>,
    allocated: &BTreeMap<String, u64>,
) -> BTreeMap<TenantId, u64> {
    allocated
        .iter()
        .filter_map(|(name, &size)| slots.get(name).map(|&slot| (slot, size)))
        .collect()
}

/// The telemetry form of a curve over `sizes` (4 KiB blocks): sizes in bytes, miss ratios to
/// 4 decimals, and the flat tail beyond the working set cut to its first point (the message
/// stays small; the curve is flat from there on). None before any reference.
pub fn tenant_curve(sizes: &[u64], miss_ratio: &[f64], references: u64) -> Option<TelemetryCurve> {
    curve_in_bytes(sizes, BLOCK_BYTES, miss_ratio, references)
}

/// [`tenant_curve`] over `sizes` in units of `scale` bytes (4 KiB blocks, or bytes for the
/// KV front end's curves).
pub fn curve_in_bytes(
    sizes: &[u64],
    scale: u64,
    miss_ratio: &[f64],
    references: u64,
) -> Option<TelemetryCurve> {
    if references == 0 || sizes.is_empty() || sizes.len() != miss_ratio.len() {
        return None;
    }
    let ratios: Vec<f64> = miss_ratio
        .iter()
        .map(|m| {
            round_to(
                if m.is_finite() {
                    m.clamp(0.0, 1.0)
                } else {
                    1.0
                },
                1e4,
            )
        })
        .collect();
    let last = *ratios.last().expect("not empty");
    let keep = ratios.iter().rposition(|&m| m != last).map_or(1, |i| i + 2);
    TelemetryCurve::new(
        CurveAlgorithm::ShardsFixedSize,
        sizes[..keep].iter().map(|s| s * scale).collect(),
        ratios[..keep].to_vec(),
        references,
    )
    .ok()
}

fn round_to(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

/// Write counters of the host's block devices (sectors written, from sysfs). File-backed
/// devices have no counters of their own and are left out; no device here reports media
/// writes yet.
pub fn device_reports(devices: &[Device]) -> Vec<DeviceTelemetry> {
    devices
        .iter()
        .filter(|d| d.kind == DeviceKind::Block)
        .filter_map(|d| {
            let written = block_bytes_written(Path::new(&d.path))?;
            Some(DeviceTelemetry {
                name: d.name.clone(),
                host_bytes_written: written,
                media_bytes_written: None,
                kind: Some(DeviceKind::Block),
                placement_handles: None,
                reclaim_unit_bytes: None,
                handles: None,
            })
        })
        .collect()
}

fn block_bytes_written(dev: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(dev).ok()?.rdev();
    let (major, minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    let stat = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    // Documentation/block/stat.rst: field 7 is sectors written, in 512-byte units.
    let sectors: u64 = stat.split_whitespace().nth(6)?.parse().ok()?;
    Some(sectors * 512)
}

/// Settings of the telemetry thread.
#[derive(Clone)]
pub struct TelemetryConfig {
    pub host_id: String,
    pub interval: Duration,
    /// The opened `--device`s (their counters go out with every report).
    pub devices: Arc<Vec<OpenDevice>>,
    /// The data path's stages and their counters, when the agent has one.
    pub stages: Option<StageSource>,
    /// Curves of the IO through the data path, per tenant (`datapath_curves.rs`).
    pub datapath_curves: Option<Arc<datapath_curves::DatapathCurves>>,
    /// Counters of the tenants whose requests the agent serves itself (the KV front end).
    pub served: Option<ServedSource>,
    /// Every report is also kept here for the metrics endpoint.
    pub latest: Arc<crate::telemetry::LatestReport>,
    /// The declared maintenance IO jobs, when the agent has a data path.
    pub declared: Option<Arc<lachesis_declared::Planner>>,
    /// The data path's remote endpoints and their latency.
    pub endpoints: Option<EndpointSource>,
}

pub type EndpointSource = Arc<dyn Fn() -> Vec<crate::telemetry::EndpointTelemetry> + Send + Sync>;

/// A tenant's requests served by the agent itself, cumulative: ops read and written, bytes
/// read and written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    pub ops_read: u64,
    pub ops_written: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// Where the telemetry thread reads [`Served`] counters from, per tenant.
pub type ServedSource = Arc<dyn Fn() -> Vec<(String, Served)> + Send + Sync>;

/// Where the telemetry thread reads the installed stages from (the data path).
pub type StageSource = Arc<dyn Fn() -> Vec<StageTelemetry> + Send + Sync>;

/// Start the telemetry thread: it keeps `engine` (if eBPF metrics are on) in step with
/// `applied` and publishes every `cfg.interval` until `stop` is set. Without an engine it still
/// publishes the device counters.
pub fn spawn(
    engine: Option<MetricsEngine>,
    cfg: TelemetryConfig,
    client: redis::Client,
    applied: watch::Receiver<Applied>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("telemetry".into())
        .spawn(move || telemetry_loop(engine, cfg, client, applied, stop))
}

fn telemetry_loop(
    mut engine: Option<MetricsEngine>,
    cfg: TelemetryConfig,
    client: redis::Client,
    mut applied: watch::Receiver<Applied>,
    stop: Arc<AtomicBool>,
) {
    let mut bus = Publisher::new(client);
    let (mut tenants, mut caches) = {
        let a = applied.borrow_and_update();
        (a.tenants.clone(), a.caches.clone())
    };
    if let Some(e) = engine.as_mut() {
        e.apply_tenants(&tenants);
        e.apply_caches(&caches);
    }
    let mut next = Instant::now() + cfg.interval;
    while !stop.load(Ordering::Relaxed) {
        if applied.has_changed().unwrap_or(false) {
            (tenants, caches) = {
                let a = applied.borrow_and_update();
                (a.tenants.clone(), a.caches.clone())
            };
            if let Some(e) = engine.as_mut() {
                e.apply_tenants(&tenants);
                e.apply_caches(&caches);
            }
        }
        let wait = next.saturating_duration_since(Instant::now()).min(POLL);
        match engine.as_mut() {
            Some(e) => {
                if let Err(err) = e.poll(wait) {
                    error!(error = %err, "eBPF metrics: reading samples failed");
                    std::thread::sleep(wait);
                }
            }
            None => std::thread::sleep(wait),
        }
        if Instant::now() < next {
            continue;
        }
        next += cfg.interval;
        if let Some(e) = engine.as_mut() {
            // Cgroups named by classifiers may have appeared since.
            e.apply_tenants(&tenants);
            e.apply_caches(&caches);
        }
        let msg = Telemetry {
            schema: TelemetrySchema,
            host_id: cfg.host_id.clone(),
            sent_at: Timestamp::now(),
            interval_s: cfg.interval.as_secs_f64(),
            tenants: with_served(
                with_datapath_curves(
                    engine
                        .as_mut()
                        .map(|e| e.tenant_reports())
                        .unwrap_or_default(),
                    &tenants,
                    cfg.datapath_curves.as_deref(),
                ),
                &tenants,
                cfg.served.as_ref().map(|s| s()).unwrap_or_default(),
            ),
            devices: crate::devices::reports(&cfg.devices),
            stages: cfg.stages.as_ref().map(|s| s()),
            declared_io: cfg.declared.as_ref().map(|p| p.reports()),
            endpoints: cfg.endpoints.as_ref().map(|e| e()),
        };
        bus.publish(&msg);
        cfg.latest.set(msg);
        // A slow Redis must not make reports pile up.
        next = next.max(Instant::now());
    }
}

/// A tenant whose IO goes through the data path gets the switch's curve (the kernel cannot
/// attribute that IO to it: `datapath_curves.rs`), its references counting both paths' blocks;
/// without the eBPF engine such a tenant still gets a report, with its curve only.
pub fn with_datapath_curves(
    mut reports: Vec<TenantTelemetry>,
    desired: &[Tenant],
    curves: Option<&datapath_curves::DatapathCurves>,
) -> Vec<TenantTelemetry> {
    let Some(curves) = curves else {
        return reports;
    };
    let names: Vec<String> = desired.iter().map(|t| t.name.clone()).collect();
    curves.retain(&names);
    for r in reports.iter_mut() {
        if curves.references(&r.name) > 0 {
            let kernel = r.curve.as_ref().map_or(0, |c| c.references);
            r.curve = curves.curve(&r.name, kernel);
        }
    }
    for name in names {
        if curves.references(&name) > 0 && !reports.iter().any(|r| r.name == name) {
            let zero = TenantStats::default();
            reports.push(tenant_report(&name, &zero, &zero, curves.curve(&name, 0)));
        }
    }
    reports
}

/// A tenant the agent serves itself (its requests never reach the kernel as its own IO) has
/// those requests as its IO counters; one in desired state without a report gets one.
pub fn with_served(
    mut reports: Vec<TenantTelemetry>,
    desired: &[Tenant],
    served: Vec<(String, Served)>,
) -> Vec<TenantTelemetry> {
    for (name, s) in served {
        if !desired.iter().any(|t| t.name == name) {
            continue;
        }
        let i = match reports.iter().position(|r| r.name == name) {
            Some(i) => i,
            None => {
                let zero = TenantStats::default();
                reports.push(tenant_report(&name, &zero, &zero, None));
                reports.len() - 1
            }
        };
        let r = &mut reports[i];
        r.ops_read += s.ops_read;
        r.ops_written += s.ops_written;
        r.bytes_read += s.bytes_read;
        r.bytes_written += s.bytes_written;
    }
    reports
}

/// One blocking connection for `XADD`; a failed report is dropped (the next one carries the
/// same cumulative counters).
struct Publisher {
    client: redis::Client,
    con: Option<redis::Connection>,
    failing: bool,
}

impl Publisher {
    fn new(client: redis::Client) -> Self {
        Publisher {
            client,
            con: None,
            failing: false,
        }
    }

    fn publish(&mut self, msg: &Telemetry) {
        match self.try_publish(msg) {
            Ok(id) => {
                if self.failing {
                    info!("telemetry restored");
                }
                self.failing = false;
                debug!(entry = %id, tenants = msg.tenants.len(), "telemetry published");
            }
            Err(e) => {
                self.con = None;
                if !self.failing {
                    warn!(error = %e, "telemetry not published; retrying next interval");
                }
                self.failing = true;
            }
        }
    }

    fn try_publish(&mut self, msg: &Telemetry) -> anyhow::Result<String> {
        if self.con.is_none() {
            let c = self
                .client
                .get_connection_with_timeout(Duration::from_secs(2))?;
            c.set_read_timeout(Some(Duration::from_secs(2)))?;
            c.set_write_timeout(Some(Duration::from_secs(2)))?;
            self.con = Some(c);
        }
        let con = self.con.as_mut().expect("connected above");
        let json = serde_json::to_string(msg)?;
        let id: String = redis::cmd("XADD")
            .arg(keys::telemetry(&msg.host_id))
            .arg("MAXLEN")
            .arg("~")
            .arg(STREAM_MAXLEN)
            .arg("*")
            .arg(keys::FIELD)
            .arg(json)
            .query(con)?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_switch::Classifier;

    fn tenant(name: &str, cgroups: &[&str]) -> Tenant {
        Tenant {
            name: name.into(),
            classifiers: cgroups
                .iter()
                .map(|v| Classifier {
                    kind: ClassifierKind::Cgroup,
                    value: v.to_string(),
                })
                .collect(),
        }
    }

    /// "/a" → 1, "/b" → 2, ...; "/missing" fails.
    fn resolve(v: &str) -> Result<u64, String> {
        match v {
            "/missing" => Err("no such cgroup v2 directory".into()),
            _ => Ok((v.as_bytes()[1] - b'a' + 1) as u64),
        }
    }

    #[test]
    fn tenants_get_slots_and_keep_them() {
        let mut m = TenantMap::new(4);
        let ch = m.update(
            &[tenant("web", &["/a", "/b"]), tenant("db", &["/c"])],
            &mut resolve,
        );
        assert_eq!(
            ch.added,
            vec![(0, "db".to_string()), (1, "web".to_string())]
        );
        assert_eq!(ch.mapped, vec![(1, 1), (2, 1), (3, 0)]);
        assert!(ch.removed.is_empty() && ch.unmapped.is_empty() && ch.problems.is_empty());

        // Same state: nothing to do.
        let ch = m.update(
            &[tenant("web", &["/a", "/b"]), tenant("db", &["/c"])],
            &mut resolve,
        );
        assert!(ch.is_empty(), "{ch:?}");

        // db goes, web loses /b and gains /d, a new tenant takes db's freed slot.
        let ch = m.update(
            &[tenant("web", &["/a", "/d"]), tenant("new", &["/c"])],
            &mut resolve,
        );
        assert_eq!(ch.removed, vec![0]);
        assert_eq!(ch.unmapped, vec![2]);
        assert_eq!(ch.added, vec![(0, "new".to_string())]);
        assert_eq!(ch.mapped, vec![(3, 0), (4, 1)]);
        assert_eq!(m.slots()["web"], 1);
    }

    #[test]
    fn tenants_without_cgroups_get_no_slot() {
        let mut m = TenantMap::new(4);
        let mut t = tenant("uid-only", &[]);
        t.classifiers.push(Classifier {
            kind: ClassifierKind::Uid,
            value: "1000".into(),
        });
        let ch = m.update(&[t], &mut resolve);
        assert!(ch.is_empty());
        assert!(m.slots().is_empty());
    }

    #[test]
    fn problems_are_reported_once_and_retried() {
        let mut m = TenantMap::new(1);
        let desired = [tenant("a", &["/missing"]), tenant("b", &["/b"])];
        let ch = m.update(&desired, &mut resolve);
        assert_eq!(ch.added, vec![(0, "a".to_string())]);
        assert!(ch.mapped.is_empty());
        assert_eq!(ch.problems.len(), 2, "{:?}", ch.problems);
        assert!(ch
            .problems
            .iter()
            .any(|p| p.contains("\"/missing\"") && p.contains("not counted")));
        assert!(ch
            .problems
            .iter()
            .any(|p| p.contains("all 1 eBPF tenant slots")));
        // Unchanged problems are not reported again.
        let ch = m.update(&desired, &mut resolve);
        assert!(ch.problems.is_empty() && ch.is_empty());
        // The cgroup appears: it is mapped on the next update.
        let ch = m.update(&desired, &mut |v: &str| {
            if v == "/missing" {
                Ok(9)
            } else {
                resolve(v)
            }
        });
        assert_eq!(ch.mapped, vec![(9, 0)]);
    }

    #[test]
    fn a_cgroup_claimed_twice_goes_to_the_first_tenant() {
        let mut m = TenantMap::new(4);
        let ch = m.update(
            &[tenant("x", &["/a"]), tenant("y", &["/a", "/b"])],
            &mut resolve,
        );
        assert_eq!(ch.mapped, vec![(1, 0), (2, 1)]);
        assert_eq!(ch.problems.len(), 1);
        assert!(
            ch.problems[0].contains("charged to x"),
            "{}",
            ch.problems[0]
        );
    }

    #[test]
    fn curves_are_in_bytes_and_cut_after_the_working_set() {
        let c = tenant_curve(&[1, 2, 4, 8], &[0.9, 0.333333, 0.1, 0.1], 50).unwrap();
        assert_eq!(c.sizes, vec![4096, 8192, 16384]);
        assert_eq!(c.miss_ratios, vec![0.9, 0.3333, 0.1]);
        assert_eq!(c.references, 50);
        let flat = tenant_curve(&[1, 2], &[1.0, 1.0], 3).unwrap();
        assert_eq!(flat.sizes, vec![4096]);
        assert!(tenant_curve(&[1, 2], &[1.0, 1.0], 0).is_none());
    }

    #[test]
    fn curve_grid_spans_one_mib_to_one_tib() {
        let s = curve_sizes();
        assert_eq!(s.first().map(|b| b * BLOCK_BYTES), Some(1 << 20));
        assert_eq!(s.last().map(|b| b * BLOCK_BYTES), Some(1 << 40));
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn only_tenants_with_a_slot_and_a_size_get_a_shadow_cache() {
        let slots = BTreeMap::from([("web".to_string(), 1), ("db".to_string(), 0)]);
        let allocated = BTreeMap::from([("web".to_string(), 4096), ("gone".to_string(), 8192)]);
        assert_eq!(sized_slots(&slots, &allocated), BTreeMap::from([(1, 4096)]));
    }

    #[test]
    fn idle_tenant_reports_zeros_and_no_latency() {
        let t = tenant_report(
            "web",
            &TenantStats::default(),
            &TenantStats::default(),
            None,
        );
        assert_eq!((t.ops_read, t.bytes_written), (0, 0));
        assert_eq!(t.latency_us_p99, None);
    }

    #[test]
    fn served_tenants_get_their_requests_as_io_counters() {
        let desired = [tenant("sessions", &[]), tenant("web", &["/web"])];
        let web = tenant_report(
            "web",
            &TenantStats::default(),
            &TenantStats::default(),
            None,
        );
        let s = Served {
            ops_read: 7,
            ops_written: 3,
            bytes_read: 700,
            bytes_written: 300,
        };
        let out = with_served(
            vec![web],
            &desired,
            vec![("sessions".into(), s), ("gone".into(), s)],
        );
        assert_eq!(
            out.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["web", "sessions"]
        );
        let r = &out[1];
        assert_eq!(
            (r.ops_read, r.ops_written, r.bytes_read, r.bytes_written),
            (7, 3, 700, 300)
        );
        assert_eq!((out[0].ops_read, out[0].bytes_written), (0, 0));
    }
}
