//! Routes: what a rule's detours compile to (waypoint stages, then the endpoint replicas or,
//! without any, the backing file), and the stage instances they share.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lachesis_switch::{Detour, DetourKind, DetourWhat, Rule};
use serde::{Deserialize, Serialize};

use crate::remote::{Client, RemoteTarget};
use crate::stage::{Stage, StageSpec};

/// A remote endpoint of a route: the target and the (shared) connection to its agent.
pub struct RemoteEndpoint {
    pub target: RemoteTarget,
    pub client: Arc<Client>,
}

impl RemoteEndpoint {
    /// The path on the remote agent of namespace path `ns_path`.
    pub fn path_of(&self, ns_path: &str) -> String {
        self.target.path_of(ns_path)
    }
}

/// How long a forwarded request may go unanswered before it fails with EIO (set once, from
/// the command line, before any route is built).
static REMOTE_TIMEOUT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(5000);

pub fn set_remote_timeout(t: std::time::Duration) {
    REMOTE_TIMEOUT_MS.store(t.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
}

/// The serialisable description of a route: the rule's tenant (stage instances are per
/// tenant and target) and its detours. Delegates persist this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteSpec {
    pub tenant: Option<String>,
    pub detours: Vec<Detour>,
}

impl RouteSpec {
    pub fn of_rule(rule: &Rule) -> Self {
        RouteSpec {
            tenant: rule.r#match.tenant.as_option().cloned(),
            detours: rule.detours.clone(),
        }
    }
}

pub struct Route {
    pub spec: RouteSpec,
    pub stages: Vec<Arc<dyn Stage>>,
    /// Endpoint directories, primary first; empty: the backing file.
    pub replicas: Vec<PathBuf>,
    /// An endpoint on another agent (then `replicas` is empty).
    pub remote: Option<Arc<RemoteEndpoint>>,
}

impl Route {
    /// No stage and no endpoint: the IO goes straight to the backing file.
    pub fn is_plain(&self) -> bool {
        self.stages.is_empty() && self.replicas.is_empty() && self.remote.is_none()
    }

    /// Whether the newest bytes of what this route writes may live off the backing file, so
    /// reads of the written ranges must follow (a delegate).
    pub fn needs_delegate(&self) -> bool {
        !self.replicas.is_empty()
            || self.remote.is_some()
            || self.stages.iter().any(|s| s.holds_data())
    }

    /// Where delegates of this route are journaled: with the forwarded data (a remote
    /// route's go to the state directory).
    pub fn journal_dir(&self) -> Option<&Path> {
        self.replicas.first().map(PathBuf::as_path)
    }
}

/// Stage instances by (tenant, target): two tenants' rules naming the same stage target get
/// two stages (isolation); rules without a tenant share one.
/// (rule tenant, stage target)
type StageKey = (Option<String>, String);

#[derive(Default)]
pub struct StageRegistry {
    stages: Mutex<HashMap<StageKey, Arc<dyn Stage>>>,
    /// One client (one connection) per remote agent address, shared by every route.
    clients: Mutex<HashMap<String, Arc<Client>>>,
}

impl StageRegistry {
    fn get(&self, tenant: &Option<String>, target: &str) -> Result<Arc<dyn Stage>, String> {
        let mut m = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        let k = (tenant.clone(), target.to_string());
        if let Some(s) = m.get(&k) {
            return Ok(s.clone());
        }
        let s = StageSpec::parse(target)?.build()?;
        m.insert(k, s.clone());
        Ok(s)
    }

    fn client(&self, addr: &str) -> Arc<Client> {
        let mut m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(addr.to_string())
            .or_insert_with(|| {
                let ms = REMOTE_TIMEOUT_MS.load(std::sync::atomic::Ordering::Relaxed);
                Arc::new(Client::new(addr, std::time::Duration::from_millis(ms)))
            })
            .clone()
    }

    /// Every stage instance with its tenant and target.
    pub fn all(&self) -> Vec<(Option<String>, String, Arc<dyn Stage>)> {
        let m = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .map(|((t, n), s)| (t.clone(), n.clone(), s.clone()))
            .collect()
    }

    /// Compiles a route; stages are created on first use.
    pub fn build(&self, spec: RouteSpec) -> Result<Route, String> {
        let mut stages = Vec::new();
        let mut replicas = Vec::new();
        let mut remotes = Vec::new();
        for d in &spec.detours {
            if d.what == DetourWhat::Header {
                // A header copy does not change where the data goes; the controller
                // detour is not implemented yet, so copies are dropped.
                continue;
            }
            match d.to.kind {
                DetourKind::Stage => stages.push(self.get(&spec.tenant, &d.to.target)?),
                DetourKind::File => match RemoteTarget::parse(&d.to.target)? {
                    Some(target) => remotes.push(Arc::new(RemoteEndpoint {
                        client: self.client(&target.addr),
                        target,
                    })),
                    None => replicas.push(endpoint_dir(&d.to.target)?),
                },
                DetourKind::Controller => {
                    return Err(format!(
                        "detour of the IO to the controller ({}) is not supported yet",
                        d.to.target
                    ))
                }
            }
        }
        if remotes.len() > 1 || (!remotes.is_empty() && !replicas.is_empty()) {
            return Err(
                "a route with a remote endpoint (tcp://) must have no other endpoint: scatter over remote agents is not supported yet"
                    .into(),
            );
        }
        Ok(Route {
            spec,
            stages,
            replicas,
            remote: remotes.pop(),
        })
    }
}

/// An endpoint target: an absolute local directory whose tree mirrors the namespace.
fn endpoint_dir(target: &str) -> Result<PathBuf, String> {
    let p = Path::new(target);
    if !p.is_absolute() {
        return Err(format!(
            "endpoint {target:?}: expected an absolute local directory or tcp://HOST:PORT/dir"
        ));
    }
    if p.exists() && !p.is_dir() {
        return Err(format!(
            "endpoint {target:?}: exists and is not a directory"
        ));
    }
    std::fs::create_dir_all(p).map_err(|e| format!("endpoint {target:?}: {e}"))?;
    Ok(p.to_path_buf())
}

/// Path of `ns_path` (absolute in the namespace) under `dir`.
pub fn under(dir: &Path, ns_path: &str) -> PathBuf {
    dir.join(ns_path.trim_start_matches('/'))
}
