//! The sSwitch core, independent of FUSE: match an IO's header against the rule table, hold it
//! while its flow is quiesced, run it through its route, keep delegates and cache coherence.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard};
use std::time::Duration;

use lachesis_switch::{
    check_stages, Admitted, CacheEngine, Gate, IoHeader, Op, Rule, RuleTable, StageConfig,
};

mod coherence;
mod error;
pub use coherence::Change;
pub use error::SwitchError;

use crate::confine::Roots;
use crate::delegate::Delegates;
use crate::detour::{DetourHeader, Detours};
use crate::route::{
    under, LiveStage, RemoteEndpoint, RemoteOptions, Route, RouteSpec, StageRegistry, StageSet,
};
use crate::stage::space::Reservation;
use crate::stage::{Backend, Chain, Devices, LentRead, Stage, StageStats};

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

/// The end of a route: the backing file, or the endpoint replicas (local and remote).
struct End<'a> {
    sw: &'a Switch,
    ctx: &'a FileCtx,
    route: &'a Route,
    /// Which endpoint serves reads (an index into `route.endpoints`).
    read_from: usize,
}

use crate::route::Endpoint;
use lachesis_device::uring::files::read_full;

impl End<'_> {
    /// Whether the application opened the file with O_DIRECT (then its backing file has
    /// it, see `fuse.rs`): endpoint copies are written and read with O_DIRECT too.
    fn direct(&self) -> bool {
        lachesis_device::uring::files::is_direct(&self.ctx.backing)
    }

    fn replica_files(&self) -> io::Result<Vec<Arc<File>>> {
        self.route
            .replicas
            .iter()
            .map(|d| self.sw.endpoint_file(d, self.ctx, self.direct()))
            .collect()
    }

    /// Runs `remote` on every remote endpoint and `local` on the local replicas, all at
    /// once (the remotes on threads of their own, the locals in one io_uring submission);
    /// succeeds only if every replica did.
    fn on_all(
        &self,
        remote: impl Fn(&RemoteEndpoint) -> io::Result<()> + Sync,
        local: impl FnOnce(&[&File]) -> io::Result<()>,
    ) -> io::Result<()> {
        let files = self.replica_files()?;
        let refs: Vec<&File> = files.iter().map(|f| &**f).collect();
        let remotes = &self.route.remotes;
        std::thread::scope(|sc| {
            let remote = &remote;
            let others: Vec<_> = remotes
                .iter()
                .skip(usize::from(refs.is_empty()))
                .map(|r| sc.spawn(move || remote(r)))
                .collect();
            // Without local replicas, the first remote runs on this thread.
            let mut res = if refs.is_empty() {
                remotes.first().map_or(Ok(()), |r| remote(r))
            } else {
                local(&refs)
            };
            for t in others {
                let r = t
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("replica thread panicked")));
                res = res.and(r);
            }
            res
        })
    }
}

impl Backend for End<'_> {
    fn read_at(&self, _file: u64, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let n = match self.route.endpoints.get(self.read_from) {
            None => return read_full(&self.ctx.backing, buf, off),
            Some(Endpoint::Remote(r)) => r.client.read(&r.path_of(&self.ctx.path), buf, off)?,
            Some(Endpoint::Local(d)) => read_full(
                &*self.sw.endpoint_file(d, self.ctx, self.direct())?,
                buf,
                off,
            )?,
        };
        // An endpoint copy is sparse: past its end it reads as the hole it stands for. The
        // switch clips reads at the file's size.
        buf[n..].fill(0);
        Ok(buf.len())
    }

    fn read_lent(&self, file: u64, buf: &mut [u8], off: u64) -> LentRead {
        let Some(Endpoint::Remote(r)) = self.route.endpoints.get(self.read_from) else {
            return self.read_at(file, buf, off).map(|n| (n, None));
        };
        let path = r.path_of(&self.ctx.path);
        let (n, token) = r.client.read_lent(&path, buf, off)?;
        buf[n..].fill(0);
        let lease = (token != 0).then(|| crate::remote::demote::Lease {
            token,
            to: crate::remote::demote::DemoteTo::new(r.client.demote_queue(), &path),
        });
        Ok((buf.len(), lease))
    }

    fn write_at(&self, _file: u64, data: &[u8], off: u64) -> io::Result<()> {
        if self.route.endpoints.is_empty() {
            return lachesis_device::uring::files::write_all(&[&self.ctx.backing], data, off);
        }
        // Every replica at once; acknowledged when all have it (a remote acknowledges once
        // the bytes are durable there).
        self.on_all(
            |r| r.client.write(&r.path_of(&self.ctx.path), data, off),
            |files| lachesis_device::uring::files::write_all(files, data, off),
        )
    }

    fn sync(&self, _file: u64) -> io::Result<()> {
        if self.route.endpoints.is_empty() {
            return lachesis_device::uring::files::sync_data(&[&self.ctx.backing]);
        }
        self.on_all(
            |r| r.client.fsync(&r.path_of(&self.ctx.path)),
            lachesis_device::uring::files::sync_data,
        )
    }
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

    /// The declared stages and those delegates still run through.
    fn refresh_stage_list(&self) {
        let mut stages: Vec<Arc<dyn Stage>> = self
            .registry
            .current()
            .values()
            .map(|l| l.stage.clone())
            .collect();
        for r in self.delegates.routes() {
            for s in &r.stages {
                if !stages.iter().any(|x| Arc::ptr_eq(x, s)) {
                    stages.push(s.clone());
                }
            }
        }
        let mut w = self.compiled.write().unwrap_or_else(|e| e.into_inner());
        let c = Compiled {
            table: w.table.clone(),
            routes: w.routes.clone(),
            stage_configs: w.stage_configs.clone(),
            stages,
            endpoint_dirs: w.endpoint_dirs.clone(),
            remotes: w.remotes.clone(),
            generation: w.generation,
        };
        *w = Arc::new(c);
    }

    fn current(&self) -> Arc<Compiled> {
        self.compiled
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts a rule table and its stages in force (Switch API; the one entry point). Each
    /// rule's `{what: io, to: {kind: stage, target: NAME}}` detour names a stage of
    /// `stages` (a cache stage with `next` runs as the chain NAME, next, next's next...).
    ///
    /// Stages are reconciled with those in force, by name: an unchanged stage keeps its
    /// live instance; a cache stage whose size alone changed is resized in place
    /// ([`crate::stage::cache::CacheStage::resize`]; a write-back stage that shrinks writes
    /// its dirty data back first); any other change builds a new instance and, like a
    /// removed stage, the old one writes back what it holds and goes. Fails, changing
    /// nothing, on a stage set that does not check, a target no stage declares, a stage
    /// that cannot be built (no such device, device full, ...) or a route that does not
    /// compile. Write-backs and resizes run after the new table is in force; their
    /// failures are logged (an old stage that could not write back stays reachable by the
    /// delegates of its data).
    pub fn set_rules(&self, rules: Vec<Rule>, stages: &[StageConfig]) -> Result<(), SwitchError> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        // Device space that the change frees by shrinking stages it keeps is given back
        // first, so the stages it adds or grows can take it (an allocation moves space from
        // one tenant's stage to another's in one change). If the change is then refused,
        // the shrunk stages grow back: the space is still free.
        let (old_rules, old_stages) = (self.rules(), self.stages());
        let shrunk = interim_stages(&old_stages, stages, false);
        let refused =
            match self.change_through(&old_rules, &old_stages, &shrunk, rules.clone(), stages) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
        // A flash cache stage the change replaces (its engine, placement... changed) or
        // removes holds its regions until the change is in force, so on a nearly full device
        // its successor cannot be built beside it (the placement broker renumbering handles
        // when tenants arrive does that to every stage it moves). Only then, and only for
        // want of space, the change is made again with those stages emptied first: they
        // lose nothing a replacement would not (it starts cold; dirty blocks are written
        // back before the space goes) and, refused again, grow back cold.
        let emptied = interim_stages(&old_stages, stages, true);
        if !refused.is_device_full() || emptied == shrunk {
            return Err(refused);
        }
        tracing::info!(
            "device space short: emptying the cache stages the change replaces or removes first"
        );
        self.change_through(&old_rules, &old_stages, &emptied, rules, stages)
    }

    /// Puts `interim` (the stages in force, some of them smaller) in force under the rules
    /// in force, then the change; refused, the stages in force come back.
    fn change_through(
        &self,
        old_rules: &[Rule],
        old_stages: &[StageConfig],
        interim: &[StageConfig],
        rules: Vec<Rule>,
        stages: &[StageConfig],
    ) -> Result<(), SwitchError> {
        if interim == old_stages {
            return self.set_rules_locked(rules, stages);
        }
        self.set_rules_locked(old_rules.to_vec(), interim)?;
        self.set_rules_locked(rules, stages).inspect_err(|_| {
            let _ = self.set_rules_locked(old_rules.to_vec(), old_stages);
        })
    }

    fn set_rules_locked(
        &self,
        rules: Vec<Rule>,
        stages: &[StageConfig],
    ) -> Result<(), SwitchError> {
        check_stages(stages)?;
        let old = self.registry.current();
        let plan = plan(&old, stages, &self.devices, &self.registry)?;
        let c = compile(
            &self.registry,
            rules,
            &plan.set,
            stages.to_vec(),
            self.detours.as_deref(),
        )?;
        check_controller(&c, self.detours.is_some())?;
        self.registry.replace(plan.set.clone());
        *self.compiled.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
        self.refresh_stage_list();
        self.apply(plan);
        Ok(())
    }

    /// The second half of a reconcile, with the new table in force: resizes, then the old
    /// stages' last write-back.
    fn apply(&self, plan: Plan) {
        let fail = |what: &str, name: &str, e: &dyn std::fmt::Display| {
            self.reconcile_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(stage = name, "{what}: {e}");
        };
        for rs in plan.resizes {
            let name = rs.live.config.name();
            let cache = rs.live.cache.as_ref().expect("resizes are of cache stages");
            if rs.size < rs.from && rs.live.stage.holds_data() {
                if let Err(e) = self.write_back_stage(&rs.live.stage) {
                    fail("writing back before a shrink", name, &e);
                }
            }
            match cache.resize(rs.size, rs.reserved) {
                Ok(()) => tracing::info!(
                    stage = name,
                    from = rs.from,
                    to = rs.size,
                    installed = cache.installed_bytes(),
                    "cache stage resized"
                ),
                Err(e) => fail("resizing", name, &e),
            }
        }
        let mut gone: Vec<Arc<dyn Stage>> = Vec::new();
        let mut kept: Vec<Arc<dyn Stage>> = Vec::new();
        for live in &plan.retired {
            let name = live.config.name();
            live.stage.retire();
            match self.write_back_stage(&live.stage) {
                // A log's data stays in its log: reads of it keep going there; a forwarding
                // log wrote its data back, so it goes like a cache.
                Ok(()) if !keeps_its_log(&live.config) => gone.push(live.stage.clone()),
                Ok(()) => kept.push(live.stage.clone()),
                Err(e) => {
                    fail("writing back a replaced or removed stage", name, &e);
                    kept.push(live.stage.clone());
                }
            }
            tracing::info!(stage = name, "stage replaced or removed");
        }
        if !gone.is_empty() {
            // Delegates that ran through a stage that went now take the stages in force by
            // the same names (a name no longer declared is left out: its data is written
            // back).
            let on = |r: &Route, list: &[Arc<dyn Stage>]| {
                r.stages
                    .iter()
                    .any(|s| list.iter().any(|x| Arc::ptr_eq(x, s)))
            };
            self.delegates.retarget(|r| {
                if !on(r, &gone) || on(r, &kept) {
                    return None;
                }
                self.registry
                    .build_recovered(r.spec.clone())
                    .map(Arc::new)
                    .map_err(|e| tracing::warn!("delegate route kept: {e}"))
                    .ok()
            });
        }
        self.refresh_stage_list();
        self.prune_held();
    }

    /// Writes back to their routes the data `stage` holds of every file (no sync).
    fn write_back_stage(&self, stage: &Arc<dyn Stage>) -> io::Result<()> {
        self.each_held_file(stage, |id, next| {
            stage.write_back_file(id, next).map(|_| false)
        })
    }

    /// Runs `f` on every file `stage` holds data of, with the rest of its route after the
    /// stage, until `f` says it is done (true). The first error is returned after the others
    /// ran.
    fn each_held_file(
        &self,
        stage: &Arc<dyn Stage>,
        mut f: impl FnMut(u64, &Chain) -> io::Result<bool>,
    ) -> io::Result<()> {
        self.recover_held(stage);
        // Before the list: a file is in `held` before it gets data in a stage, and is not
        // pruned while this is held.
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        let files = stage.dirty_files();
        let mut first_err = None;
        for id in files {
            let res = (|| {
                let ctx = held.get(&id).ok_or_else(|| {
                    io::Error::other(format!(
                        "file {id} has data in the stage but no known route"
                    ))
                })?;
                let (route, i) = self
                    .routes_of(ctx)
                    .into_iter()
                    .find_map(|r| {
                        let i = r.stages.iter().position(|s| Arc::ptr_eq(s, stage))?;
                        Some((r, i))
                    })
                    .ok_or_else(|| {
                        io::Error::other(format!("{}: no route runs through the stage", ctx.path))
                    })?;
                let end = End {
                    sw: self,
                    ctx,
                    route: &route,
                    read_from: 0,
                };
                f(
                    id,
                    &Chain {
                        stages: &route.stages[i + 1..],
                        end: &end,
                    },
                )
            })();
            match res {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// One round of the background reclaim: each stage with a reclaim rate copies back up to
    /// `elapsed` worth of its rate (files in id order), so reclaim is paced by the rate and
    /// not by the endpoint's speed alone. Not gated by quiesce, like sync.
    pub fn reclaim(&self, elapsed: Duration) -> io::Result<()> {
        let stages: Vec<Arc<dyn Stage>> = self
            .current()
            .stages
            .iter()
            .filter(|s| s.reclaim_rate().is_some())
            .cloned()
            .collect();
        if stages.is_empty() {
            return Ok(());
        }
        let mut first_err = None;
        for s in stages {
            let rate = s.reclaim_rate().unwrap_or(0);
            let mut budget = ((rate as f64) * elapsed.as_secs_f64()).max(1.0) as u64;
            let res = self.each_held_file(&s, |id, next| {
                budget -= s.reclaim_step(id, next, budget)?.min(budget);
                Ok(budget == 0)
            });
            if let Err(e) = res {
                first_err.get_or_insert(e);
            }
        }
        self.prune_held();
        first_err.map_or(Ok(()), Err)
    }

    /// The latency numbers of every remote endpoint this switch forwards to, each that IO
    /// has reached probed once first (so an endpoint no IO goes to any more is still
    /// measured).
    pub fn endpoint_latency(&self) -> Vec<crate::remote::latency::EndpointLatency> {
        let mut out: Vec<_> = self
            .registry
            .clients()
            .into_iter()
            .map(|c| {
                // Only endpoints IO has reached: a named but never used one (a server that
                // is not up yet) is not dialled from the telemetry thread.
                if c.latency().requests == 0 {
                    return c.latency();
                }
                if let Err(e) = c.probe() {
                    tracing::debug!("probing {}: {e}", c.addr());
                }
                c.latency()
            })
            .collect();
        out.sort_by(|a, b| a.addr.cmp(&b.addr));
        out
    }

    /// Where the namespace's files live; with it, the data a stage holds from before a
    /// restart (a replayed log) is written back and reclaimed like the rest.
    pub fn set_backing_root(&self, root: &Path) {
        *self.backing_root.write().unwrap_or_else(|e| e.into_inner()) = Some(root.to_path_buf());
    }

    /// Puts in `held` the files `stage` holds data of that no write since the start put
    /// there (a log replayed after a restart): each path with a delegate through the stage
    /// is opened under the backing root and taken if it is one of them.
    fn recover_held(&self, stage: &Arc<dyn Stage>) {
        let missing: HashSet<u64> = {
            let held = self.held.read().unwrap_or_else(|e| e.into_inner());
            stage
                .dirty_files()
                .into_iter()
                .filter(|id| !held.contains_key(id))
                .collect()
        };
        let root = self
            .backing_root
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(root) = root.filter(|_| !missing.is_empty()) else {
            return;
        };
        let through = |r: &Route| r.stages.iter().any(|s| Arc::ptr_eq(s, stage));
        for path in self.delegates.paths_through(through) {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(under(&root, &path));
            let Ok((file, id)) = file.and_then(|f| {
                let id = std::os::unix::fs::MetadataExt::ino(&f.metadata()?);
                Ok((f, id))
            }) else {
                continue;
            };
            if missing.contains(&id) {
                let ctx = FileCtx {
                    tenant: None,
                    path,
                    id,
                    backing: Arc::new(file),
                };
                self.held
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(id)
                    .or_insert(ctx);
            }
        }
    }

    /// `held`, shared, with `ctx` in it: taken by a write through a stage that holds data.
    fn hold(&self, ctx: &FileCtx) -> RwLockReadGuard<'_, HashMap<u64, FileCtx>> {
        loop {
            let held = self.held.read().unwrap_or_else(|e| e.into_inner());
            if held.contains_key(&ctx.id) {
                return held;
            }
            drop(held);
            self.held
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .entry(ctx.id)
                .or_insert_with(|| ctx.clone());
        }
    }

    /// Forgets the files no stage has data of (`only`: just that one).
    fn prune_held_of(&self, only: Option<u64>) {
        let stages = self.current().stages.clone();
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        let dirty: HashSet<u64> = stages.iter().flat_map(|s| s.dirty_files()).collect();
        held.retain(|id, _| dirty.contains(id) || only.is_some_and(|o| o != *id));
    }

    fn prune_held(&self) {
        self.prune_held_of(None)
    }

    /// The stages in force, as declared.
    pub fn stages(&self) -> Vec<StageConfig> {
        self.current().stage_configs.clone()
    }

    /// Switch API Insert: adds one rule (fails, changing nothing, on a duplicate name or a
    /// route that does not compile). The stages stay.
    pub fn insert_rule(&self, rule: Rule) -> Result<(), SwitchError> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        let mut rules = self.rules();
        rules.push(rule);
        self.set_rules_locked(rules, &self.stages())
    }

    /// Switch API Delete: removes the rule of that name. The stages stay.
    pub fn delete_rule(&self, name: &str) -> Result<Rule, SwitchError> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        let mut rules = self.rules();
        let i = rules
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| format!("no rule named {name:?}"))?;
        let gone = rules.remove(i);
        self.set_rules_locked(rules, &self.stages())?;
        Ok(gone)
    }

    pub fn rules(&self) -> Vec<Rule> {
        self.current().table.rules().cloned().collect()
    }

    /// Every declared stage's counters (Moirai's getCacheStats), by name.
    pub fn stage_stats(&self) -> Vec<StageStats> {
        let set = self.registry.current();
        let mut out: Vec<StageStats> = set
            .iter()
            .map(|(name, live)| {
                let mut s = live.stage.counters();
                s.name = name.clone();
                s.kind = live.config.kind().to_string();
                s.owner = live.config.owner().map(str::to_string);
                if let StageConfig::Cache(c) = &live.config {
                    s.engine = Some(c.engine);
                    s.size_bytes = c.size_bytes;
                }
                s
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
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

    fn lookup(&self, ctx: &FileCtx, op: Op, off: u64, len: u64) -> (Option<String>, Arc<Route>) {
        self.lookup_in(&self.current(), ctx, op, off, len)
    }

    fn lookup_in(
        &self,
        c: &Compiled,
        ctx: &FileCtx,
        op: Op,
        off: u64,
        len: u64,
    ) -> (Option<String>, Arc<Route>) {
        let h = IoHeader {
            tenant: ctx.tenant.as_deref(),
            op,
            path: Some(&ctx.path),
            offset: off,
            length: len,
            key: None,
        };
        match c.table.lookup(&h) {
            Some(rule) => (
                Some(rule.name.clone()),
                c.routes.get(&rule.name).expect("compiled").clone(),
            ),
            None => (None, self.plain.clone()),
        }
    }

    /// The rule and route of an IO, once the controller let it go if the rule asks it first
    /// (`crate::detour`). The hold comes before the gate: a held IO is not in flight. After a
    /// verdict the IO is matched again against the rules in force then; the rule that let it
    /// go is not asked again for this IO.
    fn lookup_held(
        &self,
        ctx: &FileCtx,
        op: Op,
        off: u64,
        len: u64,
    ) -> io::Result<(Option<String>, Arc<Route>)> {
        let mut let_go: Option<String> = None;
        let mut logged: Option<String> = None;
        loop {
            let c = self.current();
            let (flow, route) = self.lookup_in(&c, ctx, op, off, len);
            let Some(rule) = &flow else {
                return Ok((flow, route));
            };
            // Header logs come before any hold: an IO the controller then denies or times
            // out was still attempted, which is what an audit log records. Matched again
            // after a verdict, it is logged again only if it now matches another rule.
            if logged.as_ref() != Some(rule) {
                for log in &route.header_logs {
                    log.append(rule, ctx.tenant.as_deref(), op, &ctx.path, off, len);
                }
                logged = flow.clone();
            }
            let Some(detours) = &self.detours else {
                return Ok((flow, route));
            };
            let header = |target: &str, hold: bool| DetourHeader {
                rule: rule.clone(),
                target: target.to_string(),
                tenant: ctx.tenant.clone(),
                op,
                path: ctx.path.clone(),
                offset: off,
                length: len,
                hold,
            };
            match &route.ask {
                Some(target) if let_go.as_ref() != Some(rule) => {
                    detours.hold(header(target, true), c.generation)?;
                    let_go = flow.clone();
                }
                _ => {
                    for target in &route.copies {
                        detours.copy(header(target, false));
                    }
                    return Ok((flow, route));
                }
            }
        }
    }

    /// A read of a delegated range skips the rules (it follows its delegate), but the rule
    /// it matches still logs its header if it says so: an audit log must not miss reads of
    /// the ranges its flow wrote.
    fn log_delegated_read(&self, ctx: &FileCtx, off: u64, len: u64) {
        if let (Some(rule), route) = self.lookup(ctx, Op::Read, off, len) {
            for log in &route.header_logs {
                log.append(&rule, ctx.tenant.as_deref(), Op::Read, &ctx.path, off, len);
            }
        }
    }

    /// Tells `observer` of every tenant's IO from now on (once; later calls are ignored).
    pub fn set_observer(&self, observer: IoObserver) {
        let _ = self.observer.set(observer);
    }

    pub fn set_read_watch(&self, watch: Arc<dyn ReadWatch>) {
        let _ = self.read_watch.set(watch);
    }

    fn observe(&self, ctx: &FileCtx, off: u64, len: u64) {
        if let (Some(o), Some(t)) = (self.observer.get(), ctx.tenant.as_deref()) {
            o(t, ctx.id, off, len);
        }
    }

    /// Reads at `off`, up to the file's size.
    pub fn read(&self, ctx: &FileCtx, buf: &mut [u8], off: u64) -> io::Result<usize> {
        loop {
            if let Some(n) = self.try_read(ctx, buf, off)? {
                return Ok(n);
            }
        }
    }

    /// One attempt of [`Switch::read`]: `None` when a flow of the range was quiesced; the
    /// attempt then waited for its resume holding no lock, and the read starts again. A read
    /// held at the gate must not keep its block locks: a truncate or write behind them would
    /// hold `held`, which the install that resumes the flow needs (a deadlock that no
    /// timeout ends, with the reader stuck in the kernel).
    fn try_read(&self, ctx: &FileCtx, buf: &mut [u8], off: u64) -> io::Result<Option<usize>> {
        let size = ctx.backing.metadata()?.len();
        if off >= size {
            return Ok(Some(0));
        }
        let len = buf.len().min((size - off) as usize);
        let buf = &mut buf[..len];
        let end = off + len as u64;
        // Held across the delegate lookup too: a concurrent write moves both bytes and route.
        let blocks = self.blocks.read(ctx.id, off, len as u64);
        let segs = self
            .delegates
            .segments(&ctx.path, off, end)
            .unwrap_or_else(|| vec![(off, end, None)]);
        // Every piece admitted before any is read.
        let mut pieces = Vec::with_capacity(segs.len());
        for (s, e, delegated) in segs {
            let piece = match delegated {
                // Written ranges are read where they were written, from the primary.
                Some(route) => Piece::Delegated(route),
                None => {
                    let (flow, route) = self.lookup_held(ctx, Op::Read, s, e - s)?;
                    let admitted = match flow {
                        None => Gate::admit(&self.gates, None),
                        Some(flow) => match Gate::try_admit(&self.gates, flow.clone()) {
                            Some(admitted) => admitted,
                            None => {
                                drop((pieces, blocks));
                                Gate::wait_while_held(&self.gates, flow);
                                return Ok(None);
                            }
                        },
                    };
                    Piece::Routed(route, admitted)
                }
            };
            pieces.push((s, e, piece));
        }
        self.observe(ctx, off, len as u64);
        for (s, e, piece) in &pieces {
            let piece_buf = &mut buf[(s - off) as usize..(e - off) as usize];
            let n = match piece {
                Piece::Delegated(route) => {
                    self.log_delegated_read(ctx, *s, e - s);
                    self.run_read(ctx, route, 0, piece_buf, *s)?
                }
                Piece::Routed(route, _admitted) => {
                    // A read set of several replicas spreads reads over all of them.
                    let from = match route.endpoints.len() {
                        0 | 1 => 0,
                        n => self.read_rr.fetch_add(1, Ordering::Relaxed) % n,
                    };
                    self.run_read(ctx, route, from, piece_buf, *s)?
                }
            };
            // Inside the file's size a short read is a hole.
            piece_buf[n..].fill(0);
        }
        drop(pieces);
        self.user_read.fetch_add(len as u64, Ordering::Relaxed);
        if let Some(w) = self.read_watch.get() {
            w.read(ctx, off, buf);
        }
        drop(blocks);
        Ok(Some(len))
    }

    fn run_read(
        &self,
        ctx: &FileCtx,
        route: &Route,
        from: usize,
        buf: &mut [u8],
        off: u64,
    ) -> io::Result<usize> {
        let end = End {
            sw: self,
            ctx,
            route,
            read_from: from,
        };
        Chain {
            stages: &route.stages,
            end: &end,
        }
        .read_at(ctx.id, buf, off)
    }

    pub fn write(&self, ctx: &FileCtx, data: &[u8], off: u64) -> io::Result<()> {
        let len = data.len() as u64;
        self.user_written.fetch_add(len, Ordering::Relaxed);
        self.observe(ctx, off, len);
        let (flow, route) = self.lookup_held(ctx, Op::Write, off, len)?;
        let _admitted = Gate::admit(&self.gates, flow);
        if !route.is_plain() {
            // The backing file keeps the namespace's size, wherever the bytes go.
            let size = ctx.backing.metadata()?.len();
            if off + len > size {
                ctx.backing.set_len(off + len)?;
            }
        }
        let end = End {
            sw: self,
            ctx,
            route: &route,
            read_from: 0,
        };
        let chain = Chain {
            stages: &route.stages,
            end: &end,
        };
        // Until its data is in the stage, known as a file a stage holds data of.
        let _held = route.holds_data().then(|| self.hold(ctx));
        // Until the delegate is recorded: readers see the old bytes where they were or the
        // new ones where they now are.
        let _blocks = self.blocks.write(ctx.id, off, len);
        {
            let _order = (route.endpoints.len() > 1).then(|| {
                self.stripes[(ctx.id % self.stripes.len() as u64) as usize]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
            });
            chain.write_at(ctx.id, data, off)?;
        }
        // Other routes' stages may cache these bytes: they are stale now.
        for s in &self.current().stages {
            if !route.stages.iter().any(|r| Arc::ptr_eq(r, s)) {
                s.invalidate(ctx.id, off, len);
            }
        }
        self.delegates.record(&ctx.path, off, off + len, &route)?;
        drop((_blocks, _held));
        // A stage still over its dirty limit (other files' data): every file's goes on. This
        // write is done; a failure here leaves the data dirty, to go on later.
        for s in &route.stages {
            if s.over_dirty_limit() {
                if let Err(e) = self.write_back_stage(s) {
                    tracing::warn!(path = ctx.path, "writing back over the dirty limit: {e}");
                }
            }
        }
        Ok(())
    }

    /// Makes the file durable on every route that may hold its bytes.
    pub fn sync(&self, ctx: &FileCtx) -> io::Result<()> {
        for route in &self.routes_of(ctx) {
            let end = End {
                sw: self,
                ctx,
                route,
                read_from: 0,
            };
            Chain {
                stages: &route.stages,
                end: &end,
            }
            .sync(ctx.id)?;
        }
        ctx.backing.sync_data()?;
        // Journals after the data they point at.
        self.delegates.sync()
    }

    /// A handle of the file was closed: stages that hold data write it back, so the bytes
    /// reach their endpoint even if the file is next opened with passthrough.
    pub fn closed(&self, ctx: &FileCtx) -> io::Result<()> {
        if self.current().stages.iter().any(|s| s.holds_data()) {
            self.sync(ctx)?;
            self.prune_held_of(Some(ctx.id));
        }
        Ok(())
    }

    /// Background write-back (the flusher): stages holding data of this file for longer
    /// than `max_age` write it on to the rest of its routes, without a sync. Not gated by
    /// quiesce, like sync: the bytes were acknowledged before the flow was held.
    pub fn flush_expired(&self, ctx: &FileCtx, max_age: Duration) -> io::Result<()> {
        if !self.current().stages.iter().any(|s| s.holds_data()) {
            return Ok(());
        }
        self.each_stage_of_routes(ctx, |s, next| s.flush_expired(ctx.id, max_age, next))
    }

    /// Runs `f` on every stage of every route of the file (its write route and those its
    /// delegates point at), in route order, with the rest of the route after the stage: a
    /// stage's write-back may fill the next one.
    fn each_stage_of_routes(
        &self,
        ctx: &FileCtx,
        mut f: impl FnMut(&Arc<dyn Stage>, &Chain) -> io::Result<()>,
    ) -> io::Result<()> {
        for route in self.routes_of(ctx) {
            let end = End {
                sw: self,
                ctx,
                route: &route,
                read_from: 0,
            };
            for (i, s) in route.stages.iter().enumerate() {
                let next = Chain {
                    stages: &route.stages[i + 1..],
                    end: &end,
                };
                f(s, &next)?;
            }
        }
        Ok(())
    }

    /// The file's current write route and every route a delegate of it points at.
    fn routes_of(&self, ctx: &FileCtx) -> Vec<Arc<Route>> {
        let mut routes = vec![self.lookup(ctx, Op::Write, 0, u64::MAX).1];
        if let Some(segs) = self.delegates.segments(&ctx.path, 0, u64::MAX) {
            for r in segs.into_iter().filter_map(|s| s.2) {
                if !routes.iter().any(|x| Arc::ptr_eq(x, &r)) {
                    routes.push(r);
                }
            }
        }
        routes
    }

    /// The file was truncated to `size` on the backing file system.
    pub fn truncated(&self, path: &str, id: u64, size: u64) -> io::Result<()> {
        let c = self.current();
        for s in &c.stages {
            s.truncate(id, size);
        }
        for d in &c.endpoint_dirs {
            let p = under(d, path);
            if let Ok(f) = OpenOptions::new().write(true).open(&p) {
                if f.metadata()?.len() > size {
                    f.set_len(size)?;
                }
            }
        }
        for r in &c.remotes {
            // Hygiene only: delegates past `size` are dropped below, so reads there no longer
            // go to the remote copy; an unreachable agent must not fail the truncate.
            let p = r.path_of(path);
            let res = r.client.getattr(&p).and_then(|s| {
                if s > size {
                    r.client.truncate(&p, size)
                } else {
                    Ok(())
                }
            });
            if let Err(e) = res {
                tracing::warn!("truncating {p} on {}: {e}", r.client.addr());
            }
        }
        self.delegates.truncate(path, size)
    }

    /// `from` was renamed to `to`; endpoint copies and delegates follow.
    pub fn renamed(&self, from: &str, to: &str) -> io::Result<()> {
        self.forget_endpoint_files();
        for ctx in self
            .held
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .values_mut()
        {
            if let Some(rest) = ctx.path.strip_prefix(from) {
                if rest.is_empty() || rest.starts_with('/') {
                    ctx.path = format!("{to}{rest}");
                }
            }
        }
        for d in &self.current().endpoint_dirs {
            let src = under(d, from);
            if src.exists() {
                let dst = under(d, to);
                if let Some(p) = dst.parent() {
                    std::fs::create_dir_all(p)?;
                }
                std::fs::rename(src, dst)?;
            }
        }
        // Delegates follow the name, so remote copies must too (or reads would miss them).
        for r in &self.current().remotes {
            r.client.rename(&r.path_of(from), &r.path_of(to))?;
        }
        self.delegates.rename(from, to)
    }

    fn forget_endpoint_files(&self) {
        self.endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The endpoint copy of `ctx`'s file under `dir`. A copy the switch creates belongs to
    /// the file's owner with the file's permission bits (the backing file was created with
    /// the writer's uid and gid, `fuse.rs`): the switch runs as root, and a copy made
    /// root-owned, or readable by all, would not be the writer's file any more. Directories it
    /// creates stay root's, so no writer can plant a symlink in the path the switch opens;
    /// the copy itself is opened with O_NOFOLLOW.
    fn endpoint_file(&self, dir: &Path, ctx: &FileCtx, direct: bool) -> io::Result<Arc<File>> {
        use std::os::unix::fs::OpenOptionsExt;
        let p = under(dir, &ctx.path);
        let mut m = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        let k = (p, direct);
        if let Some(f) = m.get(&k) {
            return Ok(f.clone());
        }
        let p = &k.0;
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let open = |flags, new: bool| {
            let mut o = OpenOptions::new();
            o.read(true)
                .write(true)
                .custom_flags(flags | libc::O_NOFOLLOW);
            if new {
                // Nobody else may read it before it is the owner's.
                o.create_new(true).mode(0o600);
            }
            o.open(p)
        };
        let open_or_create = |flags| match open(flags, true) {
            Ok(f) => Ok((f, true)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok((open(flags, false)?, false)),
            Err(e) => Err(e),
        };
        let (f, created) = if direct {
            open_or_create(libc::O_DIRECT).or_else(|e| {
                tracing::debug!(path = %p.display(), "endpoint refuses O_DIRECT ({e}); buffered IO");
                open_or_create(0)
            })?
        } else {
            open_or_create(0)?
        };
        if created {
            adopt_owner(&f, &ctx.backing)?;
        }
        let f = Arc::new(f);
        m.insert(k, f.clone());
        Ok(f)
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

    /// Stage counters and delegate state, for the stats file.
    pub fn stats(&self) -> serde_json::Value {
        let set = self.registry.current();
        let mut names: Vec<&String> = set.keys().collect();
        names.sort();
        let stages: Vec<_> = names
            .into_iter()
            .map(|n| {
                let live = &set[n];
                let owner = live.config.owner();
                // `tenant` and `target`: the owner and the name, as before stages were named.
                serde_json::json!({"name": n, "kind": live.config.kind(), "owner": owner,
                    "tenant": owner, "target": n, "stats": live.stage.stats()})
            })
            .collect();
        let c = self.current();
        let flows: serde_json::Map<_, _> = c
            .table
            .rules()
            .map(|r| {
                let c = self.gates.counts(&r.name);
                (
                    r.name.clone(),
                    serde_json::json!({
                        "quiesced": self.gates.is_quiesced(&r.name),
                        "in_flight": c.in_flight,
                        "admitted": c.admitted,
                        "waiting": c.waiting,
                    }),
                )
            })
            .collect();
        serde_json::json!({
            "stages": stages,
            "flows": flows,
            "detours": self.detours.as_ref().map(|d| d.stats()),
            "header_logs": self.registry.header_logs().iter().map(|l| serde_json::json!({
                "file": l.path(),
                "appended": l.appended.load(Ordering::Relaxed),
                "failed": l.failed.load(Ordering::Relaxed),
            })).collect::<Vec<_>>(),
            "reconcile_errors": self.reconcile_errors.load(Ordering::Relaxed),
            "user_bytes_read": self.user_read.load(Ordering::Relaxed),
            "user_bytes_written": self.user_written.load(Ordering::Relaxed),
            "block_lock_waits": self.blocks.waits(),
        })
    }
}

/// The background reclaim of `switch` (see [`Switch::reclaim`]): a round every 100 ms until
/// the switch is dropped.
pub fn spawn_reclaimer(switch: &Arc<Switch>) {
    const TICK: Duration = Duration::from_millis(100);
    let weak = Arc::downgrade(switch);
    let spawned = std::thread::Builder::new()
        .name("lachesis-fs-reclaim".into())
        .spawn(move || {
            let mut last = std::time::Instant::now();
            loop {
                std::thread::sleep(TICK);
                let Some(sw) = weak.upgrade() else { return };
                let elapsed = last.elapsed();
                last = std::time::Instant::now();
                if let Err(e) = sw.reclaim(elapsed) {
                    tracing::warn!("reclaim: {e}");
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("no background reclaim: {e}");
    }
}

/// What a reconcile does: the new stage set (kept, resized and new instances) and what
/// becomes of the old ones.
struct Plan {
    set: Arc<StageSet>,
    resizes: Vec<Resize>,
    /// Old instances no longer in the set (replaced or removed).
    retired: Vec<Arc<LiveStage>>,
}

struct Resize {
    live: Arc<LiveStage>,
    from: u64,
    size: u64,
    /// The regions a growth needs, taken before anything changed.
    reserved: Option<Reservation>,
}

/// Gives `copy` the owner and permission bits of `original`.
fn adopt_owner(copy: &File, original: &File) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = original.metadata()?;
    std::os::unix::fs::fchown(copy, Some(m.uid()), Some(m.gid()))?;
    copy.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o777))
}

/// The stages in force (`old`) as a step towards `new`: a cache stage that `new` shrinks
/// takes its new size; with `empty_replaced`, a flash cache stage that `new` replaces or
/// removes takes size 0 (gives every region back). The rest as they are.
fn interim_stages(
    old: &[StageConfig],
    new: &[StageConfig],
    empty_replaced: bool,
) -> Vec<StageConfig> {
    old.iter()
        .map(|o| match (o, new.iter().find(|n| n.name() == o.name())) {
            (StageConfig::Cache(a), Some(StageConfig::Cache(b))) if a.same_but_size(b) => {
                StageConfig::Cache(if b.size_bytes < a.size_bytes {
                    b.clone()
                } else {
                    a.clone()
                })
            }
            (StageConfig::Cache(a), _) if empty_replaced && a.engine != CacheEngine::Dram => {
                StageConfig::Cache(lachesis_switch::CacheConfig {
                    size_bytes: 0,
                    ..a.clone()
                })
            }
            _ => o.clone(),
        })
        .collect()
}

/// Whether a retired stage stays reachable by the delegates of its data: a log that holds
/// it (a forwarding or reclaiming log wrote it back instead).
fn keeps_its_log(config: &StageConfig) -> bool {
    matches!(config, StageConfig::Log(l) if l.remote.is_none() && l.reclaim_bytes_per_s.is_none())
}

/// Reconciles `stages` with `old` by name without changing anything live: keeps, plans
/// resizes (taking the device space a growth needs), builds new instances. An error drops
/// what was built and taken.
fn plan(
    old: &StageSet,
    stages: &[StageConfig],
    devices: &Devices,
    registry: &StageRegistry,
) -> Result<Plan, SwitchError> {
    let roots = registry.roots();
    // Before anything is built: a refused directory must not be created.
    for cfg in stages {
        if let StageConfig::Log(l) = cfg {
            if l.remote.is_some() {
                // On another agent, under its root: that agent confines it.
                continue;
            }
            roots
                .check("log stage directory", &l.dir)
                .map_err(|e| SwitchError::Refused(format!("stage {:?}: {e}", l.name)))?;
        }
    }
    let mut set = StageSet::new();
    let mut resizes = Vec::new();
    for cfg in stages {
        let name = cfg.name();
        let prev = old.get(name);
        let live = match prev.map(|l| (l, &l.config, cfg, &l.cache)) {
            Some((l, a, b, _)) if a == b => l.clone(),
            Some((l, StageConfig::Cache(a), StageConfig::Cache(b), Some(cache)))
                if a.same_but_size(b) =>
            {
                let reserved = cache.reserve(b.size_bytes).map_err(|e| {
                    e.context(format!("stage {name:?}: growing to {} bytes", b.size_bytes))
                })?;
                let live = Arc::new(LiveStage {
                    config: cfg.clone(),
                    stage: l.stage.clone(),
                    cache: l.cache.clone(),
                });
                resizes.push(Resize {
                    live: live.clone(),
                    from: a.size_bytes,
                    size: b.size_bytes,
                    reserved,
                });
                live
            }
            // A log whose reclaim rate alone changed keeps its log and its data.
            Some((l, StageConfig::Log(a), StageConfig::Log(b), _)) if a.same_but_reclaim(b) => {
                l.stage.set_reclaim(b.reclaim_bytes_per_s);
                Arc::new(LiveStage {
                    config: cfg.clone(),
                    stage: l.stage.clone(),
                    cache: None,
                })
            }
            _ => {
                let b = crate::stage::build(
                    cfg,
                    &crate::stage::Resources {
                        devices,
                        scheduler: registry.qos(),
                        remote: &|addr| registry.client(addr),
                    },
                )?;
                Arc::new(LiveStage {
                    config: cfg.clone(),
                    stage: b.stage,
                    cache: b.cache,
                })
            }
        };
        set.insert(name.to_string(), live);
    }
    let retired = old
        .iter()
        .filter(|(n, l)| !set.get(*n).is_some_and(|x| Arc::ptr_eq(&x.stage, &l.stage)))
        .map(|(_, l)| l.clone())
        .collect();
    Ok(Plan {
        set: Arc::new(set),
        resizes,
        retired,
    })
}

fn compile(
    registry: &StageRegistry,
    rules: Vec<Rule>,
    set: &StageSet,
    stage_configs: Vec<StageConfig>,
    detours: Option<&Detours>,
) -> Result<Compiled, String> {
    let table = RuleTable::build(rules).map_err(|e| e.to_string())?;
    let mut routes = HashMap::new();
    let mut endpoint_dirs = Vec::new();
    let mut remotes: Vec<Arc<RemoteEndpoint>> = Vec::new();
    for r in table.rules() {
        let route = registry
            .build_in(RouteSpec::of_rule(r), set, false)
            .map_err(|e| format!("rule {:?}: {e}", r.name))?;
        for r in &route.remotes {
            if !remotes.iter().any(|x| x.target == r.target) {
                remotes.push(r.clone());
            }
        }
        for d in &route.replicas {
            if !endpoint_dirs.contains(d) {
                endpoint_dirs.push(d.clone());
            }
        }
        routes.insert(r.name.clone(), Arc::new(route));
    }
    Ok(Compiled {
        table,
        routes,
        stage_configs,
        stages: set.values().map(|l| l.stage.clone()).collect(),
        endpoint_dirs,
        remotes,
        generation: detours.map_or(0, Detours::next_table),
    })
}

/// Refuses `header -> controller` detours when the switch has no way to the controller.
fn check_controller(c: &Compiled, linked: bool) -> Result<(), String> {
    if linked {
        return Ok(());
    }
    for r in c.table.rules() {
        let route = &c.routes[&r.name];
        if let Some(target) = route.ask.as_ref().or(route.copies.first()) {
            return Err(format!(
                "rule {:?}: detour to the controller ({target}) needs the agent's bus: mount with `lachesis-agent run --mount`, the standalone `lachesis-fs mount` has no controller",
                r.name
            ));
        }
    }
    Ok(())
}

/// A piece of a read: a range a delegate says where it was written, or one its rule routes
/// (admitted at its flow's gate until the piece is read).
enum Piece<'a> {
    Delegated(Arc<Route>),
    Routed(Arc<Route>, Admitted<&'a Gate<String, String>, String>),
}
