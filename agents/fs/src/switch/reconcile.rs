//! Putting a rule table and its stages in force: plan (build, reserve, check without
//! changing anything live), then commit (the new table in force, resizes, the old stages'
//! last write-back); a change refused for want of device space is made again with the stages
//! it replaces emptied first. The switch's part of the agent's two-phase install.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use lachesis_switch::{check_stages, CacheEngine, Rule, RuleTable, StageChange, StageConfig};

use super::{Compiled, Switch, SwitchError};
use crate::detour::Detours;
use crate::route::{LiveStage, RemoteEndpoint, Route, RouteSpec, StageRegistry, StageSet};
use crate::stage::space::Reservation;
use crate::stage::{Devices, Stage};

impl Switch {
    /// The declared stages and those delegates still run through.
    pub(super) fn refresh_stage_list(&self) {
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
        // Checked: from here the change is made.
        plan.put_in_force();
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
        for (log, rate) in plan.reclaims {
            log.set_reclaim(rate);
        }
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
}

/// What a reconcile does: the new stage set (kept, resized and new instances) and what
/// becomes of the old ones.
pub(super) struct Plan {
    pub(super) set: Arc<StageSet>,
    resizes: Vec<Resize>,
    /// Logs kept whose reclaim rate changes.
    reclaims: Vec<(Arc<dyn Stage>, Option<u64>)>,
    /// Old instances no longer in the set (replaced or removed).
    retired: Vec<Arc<LiveStage>>,
    /// Instances built by this change, put in force when it is made.
    built: Vec<Arc<dyn Stage>>,
}

impl Plan {
    /// The change is being made: its new stages put in force what they change outside
    /// themselves (a qos stage's class), before the table that routes IO to them.
    pub(super) fn put_in_force(&self) {
        for s in &self.built {
            s.put_in_force();
        }
    }
}

struct Resize {
    live: Arc<LiveStage>,
    from: u64,
    size: u64,
    /// The regions a growth needs, taken before anything changed.
    reserved: Option<Reservation>,
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
pub(super) fn plan(
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
    let mut reclaims = Vec::new();
    let mut built = Vec::new();
    for cfg in stages {
        let name = cfg.name();
        let prev = old.get(name);
        let change = prev.map(|l| (l, l.config.change_to(cfg)));
        let live = match change {
            Some((l, StageChange::Keep)) => l.clone(),
            Some((l, StageChange::Resize { from, to })) if l.cache.is_some() => {
                let reserved = l
                    .cache
                    .as_ref()
                    .expect("matched")
                    .reserve(to)
                    .map_err(|e| e.context(format!("stage {name:?}: growing to {to} bytes")))?;
                let live = Arc::new(LiveStage {
                    config: cfg.clone(),
                    stage: l.stage.clone(),
                    cache: l.cache.clone(),
                });
                resizes.push(Resize {
                    live: live.clone(),
                    from,
                    size: to,
                    reserved,
                });
                live
            }
            // A log whose reclaim rate alone changed keeps its log and its data; the rate
            // changes when the change is made (`apply`), not while it is planned.
            Some((l, StageChange::Reclaim(rate))) => {
                reclaims.push((l.stage.clone(), rate));
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
                built.push(b.stage.clone());
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
        reclaims,
        retired,
        built,
    })
}

pub(super) fn compile(
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
pub(super) fn check_controller(c: &Compiled, linked: bool) -> Result<(), String> {
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
