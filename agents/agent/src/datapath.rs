//! The agent's data path: the FUSE sSwitch of `lachesis-fs`, mounted in-process
//! (`lachesis-agent run --mount BACKING:MOUNTPOINT`), programmed with the rules of every
//! applied desired state and quiesced, drained and resumed by two-phase rollouts.
//!
//! The switch gates IO per rule (a flow = the IO one rule matches), while a rollout names the
//! flows to quiesce as header matches. A quiesce therefore holds every installed rule whose
//! match overlaps one of the flows ([`Match::overlaps`]); IO that matches no rule (or files
//! opened with kernel passthrough before the rule existed) is not held, and needs none:
//! delegates route reads of bytes written elsewhere to where they were written.
//!
//! The namespace is mounted at the first install; every install also hands the desired
//! state's tenants to the mounted classifier (new opens are classified by them, open files
//! keep the tenant they were opened as).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};

use lachesis_fs::confine::Roots;
use lachesis_fs::detour::Detours;
use lachesis_fs::embed::{self, STATE_DIR};
use lachesis_fs::stage::Devices;
use lachesis_fs::stale_mount;
use lachesis_fs::{IoObserver, Switch, SwitchOptions};
use lachesis_switch::{Match, Rule, StageConfig, Tenant};
use tracing::{info, warn};

use crate::flow_gate::FlowControl;
use crate::install::plan::Plan;
use crate::install::Part;
use crate::telemetry::{EndpointTelemetry, StageKindReport, StageTelemetry};

/// `BACKING:MOUNTPOINT`, both existing directories (a mountpoint with a dead FUSE mount on it
/// is taken too: the agent detaches it at start, [`lachesis_fs::stale_mount`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    pub backing: PathBuf,
    pub mountpoint: PathBuf,
}

impl FromStr for MountSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (b, m) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: expected BACKING_DIR:MOUNTPOINT"))?;
        let spec = MountSpec {
            backing: PathBuf::from(b),
            mountpoint: PathBuf::from(m),
        };
        for (what, p) in [("backing", &spec.backing), ("mountpoint", &spec.mountpoint)] {
            let dead = what == "mountpoint"
                && matches!(stale_mount::state(p), Ok(stale_mount::MountState::Dead));
            if !p.is_dir() && !dead {
                return Err(format!("{s:?}: {what} {} is not a directory", p.display()));
            }
        }
        Ok(spec)
    }
}

struct Mounted {
    spec: MountSpec,
    switch: Arc<Switch>,
    session: Option<embed::BackgroundSession>,
}

#[derive(Default)]
struct Inner {
    mounts: Vec<Mounted>,
    tenants: Vec<Tenant>,
    /// Shared with every mounted switch: replacing its tenants reaches them all.
    classifier: lachesis_fs::classify::Classifier,
    /// Rule names held by the current quiesce, per mount (same order as `mounts`).
    held: Vec<Vec<String>>,
    /// The way to the controller for `header -> controller` detours (`detour_link.rs`).
    detours: Option<Arc<Detours>>,
    /// Told of every read through the switches (`declared_link.rs`).
    declared: Option<Arc<lachesis_declared::Planner>>,
    /// Where rules may make the switches write (`--endpoint-root`); empty: each mount's
    /// backing directory.
    endpoint_roots: Vec<PathBuf>,
    /// How the switches reach remote endpoints (`--forward-key-file`).
    remote: lachesis_fs::route::RemoteOptions,
}

/// The mounted switches of this agent.
pub struct Datapath {
    specs: Vec<MountSpec>,
    threads: usize,
    /// The flash devices the cache stages live on (one region allocator for every mount).
    devices: Devices,
    /// Told of every tenant's IO through the switches (the data path's curves).
    observer: Option<IoObserver>,
    inner: Mutex<Inner>,
}

impl Datapath {
    pub fn new(specs: Vec<MountSpec>, threads: usize) -> Arc<Self> {
        Self::with_devices(specs, threads, Devices::default(), None)
    }

    /// A data path whose flash cache stages live on `devices`, its tenants' IO told to
    /// `observer`.
    pub fn with_devices(
        specs: Vec<MountSpec>,
        threads: usize,
        devices: Devices,
        observer: Option<IoObserver>,
    ) -> Arc<Self> {
        Arc::new(Datapath {
            specs,
            threads,
            devices,
            observer,
            inner: Mutex::new(Inner::default()),
        })
    }

    /// Every stage and its counters, summed over the mounts (each mount runs its own
    /// instance of every stage), in telemetry's form.
    pub fn stage_reports(&self) -> Vec<StageTelemetry> {
        let inner = self.lock();
        let mut by_name: std::collections::BTreeMap<String, StageTelemetry> = Default::default();
        for m in &inner.mounts {
            for s in m.switch.stage_stats() {
                let cache = s.kind == "cache";
                let e = by_name
                    .entry(s.name.clone())
                    .or_insert_with(|| StageTelemetry {
                        name: s.name.clone(),
                        kind: match s.kind.as_str() {
                            "cache" => StageKindReport::Cache,
                            "ratelimit" => StageKindReport::Ratelimit,
                            _ => StageKindReport::Log,
                        },
                        owner: s.owner.clone(),
                        engine: s.engine,
                        ..Default::default()
                    });
                let add = |a: &mut Option<u64>, b: u64| *a = Some(a.unwrap_or(0) + b);
                if s.kind == "log" {
                    // What went into the log (forwarded), what it still holds, what it copied
                    // back (reclaim).
                    add(&mut e.bytes_written, s.bytes_written);
                    add(&mut e.dirty_bytes, s.dirty_bytes);
                    add(&mut e.reclaimed_bytes, s.reclaimed_bytes);
                }
                if let Some(q) = s.qos {
                    *e.qos.get_or_insert_with(Default::default) += q;
                }
                if !cache {
                    continue;
                }
                // The size asked for is the same at every mount; what is installed adds up.
                e.size_bytes = Some(s.size_bytes);
                add(&mut e.installed_bytes, s.installed_bytes);
                add(&mut e.hits, s.hits);
                add(&mut e.misses, s.misses);
                add(&mut e.bytes_read_hit, s.bytes_read_hit);
                add(&mut e.bytes_read_miss, s.bytes_read_miss);
                add(&mut e.bytes_written, s.bytes_written);
                if s.engine
                    .is_some_and(|g| g != lachesis_switch::CacheEngine::Dram)
                {
                    add(&mut e.app_bytes_written, s.app_bytes_written);
                    add(&mut e.flash_bytes_written, s.flash_bytes_written);
                }
                add(&mut e.evictions, s.evictions);
                add(&mut e.writebacks, s.writebacks);
                add(&mut e.dirty_bytes, s.dirty_bytes);
                if s.demoted_blocks > 0 {
                    add(&mut e.demoted_blocks, s.demoted_blocks);
                }
            }
        }
        by_name.into_values().collect()
    }

    /// The remote endpoints of every mount with their latency (each probed once); an
    /// endpoint several mounts reach is reported as the mount that sent it most requests sees it.
    pub fn endpoint_reports(&self) -> Vec<EndpointTelemetry> {
        let switches: Vec<_> = self
            .lock()
            .mounts
            .iter()
            .map(|m| m.switch.clone())
            .collect();
        let mut by_addr: std::collections::BTreeMap<String, EndpointTelemetry> = Default::default();
        for sw in switches {
            for l in sw.endpoint_latency() {
                let r = EndpointTelemetry {
                    addr: l.addr.clone(),
                    requests: l.requests,
                    recent_us: l.recent_us,
                    mean_us: l.mean_us,
                    slow: l.slow,
                };
                match by_addr.get(&l.addr) {
                    Some(seen) if seen.requests >= r.requests => {}
                    _ => {
                        by_addr.insert(l.addr, r);
                    }
                }
            }
        }
        by_addr.into_values().collect()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives the switches mounted from now on a way to the controller (before the first
    /// install); without one, rules with controller detours are refused.
    pub fn set_controller(&self, detours: Arc<Detours>) {
        self.lock().detours = Some(detours);
    }

    /// Tells `planner` of the reads through the switches mounted from now on (before the
    /// first install), mount `i` being the `i`th `--mount`.
    pub fn set_declared(self: &Arc<Self>, planner: Arc<lachesis_declared::Planner>) {
        // The dispatcher's reads wait at the IO scheduler of the switch over their file.
        planner.set_admit(Arc::new(crate::declared_link::Schedulers(Arc::downgrade(
            self,
        ))));
        self.lock().declared = Some(planner);
    }

    /// The IO scheduler of the switch whose backing directory holds `backing_file`.
    pub fn scheduler_of(&self, backing_file: &Path) -> Option<Arc<lachesis_fs::qos::Gate>> {
        let inner = self.lock();
        inner
            .mounts
            .iter()
            .find(|m| backing_file.starts_with(&m.spec.backing))
            .map(|m| m.switch.qos())
    }

    /// Confines what rules make the switches mounted from now on write (file endpoints,
    /// header logs, log stages) to `roots` (existing directories); empty, the default: each
    /// mount's backing directory.
    pub fn set_endpoint_roots(&self, roots: Vec<PathBuf>) -> Result<(), String> {
        Roots::under(&roots)?;
        self.lock().endpoint_roots = roots;
        Ok(())
    }

    /// The key the switches mounted from now on authenticate to remote endpoints with.
    pub fn set_forward_key(&self, key: Option<lachesis_fs::remote::auth::Key>) {
        self.lock().remote.key = key;
    }

    /// Makes every mountpoint usable before anything is mounted: a dead FUSE mount a killed
    /// agent left is detached (logged); a live one is refused, naming it.
    pub fn clear_stale_mounts(&self) -> Result<(), String> {
        self.specs
            .iter()
            .try_for_each(|s| stale_mount::clear(&s.mountpoint))
    }

    /// The classifier of `tenants` when they changed (None: unchanged, or no switch). A tenant
    /// the switch cannot recognise refuses the whole generation (nacked with every such
    /// classifier named) rather than being installed without it, which would leave that
    /// tenant's IO outside all of its rules.
    fn classifier(
        &self,
        inner: &Inner,
        tenants: &[Tenant],
    ) -> Result<Option<lachesis_fs::classify::Classifier>, String> {
        let no_switch = self.specs.is_empty() && inner.mounts.is_empty();
        if no_switch || inner.tenants == tenants {
            return Ok(None);
        }
        embed::classifier_of(tenants).map(Some).map_err(|refused| {
            let named: Vec<String> = refused.iter().map(ToString::to_string).collect();
            format!("cannot classify these tenants: {}", named.join("; "))
        })
    }

    /// Installs `rules` in every switch, mounting the namespaces first if not yet mounted.
    /// On error the switches keep their previous rules.
    pub fn install(
        &self,
        rules: Vec<Rule>,
        stages: &[StageConfig],
        tenants: &[Tenant],
    ) -> Result<(), String> {
        let mut inner = self.lock();
        let classifier = self.classifier(&inner, tenants)?;
        if inner.mounts.is_empty() && !self.specs.is_empty() {
            let classifier = classifier.unwrap_or_default();
            let mut mounts = Vec::new();
            for spec in &self.specs {
                let roots = if inner.endpoint_roots.is_empty() {
                    Roots::under(std::slice::from_ref(&spec.backing))?
                } else {
                    Roots::under(&inner.endpoint_roots)?
                };
                let opts = SwitchOptions {
                    state_dir: spec.backing.join(STATE_DIR),
                    rules: rules.clone(),
                    stages: stages.to_vec(),
                    devices: self.devices.clone(),
                    roots,
                    remote: inner.remote.clone(),
                };
                let switch = Arc::new(match &inner.detours {
                    Some(d) => Switch::with_controller(opts, d.clone())?,
                    None => Switch::new(opts)?,
                });
                if let Some(o) = &self.observer {
                    switch.set_observer(o.clone());
                }
                if let Some(p) = &inner.declared {
                    let watch = crate::declared_link::MountWatch {
                        planner: p.clone(),
                        mount: mounts.len(),
                    };
                    switch.set_read_watch(Arc::new(watch));
                }
                let session = embed::mount(
                    &spec.backing,
                    &spec.mountpoint,
                    switch.clone(),
                    classifier.clone(),
                    self.threads,
                )
                .map_err(|e| format!("mounting {}: {e}", spec.mountpoint.display()))?;
                info!(
                    backing = %spec.backing.display(),
                    mountpoint = %spec.mountpoint.display(),
                    rules = rules.len(),
                    "FUSE switch mounted"
                );
                mounts.push(Mounted {
                    spec: spec.clone(),
                    switch,
                    session: Some(session),
                });
            }
            inner.held = vec![Vec::new(); mounts.len()];
            inner.mounts = mounts;
            inner.tenants = tenants.to_vec();
            inner.classifier = classifier;
            return Ok(());
        }
        // All or nothing: check that every switch takes the rules before changing any.
        let before: Vec<(Vec<Rule>, Vec<StageConfig>)> = inner
            .mounts
            .iter()
            .map(|m| (m.switch.rules(), m.switch.stages()))
            .collect();
        for (i, m) in inner.mounts.iter().enumerate() {
            if let Err(e) = m.switch.set_rules(rules.clone(), stages) {
                for (m, (old, old_stages)) in inner.mounts.iter().zip(&before).take(i) {
                    let _ = m.switch.set_rules(old.clone(), old_stages);
                }
                return Err(format!("switch at {}: {e}", m.spec.mountpoint.display()));
            }
        }
        if let Some(classifier) = classifier {
            inner.classifier.replace(&classifier);
            inner.tenants = tenants.to_vec();
            info!("tenant classifiers changed; new opens are classified by them");
        }
        Ok(())
    }

    /// Unmounts every namespace (waiting for its FUSE threads).
    pub fn unmount(&self) {
        let mut inner = self.lock();
        for m in &mut inner.mounts {
            if let Some(s) = m.session.take() {
                match s.umount_and_join() {
                    Ok(()) => {
                        info!(mountpoint = %m.spec.mountpoint.display(), "FUSE switch unmounted")
                    }
                    Err(e) => {
                        warn!(mountpoint = %m.spec.mountpoint.display(), error = %e, "unmount failed")
                    }
                }
            }
        }
    }
}

impl Part for Datapath {
    fn name(&self) -> &'static str {
        "FUSE switch"
    }

    fn prepare(&self, plan: &Plan) -> Result<(), String> {
        self.classifier(&self.lock(), &plan.fs.tenants).map(drop)
    }

    fn commit(&self, plan: &Plan) -> Result<(), String> {
        let fs = &plan.fs;
        Datapath::install(self, fs.rules.clone(), &fs.stages, &fs.tenants)
    }
}

impl FlowControl for Datapath {
    fn quiesce(&self, flows: &[Match]) {
        let mut inner = self.lock();
        let Inner { mounts, held, .. } = &mut *inner;
        for (m, held) in mounts.iter().zip(held.iter_mut()) {
            for r in m.switch.rules() {
                if flows.iter().any(|f| f.overlaps(&r.r#match)) && !held.contains(&r.name) {
                    m.switch.quiesce(&r.name);
                    held.push(r.name);
                }
            }
        }
    }

    fn in_flight(&self) -> u64 {
        let inner = self.lock();
        inner
            .mounts
            .iter()
            .zip(&inner.held)
            .map(|(m, held)| {
                let stats = m.switch.stats();
                held.iter()
                    .map(|name| stats["flows"][name]["in_flight"].as_u64().unwrap_or(0))
                    .sum::<u64>()
            })
            .sum()
    }

    fn resume(&self) {
        let mut inner = self.lock();
        let Inner { mounts, held, .. } = &mut *inner;
        for (m, held) in mounts.iter().zip(held.iter_mut()) {
            for name in held.drain(..) {
                m.switch.resume(&name);
            }
        }
    }

    fn admitted(&self) -> Option<u64> {
        Some(self.held_counts().0)
    }

    fn waiting(&self) -> u64 {
        self.held_counts().1
    }
}

impl Datapath {
    /// (IO admitted so far, IO waiting) summed over the flows the current quiesce holds.
    fn held_counts(&self) -> (u64, u64) {
        let inner = self.lock();
        let mut sum = (0, 0);
        for (m, held) in inner.mounts.iter().zip(&inner.held) {
            for name in held {
                let (admitted, waiting) = m.switch.flow_counts(name);
                sum = (sum.0 + admitted, sum.1 + waiting as u64);
            }
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_switch::{ClassifierKind, Detour, DetourKind, DetourWhat};

    #[test]
    fn quiesce_holds_the_overlapping_rules_until_resume() {
        let d = tempfile::tempdir().unwrap();
        let ep = d.path().join("ep");
        std::fs::create_dir(&ep).unwrap();
        let to_ep = |name: &str, m: Match| {
            Rule::new(
                name,
                1,
                m,
                vec![Detour::new(
                    DetourWhat::Io,
                    DetourKind::File,
                    ep.display().to_string(),
                )],
            )
        };
        let switch = Arc::new(
            Switch::new(SwitchOptions {
                state_dir: d.path().join("state"),
                rules: vec![
                    to_ep("data", Match::any().path_prefix("/data")),
                    to_ep("logs", Match::any().path_prefix("/logs")),
                ],
                stages: vec![],
                devices: Default::default(),
                roots: Default::default(),
                remote: Default::default(),
            })
            .unwrap(),
        );
        let dp = Datapath::new(vec![], 1);
        {
            let mut inner = dp.lock();
            inner.mounts.push(Mounted {
                spec: MountSpec {
                    backing: d.path().into(),
                    mountpoint: d.path().into(),
                },
                switch: switch.clone(),
                session: None,
            });
            inner.held.push(Vec::new());
        }
        let quiesced = |name: &str| switch.stats()["flows"][name]["quiesced"].as_bool().unwrap();
        dp.quiesce(&[Match::any().path_prefix("/data/db")]);
        assert!(quiesced("data"));
        assert!(!quiesced("logs"));
        assert_eq!(dp.in_flight(), 0);
        assert_eq!((dp.admitted(), dp.waiting()), (Some(0), 0));
        // A table without a route that compiles is refused and the old rules stay.
        let bad = Rule::new(
            "bad",
            1,
            Match::any(),
            vec![Detour::new(
                DetourWhat::Io,
                DetourKind::Stage,
                "nosuchstage",
            )],
        );
        assert!(dp.install(vec![bad], &[], &[]).is_err());
        assert_eq!(switch.rules().len(), 2);
        dp.install(
            vec![to_ep("data", Match::any().path_prefix("/data"))],
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(switch.rules().len(), 1);
        dp.resume();
        assert!(!quiesced("data"));
    }

    #[test]
    fn a_tenant_the_switch_cannot_classify_refuses_the_generation_path_tenants_are_taken() {
        let d = tempfile::tempdir().unwrap();
        let switch = Arc::new(
            Switch::new(SwitchOptions {
                state_dir: d.path().join("state"),
                rules: vec![],
                stages: vec![],
                devices: Default::default(),
                roots: Default::default(),
                remote: Default::default(),
            })
            .unwrap(),
        );
        let dp = Datapath::new(vec![], 1);
        {
            let mut inner = dp.lock();
            inner.mounts.push(Mounted {
                spec: MountSpec {
                    backing: d.path().into(),
                    mountpoint: d.path().into(),
                },
                switch: switch.clone(),
                session: None,
            });
            inner.held.push(Vec::new());
        }
        let tenant = |name: &str, kind, value: &str| Tenant {
            name: name.into(),
            classifiers: vec![lachesis_switch::Classifier {
                kind,
                value: value.into(),
            }],
        };
        let web = tenant("web", ClassifierKind::PathPrefix, "/srv/web/");
        let sessions = tenant("sessions", ClassifierKind::KeyPrefix, "sess:");
        let rule = Rule::new(
            "web-log",
            1,
            Match::any().tenant("web"),
            vec![Detour::new(
                DetourWhat::Io,
                DetourKind::File,
                d.path().display().to_string(),
            )],
        );
        dp.install(vec![rule.clone()], &[], &[web.clone(), sessions.clone()])
            .unwrap();
        let classifier = dp.lock().classifier.clone();
        assert_eq!(
            classifier.classify_with(None, 0, "/srv/web/i").as_deref(),
            Some("web")
        );
        assert_eq!(classifier.classify_with(None, 0, "/srv/webx"), None);

        // A process classifier: the whole generation is refused, naming it; nothing changes.
        let search = tenant("search", ClassifierKind::Process, "searchd");
        let e = dp.install(vec![], &[], &[web.clone(), search]).unwrap_err();
        assert!(
            e.contains("tenant \"search\": classifiers[0] (process)"),
            "{e}"
        );
        assert_eq!(switch.rules(), vec![rule]);
        assert_eq!(dp.lock().tenants, vec![web, sessions]);
        assert_eq!(
            classifier.classify_with(None, 0, "/srv/web/i").as_deref(),
            Some("web")
        );
    }

    #[test]
    fn mount_spec_names_the_bad_part() {
        let d = tempfile::tempdir().unwrap();
        let ok = format!("{}:{}", d.path().display(), d.path().display());
        assert!(ok.parse::<MountSpec>().is_ok());
        let e = "nocolon".parse::<MountSpec>().unwrap_err();
        assert!(e.contains("BACKING_DIR:MOUNTPOINT"), "{e}");
        let e = format!("{}:/nonexistent/x", d.path().display())
            .parse::<MountSpec>()
            .unwrap_err();
        assert!(e.contains("mountpoint /nonexistent/x"), "{e}");
    }
}
