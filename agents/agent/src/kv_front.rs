//! The agent's key-value front end (`lachesis-agent run --kv-listen ADDR`): the memcached
//! protocol of `lachesis-kv`, served from the agent's desired state, its flash caches on the
//! agent's devices beside the FUSE switch's.
//!
//! Which data path serves what: a tenant with a `key_prefix` classifier (or bound to a port
//! with `--kv-tenant-port`) is the KV front end's; so is a rule that can match its keys (a
//! `key_prefix`, or one of its tenants, and no `path_prefix`), and a stage such a rule names
//! or such a tenant owns. The FUSE switch gets the rest. One stage is served by one data
//! path: a file rule naming a KV stage refuses the generation. Without `--kv-listen` the FUSE
//! switch gets everything, as before (key-prefix rules never match a file).
//!
//! The front end runs on a runtime of its own (a thread, two workers): the flash caches' IO
//! is synchronous, and a busy KV client must not hold up the agent's bus (heartbeats, acks).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use lachesis_kv::tenant::{is_kv_rule, kv_tenants};
use lachesis_kv::{KvObserver, KvOp, Service, ServiceConfig};
use lachesis_mrc::Op;
use lachesis_switch::{CacheConfig, DetourKind, EnginePart, Rule, StageConfig, Tenant};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::datapath::Datapath;
use crate::metrics_engine::datapath_curves::DatapathCurves;
use crate::runner::Installer;
use crate::state::Applied;
use crate::telemetry::{FrontEnd, PartName, PartTelemetry, StageKindReport, StageTelemetry};

/// `TENANT=PORT`: connections on PORT are TENANT's, whatever their keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvTenantPort {
    pub tenant: String,
    pub port: u16,
}

impl FromStr for KvTenantPort {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (t, p) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected TENANT=PORT"))?;
        if !lachesis_switch::names::is_valid_name(t) {
            return Err(format!("{s:?}: {}", lachesis_switch::names::name_error(t)));
        }
        match p.parse::<u16>() {
            Ok(port) if port > 0 => Ok(KvTenantPort {
                tenant: t.to_string(),
                port,
            }),
            _ => Err(format!("{s:?}: port {p:?} is not a port number (1-65535)")),
        }
    }
}

/// The data path's curves hear every KV request. A get that hits and a set are references
/// to the object at its size; a get that misses is not (its size is unknown, and the set a
/// look-aside client sends next brings the object in: that reference counts the miss).
impl KvObserver for DatapathCurves {
    fn request(&self, tenant: &str, key: &[u8], object_bytes: u64, op: KvOp, hit: bool) {
        match op {
            KvOp::Get if hit => self.record_object(tenant, key, object_bytes, Op::Read),
            KvOp::Set => self.record_object(tenant, key, object_bytes, Op::Write),
            _ => {}
        }
    }
}

/// The running front end: its service, listeners and the thread serving them.
pub struct KvFront {
    service: Arc<Service>,
    addrs: Vec<SocketAddr>,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl KvFront {
    /// Binds `listen` and every tenant port (an address in use is an error naming it), then
    /// serves them. `curves` hears every request.
    pub fn start(
        listen: SocketAddr,
        ports: &[KvTenantPort],
        config: ServiceConfig,
        curves: Arc<DatapathCurves>,
    ) -> Result<KvFront, String> {
        let mut listeners = Vec::new();
        let mut seen = HashMap::new();
        for (addr, tenant) in std::iter::once((listen, None)).chain(
            ports
                .iter()
                .map(|p| (SocketAddr::new(listen.ip(), p.port), Some(&p.tenant))),
        ) {
            if let Some(other) = seen.insert(addr.port(), tenant) {
                if addr.port() != 0 || other.is_some() {
                    return Err(format!("port {} is given twice", addr.port()));
                }
            }
            let l = std::net::TcpListener::bind(addr).map_err(|e| format!("{addr}: {e}"))?;
            l.set_nonblocking(true)
                .map_err(|e| format!("{addr}: {e}"))?;
            listeners.push(l);
        }
        let service = Arc::new(Service::new(config)?);
        for p in ports {
            service.bind_port(p.port, &p.tenant);
        }
        service.set_observer(curves);
        let addrs: Vec<SocketAddr> = listeners
            .iter()
            .map(|l| l.local_addr().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let (stop, stopped) = watch::channel(false);
        let svc = service.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kv")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the KV runtime: {e}"))?;
        let thread = std::thread::Builder::new()
            .name("kv-front".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut tasks = Vec::new();
                    for l in listeners {
                        let (svc, stopped) = (svc.clone(), stopped.clone());
                        tasks.push(tokio::spawn(async move {
                            let l = tokio::net::TcpListener::from_std(l)?;
                            lachesis_kv::server::serve_listener(l, svc, stopped).await
                        }));
                    }
                    for t in tasks {
                        match t.await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => error!(error = %e, "KV listener failed"),
                            Err(e) => error!(error = %e, "KV listener panicked"),
                        }
                    }
                });
                // Connections still open end with the runtime.
                runtime.shutdown_background();
            })
            .map_err(|e| format!("cannot start the KV thread: {e}"))?;
        info!(listen = %addrs[0], tenant_ports = ports.len(), "KV front end listening");
        Ok(KvFront {
            service,
            addrs,
            stop,
            thread: Some(thread),
        })
    }

    pub fn service(&self) -> &Arc<Service> {
        &self.service
    }

    /// Where it listens: the `--kv-listen` address first, then the tenant ports.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops accepting, ends the connections, and saves what a warm restart needs.
    pub fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        match self.service.shutdown() {
            Ok(()) => info!("KV front end stopped; its caches are saved for a warm restart"),
            Err(e) => warn!(error = %e, "KV front end stopped; its caches will start cold"),
        }
    }
}

/// The KV part of a desired state: its tenants' names, its rules and the stages they use.
struct KvPart {
    rules: Vec<String>,
    stages: Vec<String>,
}

fn kv_part(
    tenants: &[Tenant],
    rules: &[Rule],
    stages: &[StageConfig],
    ports: &HashMap<u16, String>,
) -> KvPart {
    let names: Vec<&str> = kv_tenants(tenants, ports)
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let kv_rules: Vec<&Rule> = rules.iter().filter(|r| is_kv_rule(r, &names)).collect();
    let stages = stages
        .iter()
        .filter(|s| {
            let named = kv_rules.iter().any(|r| {
                r.detours
                    .iter()
                    .any(|d| d.to.kind == DetourKind::Stage && d.to.target == s.name())
            });
            let owned =
                matches!(s, StageConfig::Cache(_)) && s.owner().is_some_and(|o| names.contains(&o));
            named || owned
        })
        .map(|s| s.name().to_string())
        .collect();
    KvPart {
        rules: kv_rules.iter().map(|r| r.name.clone()).collect(),
        stages,
    }
}

/// The FUSE switch's part: every rule and stage the KV front end does not serve. A file rule
/// naming a KV stage is an error naming both.
fn fs_part(
    rules: &[Rule],
    stages: &[StageConfig],
    kv: &KvPart,
) -> Result<(Vec<Rule>, Vec<StageConfig>), String> {
    let fs_rules: Vec<Rule> = rules
        .iter()
        .filter(|r| !kv.rules.contains(&r.name))
        .cloned()
        .collect();
    for r in &fs_rules {
        if let Some(d) = r
            .detours
            .iter()
            .find(|d| d.to.kind == DetourKind::Stage && kv.stages.contains(&d.to.target))
        {
            return Err(format!(
                "rule {:?} sends file IO to stage {:?}, which serves key-value requests: one stage is \
                 served by one data path",
                r.name, d.to.target
            ));
        }
    }
    let fs_stages = stages
        .iter()
        .filter(|s| !kv.stages.iter().any(|k| k == s.name()))
        .cloned()
        .collect();
    Ok((fs_rules, fs_stages))
}

/// What the KV front end was last given, to put back when the FUSE switch refuses a
/// generation the front end took.
#[derive(Clone, Default)]
struct KvApplied {
    tenants: Vec<Tenant>,
    rules: Vec<Rule>,
    stages: Vec<StageConfig>,
}

/// The agent's data paths as one installer: the KV front end and the FUSE switch, each
/// given its part of every applied desired state, all or nothing.
pub struct DataPaths {
    fs: Option<Arc<Datapath>>,
    kv: Option<Arc<Service>>,
    ports: HashMap<u16, String>,
    applied: Mutex<KvApplied>,
}

impl DataPaths {
    pub fn new(
        fs: Option<Arc<Datapath>>,
        kv: Option<Arc<Service>>,
        ports: &[KvTenantPort],
    ) -> Arc<Self> {
        Arc::new(DataPaths {
            fs,
            kv,
            ports: ports.iter().map(|p| (p.port, p.tenant.clone())).collect(),
            applied: Mutex::default(),
        })
    }

    fn applied(&self) -> MutexGuard<'_, KvApplied> {
        self.applied.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs `tenants`, `rules` and `stages`: the KV front end's part first (it changes
    /// nothing on an error), then the FUSE switch's; if the switch refuses, the front end
    /// gets its previous state back.
    pub fn install(
        &self,
        tenants: &[Tenant],
        rules: Vec<Rule>,
        stages: &[StageConfig],
    ) -> Result<(), String> {
        let Some(kv) = &self.kv else {
            return match &self.fs {
                Some(fs) => fs.install(rules, stages, tenants),
                None => Ok(()),
            };
        };
        let part = kv_part(tenants, &rules, stages, &self.ports);
        let (fs_rules, fs_stages) = fs_part(&rules, stages, &part)?;
        let mut applied = self.applied();
        // A tenant port is bound from the start, before desired state declares its tenant:
        // until it does, the port's keys are the tenant's in a DRAM cache of its own.
        let mut kv_tenants = tenants.to_vec();
        for t in self.ports.values() {
            if !kv_tenants.iter().any(|k| &k.name == t) {
                kv_tenants.push(Tenant {
                    name: t.clone(),
                    classifiers: Vec::new(),
                });
            }
        }
        let next = KvApplied {
            tenants: kv_tenants,
            rules: rules
                .iter()
                .filter(|r| part.rules.contains(&r.name))
                .cloned()
                .collect(),
            stages: stages
                .iter()
                .filter(|s| part.stages.iter().any(|k| k == s.name()))
                .cloned()
                .collect(),
        };
        kv.apply(
            next.tenants.clone(),
            next.rules.clone(),
            next.stages.clone(),
        )
        .map_err(|e| format!("KV front end: {e}"))?;
        if let Some(fs) = &self.fs {
            if let Err(e) = fs.install(fs_rules, &fs_stages, tenants) {
                let prev = applied.clone();
                if let Err(back) = kv.apply(prev.tenants, prev.rules, prev.stages) {
                    error!(error = %back, "KV front end: its previous state could not be put back");
                }
                return Err(e);
            }
        }
        *applied = next;
        Ok(())
    }

    /// Each KV tenant's requests (gets read; sets and deletes write; the bytes it stored).
    pub fn kv_served(&self) -> Vec<(String, crate::metrics_engine::Served)> {
        let Some(kv) = &self.kv else {
            return Vec::new();
        };
        kv.stats()
            .tenants
            .into_iter()
            .map(|(name, t)| {
                let served = crate::metrics_engine::Served {
                    ops_read: t.gets,
                    ops_written: t.sets + t.deletes,
                    bytes_read: 0,
                    bytes_written: t.bytes_written,
                };
                (name, served)
            })
            .collect()
    }

    /// The KV front end's stages and their counters, in telemetry's form (the FUSE switch's
    /// come from [`Datapath::stage_reports`]).
    pub fn kv_stage_reports(&self) -> Vec<StageTelemetry> {
        let Some(kv) = &self.kv else {
            return Vec::new();
        };
        let stats = kv.stats();
        let applied = self.applied();
        let mut out = Vec::new();
        for s in &applied.stages {
            let mut r = StageTelemetry {
                name: s.name().to_string(),
                owner: s.owner().map(str::to_string),
                front_end: Some(FrontEnd::Kv),
                ..Default::default()
            };
            match s {
                StageConfig::Cache(c) => {
                    r.kind = StageKindReport::Cache;
                    r.engine = Some(c.engine);
                    r.size_bytes = Some(c.size_bytes);
                    if let Some(st) = stats.stages.get(s.name()) {
                        let t = &st.cache.total;
                        let on_flash = c.engine.on_flash();
                        r.installed_bytes = Some(if on_flash {
                            st.cache.flash_bytes
                        } else {
                            st.cache.dram_bytes
                        });
                        r.hits = Some(t.hits);
                        r.misses = Some(t.gets.saturating_sub(t.hits));
                        r.bytes_written = Some(t.app_bytes_written);
                        r.evictions = Some(t.evictions);
                        if on_flash {
                            r.app_bytes_written = Some(t.app_bytes_written);
                            r.flash_bytes_written = Some(t.flash_bytes_written);
                            r.parts = Some(
                                st.cache
                                    .parts
                                    .iter()
                                    .filter_map(|(name, p)| part_report(c, name, p))
                                    .collect(),
                            );
                        }
                    }
                }
                StageConfig::RateLimit(_) => r.kind = StageKindReport::Ratelimit,
                StageConfig::Log(_) => r.kind = StageKindReport::Log,
            }
            out.push(r);
        }
        out
    }
}

/// A hybrid engine's part with the handles the stage's placement gives it (0: the device's
/// default handle).
fn part_report(
    c: &CacheConfig,
    name: &str,
    p: &lachesis_kv::cache::PartStats,
) -> Option<PartTelemetry> {
    let (part, handles) = match name {
        "kangaroo" => (
            PartName::Kangaroo,
            vec![c.handle(EnginePart::KLog), c.handle(EnginePart::KSet)],
        ),
        "fairywren" => (
            PartName::Fairywren,
            vec![
                c.handle(EnginePart::FwLog),
                c.handle(EnginePart::FwSets),
                c.handle(EnginePart::FwCold),
            ],
        ),
        "loc" => (PartName::Loc, vec![c.handle(EnginePart::Loc)]),
        _ => return None,
    };
    Some(PartTelemetry {
        part,
        handles,
        objects: p.engine.objects,
        gets: p.engine.gets,
        hits: p.engine.hits,
        flash_bytes_written: p.engine.flash_bytes_written,
        dram_bytes: Some(p.dram_bytes),
    })
}

impl Installer for DataPaths {
    fn install(&self, applied: &Applied) -> Result<(), String> {
        DataPaths::install(
            self,
            &applied.tenants,
            applied.table.rules().cloned().collect(),
            &applied.stages,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_switch::{Classifier, ClassifierKind, Detour, DetourWhat, Match};

    fn tenant(name: &str, kind: ClassifierKind, value: &str) -> Tenant {
        Tenant {
            name: name.into(),
            classifiers: vec![Classifier {
                kind,
                value: value.into(),
            }],
        }
    }

    fn to_stage(name: &str, m: Match, stage: &str) -> Rule {
        Rule::new(
            name,
            10,
            m,
            vec![Detour::new(DetourWhat::Io, DetourKind::Stage, stage)],
        )
    }

    fn stages(names: &[(&str, &str)]) -> Vec<StageConfig> {
        names
            .iter()
            .map(|(n, owner)| {
                serde_json::from_value(serde_json::json!({
                    "kind": "ratelimit", "name": n, "owner": owner, "iops": 10, "bytes_per_s": null
                }))
                .unwrap()
            })
            .collect()
    }

    #[test]
    fn key_prefix_tenants_rules_and_their_stages_are_the_kv_front_ends() {
        let tenants = vec![
            tenant("web", ClassifierKind::PathPrefix, "/data/web"),
            tenant("sessions", ClassifierKind::KeyPrefix, "sess:"),
        ];
        let rules = vec![
            to_stage("web-limited", Match::any().tenant("web"), "qos/web"),
            to_stage("sess-limited", Match::any().tenant("sessions"), "qos/sess"),
            to_stage("bulk", Match::any().key_prefix("bulk:"), "qos/bulk"),
        ];
        let st = stages(&[
            ("qos/web", "web"),
            ("qos/sess", "sessions"),
            ("qos/bulk", "sessions"),
        ]);
        let part = kv_part(&tenants, &rules, &st, &HashMap::new());
        assert_eq!(part.rules, ["sess-limited", "bulk"]);
        assert_eq!(part.stages, ["qos/sess", "qos/bulk"]);
        let (fs_rules, fs_stages) = fs_part(&rules, &st, &part).unwrap();
        assert_eq!(
            fs_rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["web-limited"]
        );
        assert_eq!(
            fs_stages.iter().map(|s| s.name()).collect::<Vec<_>>(),
            ["qos/web"]
        );

        // A tenant bound to a port is the front end's whatever its classifiers.
        let ports = HashMap::from([(11400, "web".to_string())]);
        assert_eq!(
            kv_part(&tenants, &rules, &st, &ports).rules,
            ["web-limited", "sess-limited", "bulk"]
        );
    }

    #[test]
    fn a_file_rule_naming_a_kv_stage_is_refused_naming_both() {
        let tenants = vec![
            tenant("web", ClassifierKind::PathPrefix, "/data/web"),
            tenant("sessions", ClassifierKind::KeyPrefix, "sess:"),
        ];
        let rules = vec![
            to_stage(
                "sess-limited",
                Match::any().tenant("sessions"),
                "qos/shared",
            ),
            to_stage("web-limited", Match::any().tenant("web"), "qos/shared"),
        ];
        let st = stages(&[("qos/shared", "sessions")]);
        let e = fs_part(
            &rules,
            &st,
            &kv_part(&tenants, &rules, &st, &HashMap::new()),
        )
        .unwrap_err();
        assert!(
            e.contains("\"web-limited\"") && e.contains("\"qos/shared\""),
            "{e}"
        );
    }

    #[test]
    fn tenant_port_names_the_bad_part() {
        assert_eq!(
            "cache=11400".parse::<KvTenantPort>().unwrap(),
            KvTenantPort {
                tenant: "cache".into(),
                port: 11400
            }
        );
        assert!("cache"
            .parse::<KvTenantPort>()
            .unwrap_err()
            .contains("TENANT=PORT"));
        assert!("cache=0"
            .parse::<KvTenantPort>()
            .unwrap_err()
            .contains("not a port"));
        assert!("cache=70000"
            .parse::<KvTenantPort>()
            .unwrap_err()
            .contains("not a port"));
        assert!("Bad Name=1".parse::<KvTenantPort>().is_err());
    }
}
