//! The routing state one `apply` builds: which tenant a key or port belongs to, which rule a
//! key matches, and what that rule's detours compile to for KV (a cache stage's store, a rate
//! limit, a remote front end). Built whole and swapped in, so bad input changes nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use lachesis_stages::remote::RemoteTarget;
use lachesis_stages::stage::qos::QosStage;
use lachesis_switch::{
    ClassifierKind, DetourKind, IoHeader, Op, Rule, RuleTable, StageConfig, Tenant,
};

use crate::store::Store;

/// Counters of one tenant, kept across applies.
#[derive(Default)]
pub struct Counters {
    pub gets: AtomicU64,
    pub hits: AtomicU64,
    pub sets: AtomicU64,
    pub deletes: AtomicU64,
    pub rate_limited: AtomicU64,
    pub forwarded: AtomicU64,
}

/// Where a key's command goes.
#[derive(Clone)]
pub enum Target {
    Local(Arc<Store>),
    /// Another agent's KV front end, `host:port`.
    Remote(String),
}

/// What a rule (or a tenant's default) compiles to.
#[derive(Clone)]
pub struct Route {
    /// The qos stage the route's requests wait at (its tenant's scheduler class).
    pub limit: Option<Arc<QosStage>>,
    pub target: Target,
}

/// A key's tenant and route.
#[derive(Clone)]
pub struct Routed {
    pub tenant: Arc<str>,
    pub counters: Arc<Counters>,
    pub route: Route,
}

/// A built stage the KV side uses.
#[derive(Clone)]
pub enum Stage {
    Cache(Arc<Store>),
    RateLimit(Arc<QosStage>),
}

pub struct Routing {
    /// (prefix, tenant), longest prefix first.
    pub prefixes: Vec<(Vec<u8>, Arc<str>)>,
    pub tenants: BTreeMap<Arc<str>, Arc<Counters>>,
    pub table: RuleTable,
    pub rules: HashMap<String, Route>,
    /// Each tenant's route when no rule matches: its own cache stage, or its DRAM cache.
    pub defaults: HashMap<Arc<str>, Route>,
    pub ports: HashMap<u16, Arc<str>>,
}

/// The op a rule's `ops` sees for a command kind.
pub fn op_of(write: bool, delete: bool) -> Op {
    match (write, delete) {
        (_, true) => Op::Delete,
        (true, _) => Op::Write,
        _ => Op::Read,
    }
}

/// The classifier kinds the KV front end decides (the agent registers them). Its other
/// tenants (path, uid, cgroup, process) are about file IO, which never reaches it: they are
/// the FUSE switch's to classify, or the controller's to refuse.
pub const CLASSIFIER_KINDS: [ClassifierKind; 1] = [ClassifierKind::KeyPrefix];

/// The operations of the requests the KV front end routes: gets are reads, sets (and the
/// other storage commands) writes, deletes deletes; nothing creates. The agent registers them.
pub const OPS: [Op; 3] = [Op::Read, Op::Write, Op::Delete];

/// Tenants the KV front end serves: those with a key-prefix classifier, and those bound to
/// a port.
pub fn kv_tenants<'a>(tenants: &'a [Tenant], ports: &HashMap<u16, String>) -> Vec<&'a Tenant> {
    tenants
        .iter()
        .filter(|t| {
            t.classifiers
                .iter()
                .any(|c| c.kind == ClassifierKind::KeyPrefix)
                || ports.values().any(|p| *p == t.name)
        })
        .collect()
}

/// Whether a rule can match a KV request of one of `tenants`: no path prefix (a KV request
/// has no path), and a key prefix or one of those tenants.
pub fn is_kv_rule(r: &Rule, tenants: &[&str]) -> bool {
    let m = &r.r#match;
    m.path_prefix.as_option().is_none()
        && (m.key_prefix.as_option().is_some()
            || m.tenant
                .as_option()
                .is_some_and(|t| tenants.contains(&t.as_str())))
}

/// Compiles a rule's detours.
pub fn compile(
    rule: &Rule,
    stages: &HashMap<String, Stage>,
    kinds: &HashMap<&str, &StageConfig>,
) -> Result<Route, String> {
    let what = |e: String| format!("rule {:?}: {e}", rule.name);
    let mut limit = None;
    let mut target = None;
    for d in &rule.detours {
        match d.to.kind {
            DetourKind::Stage => match stages.get(&d.to.target) {
                Some(Stage::Cache(s)) => {
                    if target.is_none() {
                        target = Some(Target::Local(s.clone()));
                    }
                }
                Some(Stage::RateLimit(r)) => limit = Some(r.clone()),
                None => {
                    return Err(what(match kinds.get(d.to.target.as_str()) {
                        Some(s) => format!(
                            "a {} stage ({:?}) does not apply to KV requests",
                            s.kind(),
                            d.to.target
                        ),
                        None => format!("no stage {:?}", d.to.target),
                    }))
                }
            },
            DetourKind::File => match RemoteTarget::parse(&d.to.target).map_err(what)? {
                Some(r) if target.is_none() => target = Some(Target::Remote(r.addr)),
                Some(_) => {}
                None => {
                    return Err(what(format!(
                    "endpoint {:?}: a KV endpoint is another agent's front end, tcp://HOST:PORT",
                    d.to.target
                )))
                }
            },
            // The controller sees KV requests through telemetry, not detours.
            DetourKind::Controller => {}
        }
    }
    Ok(Route {
        limit,
        target: target.unwrap_or(Target::Remote(String::new())),
    })
}

impl Routing {
    /// The tenant of a key: the connection's (per-tenant port) or the longest key prefix.
    pub fn tenant_of(&self, port_tenant: Option<&Arc<str>>, key: &[u8]) -> Option<Arc<str>> {
        if let Some(t) = port_tenant {
            return Some(t.clone());
        }
        self.prefixes
            .iter()
            .find(|(p, _)| key.starts_with(p))
            .map(|(_, t)| t.clone())
    }

    /// The route of `key` for tenant `tenant` and operation `op`.
    pub fn route(&self, tenant: &Arc<str>, key: &[u8], op: Op) -> Option<Routed> {
        let counters = self.tenants.get(tenant)?.clone();
        let k = String::from_utf8_lossy(key);
        let h = IoHeader::new(op).tenant(tenant).key(&k);
        let mut route = self
            .table
            .lookup(&h)
            .and_then(|r| self.rules.get(&r.name))
            .cloned()
            .or_else(|| self.defaults.get(tenant).cloned())?;
        if let Target::Remote(a) = &route.target {
            if a.is_empty() {
                // A rule with only a rate limit: the tenant's own cache behind it.
                route.target = self.defaults.get(tenant)?.target.clone();
            }
        }
        Some(Routed {
            tenant: tenant.clone(),
            counters,
            route,
        })
    }
}
