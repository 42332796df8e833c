//! The sSwitch core, independent of FUSE: match an IO's header against the rule table, hold it
//! while its flow is quiesced, run it through its route, keep delegates and cache coherence.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use lachesis_switch::{IoHeader, Op, Rule, RuleTable};

use crate::delegate::Delegates;
use crate::detour::{DetourHeader, Detours};
use crate::gate::Gates;
use crate::route::{under, RemoteEndpoint, Route, RouteSpec, StageRegistry};
use crate::stage::{Backend, Chain, Stage};

pub struct SwitchOptions {
    /// Where delegates of stage-only routes and clears are journaled.
    pub state_dir: PathBuf,
    pub rules: Vec<Rule>,
}

/// A file as the switch sees it: who opened it, its namespace path, a stable id and the open
/// backing file.
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
    /// Every stage instance, for cache coherence across routes.
    stages: Vec<Arc<dyn Stage>>,
    endpoint_dirs: Vec<PathBuf>,
    remotes: Vec<Arc<RemoteEndpoint>>,
    /// Distinct per compiled table: the controller's `proceed`s are remembered per table.
    generation: u64,
}

static TABLE_GENERATION: AtomicU64 = AtomicU64::new(1);

pub struct Switch {
    compiled: RwLock<Arc<Compiled>>,
    registry: StageRegistry,
    delegates: Delegates,
    gates: Gates,
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
use crate::uring::read_full;

impl End<'_> {
    /// Whether the application opened the file with O_DIRECT (then its backing file has
    /// it, see `fuse.rs`): endpoint copies are written and read with O_DIRECT too.
    fn direct(&self) -> bool {
        crate::uring::is_direct(&self.ctx.backing)
    }

    fn replica_files(&self) -> io::Result<Vec<Arc<File>>> {
        self.route
            .replicas
            .iter()
            .map(|d| self.sw.endpoint_file(d, &self.ctx.path, self.direct()))
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
                &*self.sw.endpoint_file(d, &self.ctx.path, self.direct())?,
                buf,
                off,
            )?,
        };
        // An endpoint copy is sparse: past its end it reads as the hole it stands for. The
        // switch clips reads at the file's size.
        buf[n..].fill(0);
        Ok(buf.len())
    }

    fn write_at(&self, _file: u64, data: &[u8], off: u64) -> io::Result<()> {
        if self.route.endpoints.is_empty() {
            return crate::uring::write_all(&[&self.ctx.backing], data, off);
        }
        // Every replica at once; acknowledged when all have it (a remote acknowledges once
        // the bytes are durable there).
        self.on_all(
            |r| r.client.write(&r.path_of(&self.ctx.path), data, off),
            |files| crate::uring::write_all(files, data, off),
        )
    }

    fn sync(&self, _file: u64) -> io::Result<()> {
        if self.route.endpoints.is_empty() {
            return crate::uring::sync_data(&[&self.ctx.backing]);
        }
        self.on_all(
            |r| r.client.fsync(&r.path_of(&self.ctx.path)),
            crate::uring::sync_data,
        )
    }
}

impl Switch {
    pub fn new(opts: SwitchOptions) -> Result<Self, String> {
        Self::build(opts, None)
    }

    /// A switch whose `header -> controller` detours reach the controller through `detours`.
    pub fn with_controller(opts: SwitchOptions, detours: Arc<Detours>) -> Result<Self, String> {
        Self::build(opts, Some(detours))
    }

    fn build(opts: SwitchOptions, detours: Option<Arc<Detours>>) -> Result<Self, String> {
        let registry = StageRegistry::default();
        let plain = Arc::new(registry.build(RouteSpec {
            tenant: None,
            detours: vec![],
        })?);
        let compiled = compile(&registry, opts.rules)?;
        check_controller(&compiled, detours.is_some())?;
        let delegates = Delegates::open(&opts.state_dir, &compiled.endpoint_dirs, |s| {
            registry.build(s.clone()).map(Arc::new)
        })
        .map_err(|e| format!("state dir {}: {e}", opts.state_dir.display()))?;
        let sw = Switch {
            compiled: RwLock::new(Arc::new(compiled)),
            registry,
            delegates,
            gates: Gates::default(),
            detours,
            endpoints: Mutex::new(HashMap::new()),
            plain,
            stripes: (0..64).map(|_| Mutex::new(())).collect(),
            read_rr: AtomicUsize::new(0),
            blocks: Default::default(),
            edit: Mutex::new(()),
            user_read: Default::default(),
            user_written: Default::default(),
        };
        // Stages the journals brought back count for coherence too.
        sw.refresh_stage_list();
        Ok(sw)
    }

    fn refresh_stage_list(&self) {
        let mut w = self.compiled.write().unwrap_or_else(|e| e.into_inner());
        let c = Compiled {
            table: w.table.clone(),
            routes: w.routes.clone(),
            stages: self.registry.all().into_iter().map(|(_, _, s)| s).collect(),
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

    /// Replaces the rule table (Switch API), keeping stage instances and delegates. On error
    /// nothing changes.
    pub fn replace_rules(&self, rules: Vec<Rule>) -> Result<(), String> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        self.replace_rules_locked(rules)
    }

    fn replace_rules_locked(&self, rules: Vec<Rule>) -> Result<(), String> {
        let c = compile(&self.registry, rules)?;
        check_controller(&c, self.detours.is_some())?;
        *self.compiled.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
        self.refresh_stage_list();
        Ok(())
    }

    /// Switch API Insert: adds one rule (fails, changing nothing, on a duplicate name or a
    /// route that does not compile).
    pub fn insert_rule(&self, rule: Rule) -> Result<(), String> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        let mut rules = self.rules();
        rules.push(rule);
        self.replace_rules_locked(rules)
    }

    /// Switch API Delete: removes the rule of that name.
    pub fn delete_rule(&self, name: &str) -> Result<Rule, String> {
        let _edit = self.edit.lock().unwrap_or_else(|e| e.into_inner());
        let mut rules = self.rules();
        let i = rules
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| format!("no rule named {name:?}"))?;
        let gone = rules.remove(i);
        self.replace_rules_locked(rules)?;
        Ok(gone)
    }

    pub fn rules(&self) -> Vec<Rule> {
        self.current().table.rules().cloned().collect()
    }

    /// Whether a file may be opened with kernel passthrough: no rule can match its IO and no
    /// range of it is delegated. Decided at open; a later rule change applies from the next
    /// open on.
    pub fn can_passthrough(&self, path: &str) -> bool {
        if self.delegates.has(path) {
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

    /// Reads at `off`, up to the file's size.
    pub fn read(&self, ctx: &FileCtx, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let size = ctx.backing.metadata()?.len();
        if off >= size {
            return Ok(0);
        }
        let len = buf.len().min((size - off) as usize);
        let buf = &mut buf[..len];
        let end = off + len as u64;
        // Held across the delegate lookup too: a concurrent write moves both bytes and route.
        let _blocks = self.blocks.read(ctx.id, off, len as u64);
        let segs = self
            .delegates
            .segments(&ctx.path, off, end)
            .unwrap_or_else(|| vec![(off, end, None)]);
        for (s, e, delegated) in segs {
            let piece = &mut buf[(s - off) as usize..(e - off) as usize];
            let n = match delegated {
                // Written ranges are read where they were written, from the primary.
                Some(route) => {
                    self.log_delegated_read(ctx, s, e - s);
                    self.run_read(ctx, &route, 0, piece, s)?
                }
                None => {
                    let (flow, route) = self.lookup_held(ctx, Op::Read, s, e - s)?;
                    let _admitted = self.gates.admit(flow.as_deref());
                    // A read set of several replicas spreads reads over all of them.
                    let from = match route.endpoints.len() {
                        0 | 1 => 0,
                        n => self.read_rr.fetch_add(1, Ordering::Relaxed) % n,
                    };
                    self.run_read(ctx, &route, from, piece, s)?
                }
            };
            // Inside the file's size a short read is a hole.
            piece[n..].fill(0);
        }
        self.user_read.fetch_add(len as u64, Ordering::Relaxed);
        Ok(len)
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
        let (flow, route) = self.lookup_held(ctx, Op::Write, off, len)?;
        let _admitted = self.gates.admit(flow.as_deref());
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
        self.delegates.record(&ctx.path, off, off + len, &route)
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
                s.flush_expired(ctx.id, max_age, &next)?;
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

    /// The file at `path` (id `id`) was unlinked.
    pub fn unlinked(&self, path: &str, id: u64) -> io::Result<()> {
        self.truncated(path, id, 0)?;
        self.forget_endpoint_files();
        for d in &self.current().endpoint_dirs {
            let _ = std::fs::remove_file(under(d, path));
        }
        Ok(())
    }

    /// `from` was renamed to `to`; endpoint copies and delegates follow.
    pub fn renamed(&self, from: &str, to: &str) -> io::Result<()> {
        self.forget_endpoint_files();
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

    fn endpoint_file(&self, dir: &Path, ns_path: &str, direct: bool) -> io::Result<Arc<File>> {
        use std::os::unix::fs::OpenOptionsExt;
        let p = under(dir, ns_path);
        let mut m = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        let k = (p, direct);
        if let Some(f) = m.get(&k) {
            return Ok(f.clone());
        }
        let p = &k.0;
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let open = |flags| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(flags)
                .open(p)
        };
        let f = if direct {
            open(libc::O_DIRECT).or_else(|e| {
                tracing::debug!(path = %p.display(), "endpoint refuses O_DIRECT ({e}); buffered IO");
                open(0)
            })?
        } else {
            open(0)?
        };
        let f = Arc::new(f);
        m.insert(k, f.clone());
        Ok(f)
    }

    /// Stops admitting IO of the flow of rule `rule`.
    pub fn quiesce(&self, rule: &str) {
        self.gates.quiesce(rule)
    }

    /// Waits for the in-flight IO of rule `rule`; false on timeout.
    pub fn drain(&self, rule: &str, timeout: Duration) -> bool {
        self.gates.drain(rule, timeout)
    }

    pub fn resume(&self, rule: &str) {
        self.gates.resume(rule)
    }

    /// IO of rule `rule`'s flow admitted so far, and IO waiting at its quiesced gate.
    pub fn flow_counts(&self, rule: &str) -> (u64, usize) {
        (self.gates.admitted(rule), self.gates.waiting(rule))
    }

    /// Stage counters and delegate state, for the stats file.
    pub fn stats(&self) -> serde_json::Value {
        let stages: Vec<_> = self
            .registry
            .all()
            .into_iter()
            .map(|(t, target, s)| {
                serde_json::json!({"tenant": t, "target": target, "stats": s.stats()})
            })
            .collect();
        let c = self.current();
        let flows: serde_json::Map<_, _> = c
            .table
            .rules()
            .map(|r| {
                (
                    r.name.clone(),
                    serde_json::json!({
                        "quiesced": self.gates.is_quiesced(&r.name),
                        "in_flight": self.gates.in_flight(&r.name),
                        "admitted": self.gates.admitted(&r.name),
                        "waiting": self.gates.waiting(&r.name),
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
            "user_bytes_read": self.user_read.load(Ordering::Relaxed),
            "user_bytes_written": self.user_written.load(Ordering::Relaxed),
            "block_lock_waits": self.blocks.waits(),
        })
    }
}

fn compile(registry: &StageRegistry, rules: Vec<Rule>) -> Result<Compiled, String> {
    let table = RuleTable::build(rules).map_err(|e| e.to_string())?;
    let mut routes = HashMap::new();
    let mut endpoint_dirs = Vec::new();
    let mut remotes: Vec<Arc<RemoteEndpoint>> = Vec::new();
    for r in table.rules() {
        let route = registry
            .build(RouteSpec::of_rule(r))
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
        stages: registry.all().into_iter().map(|(_, _, s)| s).collect(),
        endpoint_dirs,
        remotes,
        generation: TABLE_GENERATION.fetch_add(1, Ordering::Relaxed),
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
