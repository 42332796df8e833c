//! The sSwitch core, independent of FUSE: match an IO's header against the rule table, hold it
//! while its flow is quiesced, run it through its route, keep delegates and cache coherence.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use lachesis_switch::{check_stages, Gate, Rule, RuleTable, StageConfig};

// The switch by job: `verbs` (the IO verbs: lookup, hold, read, write, sync), `reconcile`
// (putting rules and stages in force), `held` (files whose data stages hold, write-back and
// reclaim), `endpoints` (the files IO lands in), `coherence` (changes made beside the
// switch), `stats`.
mod coherence;
mod endpoints;
mod error;
mod held;
mod reconcile;
mod stats;
mod verbs;

pub use coherence::Change;
pub use error::SwitchError;
pub use held::spawn_reclaimer;
use reconcile::{check_controller, compile, plan};

use crate::confine::Roots;
use crate::delegate::Delegates;
use crate::detour::Detours;
use crate::route::{RemoteEndpoint, RemoteOptions, Route, RouteSpec, StageRegistry, StageSet};
use crate::stage::{Devices, Stage};

pub struct SwitchOptions {
    /// Where delegates of stage-only routes and clears are journaled.
    pub state_dir: PathBuf,
    pub rules: Vec<Rule>,
    /// The stages the rules name (desired-state `stages`, the stage contract).
    pub stages: Vec<StageConfig>,
    /// The devices flash cache engines may live on (the first is the default); shared by
    /// every switch of the agent. Empty: flash engines are refused.
    pub devices: Devices,
    /// Where rules may make the switch write (endpoints, header logs, log stages).
    pub roots: Roots,
    /// How remote endpoints are reached (timeout, key).
    pub remote: RemoteOptions,
}

/// Told of every read and write a tenant's IO makes through the switch, before any stage:
/// (tenant, file id, offset, length). The agent builds the tenant's miss-ratio curve from it.
pub type IoObserver = Arc<dyn Fn(&str, u64, u64, u64) + Send + Sync>;

/// Told of every read the switch served, with its bytes, and asked whether a file's reads must
/// pass through the switch (such a file is not opened with kernel passthrough): the agent's
/// declared-IO planner counts foreground reads for maintenance jobs (`lachesis-declared`).
pub trait ReadWatch: Send + Sync {
    fn watches(&self, path: &str) -> bool;
    fn read(&self, ctx: &FileCtx, off: u64, data: &[u8]);
}

/// A file as the switch sees it: who opened it, its namespace path, a stable id and the open
/// backing file.
#[derive(Clone)]
pub struct FileCtx {
    pub tenant: Option<String>,
    /// Absolute path in the namespace, e.g. `/db/main.sqlite`.
    pub path: String,
    /// The backing file's inode number: the file id of cache keys and logs.
    pub id: u64,
    pub backing: Arc<File>,
    /// Whether `backing` is open with `O_DIRECT` (then its endpoint copies are too): asked
    /// once here, not with an `fcntl` per IO.
    direct: bool,
}

impl FileCtx {
    pub fn new(tenant: Option<String>, path: String, id: u64, backing: File) -> Self {
        FileCtx {
            tenant,
            path,
            id,
            direct: lachesis_device::uring::files::is_direct(&backing),
            backing: Arc::new(backing),
        }
    }

    /// Whether the backing file is open with `O_DIRECT`.
    pub fn direct(&self) -> bool {
        self.direct
    }
}

/// The rule table with every rule's route compiled.
struct Compiled {
    table: RuleTable,
    routes: HashMap<String, Arc<Route>>,
    /// The stages the table was compiled against, as declared.
    stage_configs: Vec<StageConfig>,
    /// Every stage instance (declared, and any older one a delegate still runs through), for
    /// cache coherence across routes.
    stages: Vec<Arc<dyn Stage>>,
    endpoint_dirs: Vec<PathBuf>,
    remotes: Vec<Arc<RemoteEndpoint>>,
    /// Distinct per compiled table of the switches sharing one way to the controller
    /// ([`Detours::next_table`]; 0 without one): the controller's `proceed`s are
    /// remembered per table.
    generation: u64,
}

pub struct Switch {
    compiled: RwLock<Arc<Compiled>>,
    registry: StageRegistry,
    devices: Devices,
    /// Files written through a stage that holds data, by id: a stage that shrinks, is
    /// replaced or removed writes their data back to their routes. A write through such a
    /// stage holds this shared until its data is in the stage, so pruning (exclusive) never
    /// forgets a file with data in flight.
    held: RwLock<HashMap<u64, FileCtx>>,
    /// The namespace's backing directory (the FUSE front end's): files a stage holds data
    /// of from before a restart are opened from it (`recover_held`).
    backing_root: RwLock<Option<PathBuf>>,
    /// Write-backs and resizes that failed after a new stage set was in force (logged).
    reconcile_errors: AtomicU64,
    delegates: Delegates,
    /// Keyed and quiesced by rule name.
    gates: Gate<String, String>,
    /// The way to the controller for `header -> controller` detours; `None` (standalone
    /// `lachesis-fs mount`): rules with such detours are refused.
    detours: Option<Arc<Detours>>,
    /// Open endpoint copies by path and whether opened with O_DIRECT (for files the
    /// application opened so).
    endpoints: Mutex<HashMap<(PathBuf, bool), Arc<File>>>,
    plain: Arc<Route>,
    /// Serialises writes to replicated files, so every replica applies them in the order the
    /// primary did.
    stripes: Vec<Mutex<()>>,
    read_rr: AtomicUsize,
    /// Each 4 KiB block is read wholly before or wholly after a concurrent write of it.
    blocks: crate::blocklock::BlockLocks,
    /// Serialises rule edits (read-modify-write of the table).
    edit: Mutex<()>,
    /// Bytes read and written through user space (passthrough IO never counts here).
    user_read: std::sync::atomic::AtomicU64,
    user_written: std::sync::atomic::AtomicU64,
    /// Told of each tenant's IO (`set_observer`).
    observer: OnceLock<IoObserver>,
    /// Told of each read's bytes (`set_read_watch`).
    read_watch: OnceLock<Arc<dyn ReadWatch>>,
    /// Open switched handles and closed files' change stamps (`coherence.rs`).
    watch: coherence::Watch,
}

impl Switch {
    /// The switch's IO scheduler: its qos stages' classes, and the declared-IO dispatcher's
    /// reads of files under this switch's backing directory.
    pub fn qos(&self) -> Arc<lachesis_stages::qos::Gate> {
        self.registry.qos().clone()
    }

    pub fn new(opts: SwitchOptions) -> Result<Self, String> {
        Self::build(opts, None)
    }

    /// A switch whose `header -> controller` detours reach the controller through `detours`.
    pub fn with_controller(opts: SwitchOptions, detours: Arc<Detours>) -> Result<Self, String> {
        Self::build(opts, Some(detours))
    }

    fn build(opts: SwitchOptions, detours: Option<Arc<Detours>>) -> Result<Self, String> {
        let registry = StageRegistry::confined(opts.roots, opts.remote);
        let plain = Arc::new(registry.build(RouteSpec {
            tenant: None,
            detours: vec![],
        })?);
        check_stages(&opts.stages)?;
        let plan = plan(&StageSet::new(), &opts.stages, &opts.devices, &registry)?;
        let compiled = compile(
            &registry,
            opts.rules,
            &plan.set,
            opts.stages,
            detours.as_deref(),
        )?;
        check_controller(&compiled, detours.is_some())?;
        plan.put_in_force();
        registry.replace(plan.set);
        let delegates = Delegates::open(&opts.state_dir, &compiled.endpoint_dirs, |s| {
            registry.build_recovered(s.clone()).map(Arc::new)
        })
        .map_err(|e| format!("state dir {}: {e}", opts.state_dir.display()))?;
        let sw = Switch {
            compiled: RwLock::new(Arc::new(compiled)),
            registry,
            devices: opts.devices,
            held: RwLock::new(HashMap::new()),
            backing_root: RwLock::new(None),
            reconcile_errors: AtomicU64::new(0),
            delegates,
            gates: Gate::counting().on_hold(|flow| {
                tracing::info!(flow = flow.as_str(), "IO held at the quiesced flow")
            }),
            detours,
            endpoints: Mutex::new(HashMap::new()),
            plain,
            stripes: (0..64).map(|_| Mutex::new(())).collect(),
            read_rr: AtomicUsize::new(0),
            blocks: Default::default(),
            edit: Mutex::new(()),
            user_read: Default::default(),
            user_written: Default::default(),
            observer: OnceLock::new(),
            read_watch: OnceLock::new(),
            watch: Default::default(),
        };
        // Stages the journals brought back count for coherence too.
        sw.refresh_stage_list();
        Ok(sw)
    }

    fn current(&self) -> Arc<Compiled> {
        self.compiled
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The stages in force, as declared.
    pub fn stages(&self) -> Vec<StageConfig> {
        self.current().stage_configs.clone()
    }

    pub fn rules(&self) -> Vec<Rule> {
        self.current().table.rules().cloned().collect()
    }

    /// Whether a file may be opened with kernel passthrough: no rule can match its IO and no
    /// range of it is delegated. Decided at open; a later rule change applies from the next
    /// open on.
    pub fn can_passthrough(&self, path: &str) -> bool {
        if self.delegates.has(path) || self.read_watch.get().is_some_and(|w| w.watches(path)) {
            return false;
        }
        let c = self.current();
        let touched = c.table.rules().any(|r| {
            let m = &r.r#match;
            m.key_prefix.as_option().is_none()
                && m.path_prefix
                    .as_option()
                    .is_none_or(|p| lachesis_switch::path_prefix_matches(p, path))
        });
        !touched
    }

    /// Tells `observer` of every tenant's IO from now on (once; later calls are ignored).
    pub fn set_observer(&self, observer: IoObserver) {
        let _ = self.observer.set(observer);
    }

    pub fn set_read_watch(&self, watch: Arc<dyn ReadWatch>) {
        let _ = self.read_watch.set(watch);
    }

    /// Stops admitting IO of the flow of rule `rule`.
    pub fn quiesce(&self, rule: &str) {
        self.gates.quiesce(rule.to_string())
    }

    /// Waits for the in-flight IO of rule `rule`; false on timeout.
    pub fn drain(&self, rule: &str, timeout: Duration) -> bool {
        self.gates.drain(&rule.to_string(), timeout)
    }

    pub fn resume(&self, rule: &str) {
        self.gates.resume(rule)
    }

    /// IO of rule `rule`'s flow admitted so far, and IO waiting at its quiesced gate.
    pub fn flow_counts(&self, rule: &str) -> (u64, usize) {
        let c = self.gates.counts(rule);
        (c.admitted, c.waiting as usize)
    }
}
