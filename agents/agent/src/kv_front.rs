//! The agent's key-value front end (`lachesis-agent run --kv-listen ADDR`): the memcached
//! protocol of `lachesis-kv`, served from the agent's desired state, its flash caches on the
//! agent's devices beside the FUSE switch's.
//!
//! Which of a desired state's tenants, rules and stages it serves is `install::plan`'s to say.
//!
//! The front end runs on a runtime of its own (a thread, two workers): the flash caches' IO
//! is synchronous, and a busy KV client must not hold up the agent's bus (heartbeats, acks).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use lachesis_kv::{KvObserver, KvOp, Service, ServiceConfig};
use lachesis_mrc::Op;
use lachesis_switch::{CacheConfig, EnginePart, StageConfig};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::install::plan::{KvShare, Plan};
use crate::install::Part;
use crate::metrics_engine::datapath_curves::DatapathCurves;
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
        // Accepting on this runtime, connections on two threads of their own.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the KV runtime: {e}"))?;
        let workers = lachesis_kv::server::Workers::start(2, "kv")
            .map_err(|e| format!("cannot start the KV threads: {e}"))?;
        let thread = std::thread::Builder::new()
            .name("kv-front".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut tasks = Vec::new();
                    for l in listeners {
                        let (svc, stopped) = (svc.clone(), stopped.clone());
                        let workers = workers.clone();
                        tasks.push(tokio::spawn(async move {
                            let l = tokio::net::TcpListener::from_std(l)?;
                            lachesis_kv::server::serve_listener(l, svc, stopped, workers).await
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
                // Connections still open end with the workers, dropped with this closure.
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

/// The KV front end as a part of the data path ([`crate::install`]): it runs its share of
/// each generation (`install::plan` says which), all or nothing, and reports the stages it
/// runs.
pub struct KvStages {
    service: Arc<Service>,
    installed: Mutex<KvShare>,
}

impl KvStages {
    pub fn new(service: Arc<Service>) -> Arc<Self> {
        Arc::new(KvStages {
            service,
            installed: Mutex::default(),
        })
    }

    fn installed(&self) -> MutexGuard<'_, KvShare> {
        self.installed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Each KV tenant's requests (gets read; sets and deletes write; the bytes it stored).
    pub fn kv_served(&self) -> Vec<(String, crate::metrics_engine::Served)> {
        self.service
            .stats()
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
        let stats = self.service.stats();
        let installed = self.installed();
        let mut out = Vec::new();
        for s in &installed.stages {
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
                StageConfig::RateLimit(_) => {
                    r.kind = StageKindReport::Ratelimit;
                    r.qos = self.service.qos_counters(s.name());
                }
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

impl Part for KvStages {
    fn name(&self) -> &'static str {
        "KV front end"
    }

    /// The front end's `apply` changes nothing on an error.
    fn commit(&self, plan: &Plan) -> Result<(), String> {
        let kv = &plan.kv;
        self.service
            .apply(kv.tenants.clone(), kv.rules.clone(), kv.stages.clone())
            .map_err(|e| e.to_string())?;
        *self.installed() = kv.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
