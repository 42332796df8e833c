//! [`Service`]: the tenants, rules and caches of one KV front end, as the agent applies its
//! desired state to it; what the connections ask to route keys, and the counters.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use lachesis_device::measured::MeasuredStatsReader;
use lachesis_stages::qos::Gate;
use lachesis_stages::stage::qos::QosStage;
use lachesis_stages::stage::resizes::{resize_all, Resize};
use lachesis_stages::stage::space::Devices;
use lachesis_switch::{
    CacheEngine, ClassifierKind, EnginePart, Op, Rule, RuleTable, StageChange, StageConfig, Tenant,
};
use serde::Serialize;

use crate::cache::{Cache, CacheStats, DramCache, FlashCache, FlashLayout};
use crate::stats::{ConnCounters, DeviceStats, HandleBytes, KvStats, StageStats, TenantStats};
use crate::store::{system_clock, Clock, Store};
use crate::tenant::{self, Counters, Route, Routed, Routing, Stage, Target};

/// The tenant that takes every key while no KV tenant is declared.
pub const DEFAULT_TENANT: &str = "default";

/// How a [`Service`] is built.
#[derive(Clone)]
pub struct ServiceConfig {
    /// The agent's flash devices (the same ones the FUSE cache stages use).
    pub devices: Devices,
    /// Host and media byte counters of the devices that measure (by device name).
    pub measured: Vec<(String, MeasuredStatsReader)>,
    /// Largest value (memcached's `-I`, default 1 MiB).
    pub max_item: usize,
    /// Connections served at once; more are closed at accept (and counted).
    pub max_connections: usize,
    /// Unsent reply bytes a connection may have; past it the connection is closed (and
    /// counted): a client that never reads cannot make the server hold its replies.
    pub output_bound: usize,
    /// Where a clean shutdown leaves what a warm restart needs (none: always cold).
    pub state_dir: Option<PathBuf>,
    /// DRAM of a tenant's cache when it has no cache stage.
    pub default_dram_bytes: u64,
    /// Shape of the cache stages' hybrid engines.
    pub layout: FlashLayout,
    pub clock: Clock,
}

impl ServiceConfig {
    pub fn new(devices: Devices) -> ServiceConfig {
        ServiceConfig {
            devices,
            measured: Vec::new(),
            max_item: 1 << 20,
            max_connections: 1024,
            output_bound: 4 << 20,
            state_dir: None,
            default_dram_bytes: 64 << 20,
            layout: FlashLayout::default(),
            clock: system_clock(),
        }
    }
}

/// The request kinds an observer sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KvOp {
    Get,
    Set,
    Delete,
}

/// Sees every get, set and delete (the agent feeds its miss-ratio curves with it).
pub trait KvObserver: Send + Sync {
    /// `object_bytes`: key plus value (the value found, for a get; 0 on a miss).
    fn request(&self, tenant: &str, key: &[u8], object_bytes: u64, op: KvOp, hit: bool);
}

/// A cache stage or a rate limit as built, with its config.
struct BuiltStage {
    config: StageConfig,
    stage: Stage,
}

#[derive(Default)]
struct Built {
    stages: HashMap<String, BuiltStage>,
    /// The DRAM caches of tenants without a cache stage.
    dram: HashMap<String, Arc<Store>>,
}

pub struct Service {
    config: ServiceConfig,
    routing: RwLock<Arc<Routing>>,
    built: Mutex<Built>,
    counters: Mutex<BTreeMap<String, Arc<Counters>>>,
    observer: RwLock<Option<Arc<dyn KvObserver>>>,
    uniques: Arc<AtomicU64>,
    ports: RwLock<HashMap<u16, String>>,
    pub(crate) conns: ConnCounters,
    pub(crate) started: u64,
    warm: crate::persist::Warm,
    /// The IO scheduler the qos stages put their tenants' requests through.
    qos: Arc<Gate>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Service {
    /// A service with no tenant declared: every key goes to the `default` tenant's DRAM
    /// cache until [`Service::apply`] says otherwise. A state dir left by a clean shutdown
    /// is read (and invalidated) here.
    pub fn new(config: ServiceConfig) -> Result<Service, String> {
        let warm = crate::persist::Warm::load(config.state_dir.as_deref())?;
        let started = (config.clock)();
        let s = Service {
            routing: RwLock::new(Arc::new(Routing {
                prefixes: Vec::new(),
                tenants: BTreeMap::new(),
                table: RuleTable::new(),
                rules: HashMap::new(),
                defaults: HashMap::new(),
                ports: HashMap::new(),
            })),
            built: Mutex::new(Built::default()),
            counters: Mutex::new(BTreeMap::new()),
            observer: RwLock::new(None),
            uniques: Arc::new(AtomicU64::new(warm.next_unique().max(1))),
            ports: RwLock::new(HashMap::new()),
            conns: ConnCounters::default(),
            started,
            qos: Arc::new(Gate::default()),
            warm,
            config,
        };
        s.apply(Vec::new(), Vec::new(), Vec::new())?;
        Ok(s)
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Binds `port` to `tenant`: every key of a connection that came in on that port is the
    /// tenant's (takes effect at the next [`Service::apply`]). The caller listens on it with
    /// [`crate::server::serve`].
    pub fn bind_port(&self, port: u16, tenant: &str) {
        self.ports
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(port, tenant.to_string());
    }

    pub fn set_observer(&self, observer: Arc<dyn KvObserver>) {
        *self.observer.write().unwrap_or_else(|p| p.into_inner()) = Some(observer);
    }

    pub(crate) fn observe(&self, tenant: &str, key: &[u8], bytes: u64, op: KvOp, hit: bool) {
        if let Some(o) = &*self.observer.read().unwrap_or_else(|p| p.into_inner()) {
            o.request(tenant, key, bytes, op, hit);
        }
    }

    pub(crate) fn routing(&self) -> Arc<Routing> {
        self.routing
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn counters_of(&self, tenant: &str) -> Arc<Counters> {
        locked(&self.counters)
            .entry(tenant.to_string())
            .or_default()
            .clone()
    }

    fn store(&self, cache: Arc<dyn Cache>) -> Arc<Store> {
        Arc::new(Store::new(
            cache,
            self.uniques.clone(),
            self.config.clock.clone(),
            self.config.max_item,
        ))
    }

    fn build_stage(&self, config: &StageConfig) -> Result<Stage, String> {
        match config {
            StageConfig::Cache(c) if c.engine == CacheEngine::Dram => Ok(Stage::Cache(
                self.store(Arc::new(DramCache::new(c.size_bytes))),
            )),
            StageConfig::Cache(c) => {
                let device = self
                    .config
                    .devices
                    .get(c.device.as_deref())?
                    .name()
                    .to_string();
                let warm = self.warm.take(c, &device);
                let (fc, restored) =
                    FlashCache::build(c, &self.config.devices, self.config.layout.clone(), warm)?;
                if restored {
                    tracing::info!(
                        stage = c.name,
                        "warm restart: the cache came back with its index"
                    );
                }
                Ok(Stage::Cache(self.store(Arc::new(fc))))
            }
            // A qos stage is a class of the front end's IO scheduler, shared by all of them.
            StageConfig::RateLimit(r) => Ok(Stage::RateLimit(Arc::new(QosStage::new(
                r,
                self.qos.clone(),
            )?))),
            StageConfig::Log(l) => Err(format!(
                "log stage {:?} does not apply to KV requests",
                l.name
            )),
        }
    }

    /// Applies the KV part of a desired state: tenants with a key-prefix classifier (or a
    /// bound port), the rules that can match their keys, and the stages those rules and
    /// tenants use. All or nothing: on an error nothing changes.
    pub fn apply(
        &self,
        tenants: Vec<Tenant>,
        rules: Vec<Rule>,
        stages: Vec<StageConfig>,
    ) -> Result<(), String> {
        lachesis_switch::check_stages(&stages)?;
        let ports = self.ports.read().unwrap_or_else(|p| p.into_inner()).clone();
        let kv = tenant::kv_tenants(&tenants, &ports);
        let mut names: Vec<&str> = kv.iter().map(|t| t.name.as_str()).collect();
        let mut prefixes: Vec<(Vec<u8>, Arc<str>)> = Vec::new();
        for t in &kv {
            for c in t
                .classifiers
                .iter()
                .filter(|c| c.kind == ClassifierKind::KeyPrefix)
            {
                if let Some((_, o)) = prefixes.iter().find(|(p, _)| p == c.value.as_bytes()) {
                    return Err(format!(
                        "tenant {:?}: key prefix {:?} is tenant {o:?}'s too",
                        t.name, c.value
                    ));
                }
                prefixes.push((c.value.as_bytes().to_vec(), Arc::from(t.name.as_str())));
            }
        }
        for (port, t) in &ports {
            if !kv.iter().any(|k| k.name == *t) {
                return Err(format!(
                    "port {port} is bound to tenant {t:?}, which is not declared"
                ));
            }
        }
        if kv.is_empty() {
            names.push(DEFAULT_TENANT);
            prefixes.push((Vec::new(), Arc::from(DEFAULT_TENANT)));
        }
        prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        let kv_rules: Vec<Rule> = rules
            .into_iter()
            .filter(|r| tenant::is_kv_rule(r, &names))
            .collect();
        let table = RuleTable::build(kv_rules.iter().cloned()).map_err(|e| e.to_string())?;

        // The stages KV uses: those its rules name and the caches its tenants own.
        let kinds: HashMap<&str, &StageConfig> = stages.iter().map(|s| (s.name(), s)).collect();
        let mut wanted: Vec<&StageConfig> = Vec::new();
        for s in &stages {
            let named = kv_rules
                .iter()
                .any(|r| r.detours.iter().any(|d| d.to.target == s.name()));
            let owned =
                matches!(s, StageConfig::Cache(_)) && s.owner().is_some_and(|o| names.contains(&o));
            if named && !matches!(s, StageConfig::Log(_)) || owned {
                wanted.push(s);
            }
        }
        let mut built = locked(&self.built);
        // The stages kept at another size are resized first (shrinks before growths), so
        // the stages built anew can take the space the shrinks free; a later failure puts
        // them back (lachesis_stages::stage::resizes: all or nothing).
        let resizes = wanted
            .iter()
            .filter_map(|s| {
                let live = built.stages.get(s.name())?;
                match (live.config.change_to(s), b_stage(live)) {
                    (StageChange::Resize { from, to }, Stage::Cache(store)) => Some(Resize {
                        stage: store,
                        from,
                        to,
                    }),
                    _ => None,
                }
            })
            .collect();
        let resized = resize_all(resizes, |store: &Arc<Store>, to| store.cache().resize(to))?;
        let mut next: HashMap<String, Stage> = HashMap::new();
        let mut compiled = HashMap::new();
        // New qos stages: their classes change in the scheduler only once nothing can refuse.
        let mut fresh = Vec::new();
        let built_all = (|| {
            for s in &wanted {
                let reuse = built.stages.get(s.name()).and_then(|live| {
                    matches!(
                        live.config.change_to(s),
                        StageChange::Keep | StageChange::Resize { .. }
                    )
                    .then(|| b_stage(live))
                });
                let st = match reuse {
                    Some(st) => st,
                    None => {
                        let st = self.build_stage(s)?;
                        if let Stage::RateLimit(q) = &st {
                            fresh.push(q.clone());
                        }
                        st
                    }
                };
                next.insert(s.name().to_string(), st);
            }
            for r in &kv_rules {
                compiled.insert(r.name.clone(), tenant::compile(r, &next, &kinds)?);
            }
            Ok::<(), String>(())
        })();
        if let Err(e) = built_all {
            resized.undo();
            return Err(e);
        }
        for q in &fresh {
            lachesis_stages::stage::Stage::put_in_force(&**q);
        }
        let mut defaults = HashMap::new();
        let mut dram = HashMap::new();
        for name in &names {
            let owned = stages
                .iter()
                .find(|s| matches!(s, StageConfig::Cache(_)) && s.owner() == Some(name));
            let store = match owned.and_then(|s| next.get(s.name())) {
                Some(Stage::Cache(store)) => store.clone(),
                _ => {
                    let s = built.dram.get(*name).cloned().unwrap_or_else(|| {
                        self.store(Arc::new(DramCache::new(self.config.default_dram_bytes)))
                    });
                    dram.insert(name.to_string(), s.clone());
                    s
                }
            };
            defaults.insert(
                Arc::<str>::from(*name),
                Route {
                    limit: None,
                    target: Target::Local(store),
                },
            );
        }
        let routing = Routing {
            prefixes,
            tenants: names
                .iter()
                .map(|n| (Arc::<str>::from(*n), self.counters_of(n)))
                .collect(),
            table,
            rules: compiled,
            defaults,
            ports: ports
                .into_iter()
                .map(|(p, t)| (p, Arc::<str>::from(t.as_str())))
                .collect(),
        };
        built.stages = wanted
            .iter()
            .map(|s| {
                (
                    s.name().to_string(),
                    BuiltStage {
                        config: (*s).clone(),
                        stage: next.remove(s.name()).expect("built above"),
                    },
                )
            })
            .collect();
        built.dram = dram;
        *self.routing.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(routing);
        Ok(())
    }

    /// Routes one key of a connection (`port_tenant`: the tenant of its port, if any).
    pub(crate) fn route(
        &self,
        port_tenant: Option<&Arc<str>>,
        key: &[u8],
        op: Op,
    ) -> Option<Routed> {
        let r = self.routing();
        let t = r.tenant_of(port_tenant, key)?;
        r.route(&t, key, op)
    }

    /// Every store of the tenant `tenant` (all when `None`), for `flush_all`.
    pub(crate) fn stores(&self, tenant: Option<&str>) -> Vec<Arc<Store>> {
        let built = locked(&self.built);
        let mut out: Vec<Arc<Store>> = Vec::new();
        for b in built.stages.values() {
            if let (Stage::Cache(s), true) =
                (&b.stage, tenant.is_none() || b.config.owner() == tenant)
            {
                out.push(s.clone());
            }
        }
        for (t, s) in &built.dram {
            if tenant.is_none() || tenant == Some(t.as_str()) {
                out.push(s.clone());
            }
        }
        out
    }

    /// What the IO scheduler dispatched of qos stage `stage`'s class (None: no such stage
    /// was ever built).
    pub fn qos_counters(&self, stage: &str) -> Option<lachesis_stages::qos::Counters> {
        self.qos
            .counters(&lachesis_stages::qos::ClassKey::Stage(stage.into()))
    }

    /// The parameters qos stage `stage`'s class runs with (None: none in force).
    pub fn qos_params(&self, stage: &str) -> Option<lachesis_stages::qos::mclock::Params> {
        self.qos
            .params(&lachesis_stages::qos::ClassKey::Stage(stage.into()))
    }

    pub fn stats(&self) -> KvStats {
        let routing = self.routing();
        let built = locked(&self.built);
        let mut out = KvStats {
            connections: self.conns.snapshot(),
            ..KvStats::default()
        };
        for (name, c) in &routing.tenants {
            out.tenants
                .insert(name.to_string(), TenantStats::from_counters(c));
        }
        let mut add = |owner: Option<&str>, name: &str, cs: CacheStats, placement| {
            if let Some(t) = owner.and_then(|o| out.tenants.get_mut(o)) {
                t.add_cache(&cs);
            }
            out.stages.insert(
                name.to_string(),
                StageStats {
                    owner: owner.map(str::to_string),
                    placement,
                    cache: cs,
                },
            );
        };
        for (name, b) in &built.stages {
            if let Stage::Cache(s) = &b.stage {
                let placement = match &b.config {
                    StageConfig::Cache(c) => c
                        .placement
                        .iter()
                        .map(|p| (part_name(p.part), p.handle))
                        .collect(),
                    _ => Vec::new(),
                };
                add(b.config.owner(), name, s.cache().stats(), placement);
            }
        }
        for (t, s) in &built.dram {
            add(Some(t), &format!("dram/{t}"), s.cache().stats(), Vec::new());
        }
        for pool in self.config.devices.pools() {
            let m = self
                .config
                .measured
                .iter()
                .find(|(n, _)| n == pool.name())
                .map(|(_, r)| r.stats());
            out.devices.insert(
                pool.name().to_string(),
                DeviceStats {
                    host_bytes: m.as_ref().map_or(0, |m| m.host_bytes_written),
                    media_bytes: m.as_ref().map(|m| m.media_bytes_written),
                    regions: pool.regions(),
                    free_regions: pool.free_regions(),
                    region_bytes: pool.region_bytes(),
                    handles: m.as_ref().map_or_else(Vec::new, |m| {
                        m.handles
                            .iter()
                            .filter(|h| h.host_bytes_written > 0)
                            .map(|h| HandleBytes {
                                handle: h.handle,
                                host_bytes: h.host_bytes_written,
                                media_bytes: h.media_bytes_written,
                                gc_bytes: h.gc_bytes_relocated,
                                deallocated_bytes: h.bytes_deallocated,
                                valid_bytes: h.valid_bytes,
                            })
                            .collect()
                    }),
                },
            );
        }
        out
    }

    /// Clean shutdown: each flash cache's index and regions go to the state dir (none: the
    /// caches are left as they are). Call it last: a saved cache serves nothing more (every
    /// read misses, every write is refused), so its index stays true to the device.
    pub fn shutdown(&self) -> Result<(), String> {
        let built = locked(&self.built);
        let flash: Vec<Arc<Store>> = built
            .stages
            .values()
            .filter_map(|b| match &b.stage {
                Stage::Cache(s) if s.cache().flash().is_some() => Some(s.clone()),
                _ => None,
            })
            .collect();
        crate::persist::save(
            self.config.state_dir.as_deref(),
            &flash,
            self.uniques.load(Relaxed),
        )
    }
}

fn b_stage(b: &BuiltStage) -> Stage {
    b.stage.clone()
}

/// An engine part's name as stage configurations spell it (`loc`, `klog`, `fwsets`, ...).
fn part_name(part: EnginePart) -> String {
    match serde_json::to_value(part) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{part:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_switch::{CacheConfig, Classifier, Eviction, WriteMode};

    fn tenant(name: &str) -> Tenant {
        Tenant {
            name: name.into(),
            classifiers: vec![Classifier {
                kind: ClassifierKind::KeyPrefix,
                value: format!("{name}:"),
            }],
        }
    }

    fn stage(owner: &str, mib: u64) -> StageConfig {
        StageConfig::Cache(CacheConfig {
            name: format!("kv/{owner}"),
            owner: Some(owner.into()),
            engine: CacheEngine::Hybrid,
            size_bytes: mib << 20,
            write_mode: WriteMode::Through,
            eviction: Eviction::Lru,
            max_dirty_bytes: 1 << 20,
            device: None,
            placement: vec![],
            next: None,
            serves: None,
            exclusive: false,
        })
    }

    fn installed(s: &Service) -> Vec<(String, u64)> {
        s.stats()
            .stages
            .into_iter()
            .filter(|(n, _)| n.starts_with("kv/"))
            .map(|(n, st)| (n, st.cache.flash_bytes))
            .collect()
    }

    /// Space moves from one tenant's flash cache to another's in one change (the shrink runs
    /// first), and a change the device cannot hold changes nothing.
    #[test]
    fn space_moves_between_flash_caches_in_one_change_and_a_refused_change_changes_nothing() {
        let (dev, _) = lachesis_stages::stage::space::testing::sim(16);
        let devices = Devices::new(vec![("flash0".into(), dev)]).unwrap();
        let pool = devices.get(None).unwrap();
        let s = Service::new(ServiceConfig::new(devices)).unwrap();
        let apply = |a: u64, b: u64| {
            s.apply(
                vec![tenant("a"), tenant("b")],
                vec![],
                vec![stage("a", a), stage("b", b)],
            )
        };
        apply(10, 4).unwrap();
        assert!(pool.free_regions() < 6, "{} free", pool.free_regions());
        apply(4, 10).unwrap();
        assert_eq!(
            installed(&s),
            [("kv/a".into(), 4 << 20), ("kv/b".into(), 10 << 20)]
        );
        let free = pool.free_regions();
        let e = apply(3, 64).unwrap_err();
        assert!(e.contains("is full"), "{e}");
        assert_eq!(
            installed(&s),
            [("kv/a".into(), 4 << 20), ("kv/b".into(), 10 << 20)]
        );
        assert_eq!(pool.free_regions(), free);
    }
}
