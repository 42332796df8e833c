//! Routes: what a rule's detours compile to (waypoint stages, then the endpoint replicas or,
//! without any, the backing file), and the stage instances they share.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lachesis_switch::{Detour, DetourKind, DetourWhat, Rule, StageConfig};
use serde::{Deserialize, Serialize};

use crate::confine::Roots;
use crate::header_log::HeaderLog;
use crate::remote::{Client, RemoteTarget};
use crate::stage::cache::CacheStage;
use crate::stage::Stage;

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

/// How the switch reaches remote endpoints: how long a forwarded request may go unanswered
/// before it fails with EIO, and the key connections authenticate with (none: not
/// authenticated). Given by the command line, carried by [`crate::SwitchOptions`].
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    pub timeout: std::time::Duration,
    pub key: Option<crate::remote::auth::Key>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            timeout: std::time::Duration::from_secs(5),
            key: None,
        }
    }
}

/// The serialisable description of a route: the rule's tenant and its detours (stages by
/// name). Delegates persist this.
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

/// One replica of a route's write set.
pub enum Endpoint {
    /// A local directory mirroring the namespace.
    Local(PathBuf),
    /// A directory on another agent.
    Remote(Arc<RemoteEndpoint>),
}

pub struct Route {
    pub spec: RouteSpec,
    pub stages: Vec<Arc<dyn Stage>>,
    /// The local endpoint directories, in detour order.
    pub replicas: Vec<PathBuf>,
    /// The endpoints on other agents, in detour order.
    pub remotes: Vec<Arc<RemoteEndpoint>>,
    /// Every endpoint (local and remote) in detour order, the primary first; empty: the
    /// backing file.
    pub endpoints: Vec<Endpoint>,
    /// The controller application that must let each IO go on first (a `header ->
    /// controller` detour listed first): see `crate::detour`.
    pub ask: Option<String>,
    /// Controller applications sent a copy of each IO's header (`header -> controller`
    /// detours after the first), not waited for.
    pub copies: Vec<String>,
    /// Files each matching IO's header is appended to (`header -> file` detours).
    pub header_logs: Vec<Arc<HeaderLog>>,
}

impl Route {
    /// No stage and no endpoint: the IO goes straight to the backing file.
    pub fn is_plain(&self) -> bool {
        self.stages.is_empty() && self.endpoints.is_empty()
    }

    /// Whether a stage of this route may hold bytes its next stages do not have yet.
    pub fn holds_data(&self) -> bool {
        self.stages.iter().any(|s| s.holds_data())
    }

    /// Whether the newest bytes of what this route writes may live off the backing file, so
    /// reads of the written ranges must follow (a delegate).
    pub fn needs_delegate(&self) -> bool {
        !self.endpoints.is_empty() || self.stages.iter().any(|s| s.holds_data())
    }

    /// Where delegates of this route are journaled: with the forwarded data, in the first
    /// local endpoint (a route with only remote endpoints journals in the state directory).
    pub fn journal_dir(&self) -> Option<&Path> {
        self.replicas.first().map(PathBuf::as_path)
    }
}

/// A declared stage, built: the config it was built from and the instance every route
/// naming it shares.
pub struct LiveStage {
    pub config: StageConfig,
    pub stage: Arc<dyn Stage>,
    /// The same instance as a cache stage (resizes, stats), when it is one.
    pub cache: Option<Arc<CacheStage>>,
}

/// The declared stages by name.
pub type StageSet = HashMap<String, Arc<LiveStage>>;

/// The stage instances in force (one per declared name: a stage several tenants' rules
/// name is one instance; isolation is by declaring separate stages), and the other things
/// routes share: connections to remote agents and header logs.
#[derive(Default)]
pub struct StageRegistry {
    stages: Mutex<Arc<StageSet>>,
    /// One client (one connection) per remote agent address, shared by every route.
    clients: Mutex<HashMap<String, Arc<Client>>>,
    /// One header log per file, shared by every rule naming it, so its lines never interleave.
    header_logs: Mutex<HashMap<PathBuf, Arc<HeaderLog>>>,
    /// Where endpoints and header logs may be.
    roots: Roots,
    /// How remote endpoints are reached.
    remote: RemoteOptions,
    /// The IO scheduler every qos stage of this switch puts its tenant's IO through: one per
    /// switch, so tenants' IO is ordered against each other's.
    qos: Arc<lachesis_stages::qos::Gate>,
}

/// The stages an IO detour to stage `name` runs through: the stage, then, for a cache stage
/// with `next`, the next one and so on.
fn chain_of(set: &StageSet, name: &str) -> Result<Vec<Arc<dyn Stage>>, String> {
    let mut out = Vec::new();
    let mut at = Some(name.to_string());
    while let Some(n) = at {
        let live = set.get(&n).ok_or_else(|| {
            let mut known: Vec<&str> = set.keys().map(String::as_str).collect();
            known.sort_unstable();
            format!(
                "stage {n:?} is not declared (declared stages: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )
        })?;
        out.push(live.stage.clone());
        at = match &live.config {
            StageConfig::Cache(c) => c.next.clone(),
            _ => None,
        };
    }
    Ok(out)
}

impl StageRegistry {
    /// A registry whose endpoints and header logs must lie under `roots`, its remote
    /// endpoints reached as `remote` says.
    pub fn confined(roots: Roots, remote: RemoteOptions) -> Self {
        StageRegistry {
            roots,
            remote,
            ..Default::default()
        }
    }

    pub fn roots(&self) -> &Roots {
        &self.roots
    }

    /// The switch's IO scheduler (qos stages, the declared-IO dispatcher's reads).
    pub fn qos(&self) -> &Arc<lachesis_stages::qos::Gate> {
        &self.qos
    }

    /// The stages in force.
    pub fn current(&self) -> Arc<StageSet> {
        self.stages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `set` in force (the switch built it and compiled its rules against it).
    pub fn replace(&self, set: Arc<StageSet>) {
        *self.stages.lock().unwrap_or_else(|e| e.into_inner()) = set;
    }

    /// Every connection to a remote agent made so far.
    pub fn clients(&self) -> Vec<Arc<Client>> {
        let m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        m.values().cloned().collect()
    }

    /// The one connection to the agent at `addr` (HOST:PORT), made on first use.
    pub fn client(&self, addr: &str) -> Arc<Client> {
        let mut m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(addr.to_string())
            .or_insert_with(|| {
                Arc::new(Client::with_key(
                    addr,
                    self.remote.timeout,
                    self.remote.key.clone(),
                ))
            })
            .clone()
    }

    fn header_log(&self, target: &str) -> Result<Arc<HeaderLog>, String> {
        let mut m = self.header_logs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = m.get(Path::new(target)) {
            return Ok(l.clone());
        }
        let l = Arc::new(HeaderLog::open(target, &self.roots)?);
        m.insert(l.path().to_path_buf(), l.clone());
        Ok(l)
    }

    /// Every header log with its file.
    pub fn header_logs(&self) -> Vec<Arc<HeaderLog>> {
        let m = self.header_logs.lock().unwrap_or_else(|e| e.into_inner());
        m.values().cloned().collect()
    }

    /// Compiles a route against the stages in force; a stage it names must be declared.
    pub fn build(&self, spec: RouteSpec) -> Result<Route, String> {
        self.build_in(spec, &self.current(), false)
    }

    /// Compiles a route a delegate journal or an earlier table recorded: a stage no longer
    /// declared is left out (its data was written back before it went, or is gone with
    /// it), with a warning.
    pub fn build_recovered(&self, spec: RouteSpec) -> Result<Route, String> {
        self.build_in(spec, &self.current(), true)
    }

    /// Compiles a route against `stages`; `lenient`: leave out stages not declared there.
    pub fn build_in(
        &self,
        spec: RouteSpec,
        set: &StageSet,
        lenient: bool,
    ) -> Result<Route, String> {
        let mut stages: Vec<Arc<dyn Stage>> = Vec::new();
        let mut endpoints = Vec::new();
        let mut ask = None;
        let mut copies = Vec::new();
        let mut header_logs = Vec::new();
        for (i, d) in spec.detours.iter().enumerate() {
            if d.what == DetourWhat::Header {
                // A header does not change where the data goes. To the controller: first
                // in the list, the IO waits for its verdict; later, a copy. To a file: a
                // line appended per IO.
                match d.to.kind {
                    DetourKind::Controller if i == 0 => ask = Some(d.to.target.clone()),
                    DetourKind::Controller => copies.push(d.to.target.clone()),
                    DetourKind::File => header_logs.push(
                        self.header_log(&d.to.target)
                            .map_err(|e| format!("detours[{i}]: {e}"))?,
                    ),
                    // Refused rather than ignored: a rule must do what it says.
                    DetourKind::Stage => {
                        return Err(format!(
                            "detours[{i}]: a header cannot go to stage {:?}: stages take IO (what: io); send headers to a file or the controller",
                            d.to.target
                        ))
                    }
                }
                continue;
            }
            match d.to.kind {
                DetourKind::Stage => match chain_of(set, &d.to.target) {
                    Ok(chain) => {
                        for s in chain {
                            // One stage twice in a route would hold its own locks twice.
                            if stages.iter().any(|x| Arc::ptr_eq(x, &s)) {
                                return Err(format!(
                                    "detours[{i}]: stage {:?} (or a stage its next chain reaches) is already on this route",
                                    d.to.target
                                ));
                            }
                            stages.push(s);
                        }
                    }
                    Err(e) if lenient => {
                        tracing::warn!("route of tenant {:?}: {e}; left out", spec.tenant);
                    }
                    Err(e) => return Err(format!("detours[{i}]: {e}")),
                },
                DetourKind::File => endpoints.push(match RemoteTarget::parse(&d.to.target)? {
                    Some(target) => Endpoint::Remote(Arc::new(RemoteEndpoint {
                        client: self.client(&target.addr),
                        target,
                    })),
                    None => {
                        self.roots
                            .check("endpoint", &d.to.target)
                            .map_err(|e| format!("detours[{i}]: {e}"))?;
                        Endpoint::Local(endpoint_dir(&d.to.target)?)
                    }
                }),
                DetourKind::Controller => {
                    return Err(format!(
                        "detour of the IO (data) to the controller ({}) is not supported: send it the header (what: header)",
                        d.to.target
                    ))
                }
            }
        }
        let (replicas, remotes) = split_endpoints(&endpoints)?;
        Ok(Route {
            spec,
            stages,
            replicas,
            remotes,
            endpoints,
            ask,
            copies,
            header_logs,
        })
    }
}

/// The local directories and the remote endpoints of a write set (each in detour order);
/// a copy named twice is refused.
fn split_endpoints(
    endpoints: &[Endpoint],
) -> Result<(Vec<PathBuf>, Vec<Arc<RemoteEndpoint>>), String> {
    let (mut locals, mut remotes) = (Vec::new(), Vec::<Arc<RemoteEndpoint>>::new());
    for e in endpoints {
        match e {
            Endpoint::Local(d) if locals.contains(d) => {
                return Err(format!("endpoint {} is named twice", d.display()))
            }
            Endpoint::Local(d) => locals.push(d.clone()),
            Endpoint::Remote(r) if remotes.iter().any(|x| x.target == r.target) => {
                return Err(format!(
                    "endpoint tcp://{}/{} is named twice",
                    r.target.addr, r.target.dir
                ))
            }
            Endpoint::Remote(r) => remotes.push(r.clone()),
        }
    }
    Ok((locals, remotes))
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
