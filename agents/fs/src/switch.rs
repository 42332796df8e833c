//! The sSwitch core, independent of FUSE: match an IO's header against the rule table, hold it
//! while its flow is quiesced, run it through its route, keep delegates and cache coherence.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use lachesis_switch::{IoHeader, Op, Rule, RuleTable};

use crate::delegate::Delegates;
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
}

pub struct Switch {
    compiled: RwLock<Arc<Compiled>>,
    registry: StageRegistry,
    delegates: Delegates,
    gates: Gates,
    endpoints: Mutex<HashMap<PathBuf, Arc<File>>>,
    plain: Arc<Route>,
    /// Serialises writes to replicated files, so every replica applies them in the order the
    /// primary did.
    stripes: Vec<Mutex<()>>,
    read_rr: AtomicUsize,
    /// Serialises rule edits (read-modify-write of the table).
    edit: Mutex<()>,
    /// Bytes read and written through user space (passthrough IO never counts here).
    user_read: std::sync::atomic::AtomicU64,
    user_written: std::sync::atomic::AtomicU64,
}

/// The end of a route: the backing file, or the endpoint replicas.
struct End<'a> {
    sw: &'a Switch,
    ctx: &'a FileCtx,
    route: &'a Route,
    /// Which replica serves reads.
    read_from: usize,
}

use crate::uring::read_full;

impl End<'_> {
    fn replica_files(&self) -> io::Result<Vec<Arc<File>>> {
        self.route
            .replicas
            .iter()
            .map(|d| self.sw.endpoint_file(d, &self.ctx.path))
            .collect()
    }
}

impl Backend for End<'_> {
    fn read_at(&self, _file: u64, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if let Some(r) = &self.route.remote {
            let n = r.client.read(&r.path_of(&self.ctx.path), buf, off)?;
            // Sparse like a local endpoint copy.
            buf[n..].fill(0);
            return Ok(buf.len());
        }
        if self.route.replicas.is_empty() {
            return read_full(&self.ctx.backing, buf, off);
        }
        let f = self
            .sw
            .endpoint_file(&self.route.replicas[self.read_from], &self.ctx.path)?;
        let n = read_full(&f, buf, off)?;
        // An endpoint copy is sparse: past its end it reads as the hole it stands for. The
        // switch clips reads at the file's size.
        buf[n..].fill(0);
        Ok(buf.len())
    }

    fn write_at(&self, _file: u64, data: &[u8], off: u64) -> io::Result<()> {
        if let Some(r) = &self.route.remote {
            // Returns once the bytes are durable on the remote agent.
            return r.client.write(&r.path_of(&self.ctx.path), data, off);
        }
        if self.route.replicas.is_empty() {
            return crate::uring::write_all(&[&self.ctx.backing], data, off);
        }
        // The replicas of a scatter write are written in parallel, in one submission.
        let files = self.replica_files()?;
        let refs: Vec<&File> = files.iter().map(|f| &**f).collect();
        crate::uring::write_all(&refs, data, off)
    }

    fn sync(&self, _file: u64) -> io::Result<()> {
        if let Some(r) = &self.route.remote {
            return r.client.fsync(&r.path_of(&self.ctx.path));
        }
        if self.route.replicas.is_empty() {
            return crate::uring::sync_data(&[&self.ctx.backing]);
        }
        let files = self.replica_files()?;
        let refs: Vec<&File> = files.iter().map(|f| &**f).collect();
        crate::uring::sync_data(&refs)
    }
}

impl Switch {
    pub fn new(opts: SwitchOptions) -> Result<Self, String> {
        let registry = StageRegistry::default();
        let plain = Arc::new(registry.build(RouteSpec {
            tenant: None,
            detours: vec![],
        })?);
        let compiled = compile(&registry, opts.rules)?;
        let delegates = Delegates::open(&opts.state_dir, &compiled.endpoint_dirs, |s| {
            registry.build(s.clone()).map(Arc::new)
        })
        .map_err(|e| format!("state dir {}: {e}", opts.state_dir.display()))?;
        let sw = Switch {
            compiled: RwLock::new(Arc::new(compiled)),
            registry,
            delegates,
            gates: Gates::default(),
            endpoints: Mutex::new(HashMap::new()),
            plain,
            stripes: (0..64).map(|_| Mutex::new(())).collect(),
            read_rr: AtomicUsize::new(0),
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
        let c = self.current();
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

    /// Reads at `off`, up to the file's size.
    pub fn read(&self, ctx: &FileCtx, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let size = ctx.backing.metadata()?.len();
        if off >= size {
            return Ok(0);
        }
        let len = buf.len().min((size - off) as usize);
        let buf = &mut buf[..len];
        let end = off + len as u64;
        let segs = self
            .delegates
            .segments(&ctx.path, off, end)
            .unwrap_or_else(|| vec![(off, end, None)]);
        for (s, e, delegated) in segs {
            let piece = &mut buf[(s - off) as usize..(e - off) as usize];
            let n = match delegated {
                // Written ranges are read where they were written, from the primary.
                Some(route) => self.run_read(ctx, &route, 0, piece, s)?,
                None => {
                    let (flow, route) = self.lookup(ctx, Op::Read, s, e - s);
                    let _admitted = self.gates.admit(flow.as_deref());
                    // A read set of several replicas spreads reads over all of them.
                    let from = match route.replicas.len() {
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
        let (flow, route) = self.lookup(ctx, Op::Write, off, len);
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
        {
            let _order = (route.replicas.len() > 1).then(|| {
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
        let mut routes = vec![self.lookup(ctx, Op::Write, 0, u64::MAX).1];
        if let Some(segs) = self.delegates.segments(&ctx.path, 0, u64::MAX) {
            for r in segs.into_iter().filter_map(|s| s.2) {
                if !routes.iter().any(|x| Arc::ptr_eq(x, &r)) {
                    routes.push(r);
                }
            }
        }
        for route in &routes {
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

    fn endpoint_file(&self, dir: &Path, ns_path: &str) -> io::Result<Arc<File>> {
        let p = under(dir, ns_path);
        let mut m = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = m.get(&p) {
            return Ok(f.clone());
        }
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let f = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&p)?,
        );
        m.insert(p, f.clone());
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
                    }),
                )
            })
            .collect();
        serde_json::json!({
            "stages": stages,
            "flows": flows,
            "user_bytes_read": self.user_read.load(Ordering::Relaxed),
            "user_bytes_written": self.user_written.load(Ordering::Relaxed),
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
        if let Some(r) = &route.remote {
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
    })
}
