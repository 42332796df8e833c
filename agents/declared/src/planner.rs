//! The planner: the host's declared jobs, what of each is covered, and which blocks the
//! dispatcher reads next.
//!
//! Foreground reads through a mount's switch count for every job declaring those bytes
//! ([`Planner::observe`], cheap when no job is declared: one atomic load). Each quantum the
//! dispatcher asks [`Planner::plan`] for blocks: jobs are served in deadline order, each at
//! the rate its pace asks (`deadline`: what is left over the time left before its aim, a tenth
//! of its window before the deadline; `budget`, or past the aim: as fast as the budget
//! allows), capped by its own `rate_bytes_per_s`, all within the agent's budget. A block the
//! dispatcher reads for one job counts for every other job declaring it (`shared_bytes`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use time::OffsetDateTime;

use crate::coverage::{Claim, Coverage, Covered};
use crate::message::{DeclaredIo, FileDigest, FileRange, JobReport, JobSpec, JobState, Pace};

/// Most budget a quiet dispatcher saves up, in seconds of budget.
const BURST_S: f64 = 1.0;
/// A `deadline`-paced job aims to be done this share of its window before its deadline.
const AIM_MARGIN: f64 = 0.1;
/// The agent's state directory in a backing directory (`lachesis_fs::embed::STATE_DIR`),
/// hidden from the namespace: never scrubbed.
pub const STATE_DIR: &str = ".lachesis-fs";
/// Most files one job's directories expand to.
pub const MAX_EXPANDED: usize = 4096;

/// One FUSE mount of the agent: its backing directory and mountpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub backing: PathBuf,
    pub mountpoint: PathBuf,
}

struct JobFile {
    range: FileRange,
    mount: usize,
    ns_path: String,
    backing: PathBuf,
    cov: Coverage,
}

struct Job {
    spec: JobSpec,
    accepted: OffsetDateTime,
    files: Vec<JobFile>,
    counted: Covered,
    error: Option<String>,
    credit: f64,
}

impl Job {
    fn state(&self) -> JobState {
        if self.error.is_some() {
            JobState::Failed
        } else if self.files.iter().all(|f| f.cov.is_done()) {
            JobState::Done
        } else if self.spec.paused {
            JobState::Paused
        } else {
            JobState::Running
        }
    }

    fn remaining(&self) -> u64 {
        self.files.iter().map(|f| f.cov.remaining()).sum()
    }

    fn add(&mut self, c: Covered) {
        self.counted.foreground += c.foreground;
        self.counted.dispatched += c.dispatched;
        self.counted.shared += c.shared;
    }
}

/// A block the dispatcher is to read: `claim.len` bytes at `claim.off` of `backing`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    pub job: String,
    pub file: usize,
    pub backing: PathBuf,
    pub claim: Claim,
}

#[derive(Default)]
struct State {
    version: u64,
    jobs: BTreeMap<String, Job>,
    /// (mount, namespace path) -> (job, file index) declaring bytes of it.
    index: HashMap<usize, HashMap<String, Vec<(String, usize)>>>,
    credit: f64,
}

pub struct Planner {
    mounts: Vec<Mount>,
    budget: u64,
    /// Where the dispatcher's reads wait for the data path's IO scheduler (none: they go at
    /// once, paced by the budget alone).
    admit: std::sync::RwLock<Option<std::sync::Arc<dyn Admit>>>,
    /// Whether any job has blocks left: foreground reads skip the lock otherwise.
    active: AtomicBool,
    state: Mutex<State>,
}

/// The data path's IO scheduler, as the dispatcher sees it: its reads are maintenance IO, a
/// class of low weight there, so tenants' IO goes ahead of them (issue 34).
pub trait Admit: Send + Sync {
    /// Waits until a read of `bytes` of the backing file `backing` may go; the slot it holds
    /// while it runs (None: no scheduler for that file).
    fn admit(&self, backing: &Path, bytes: u64) -> Option<Box<dyn Send>>;
}

impl Planner {
    /// A planner for the agent's `mounts`, its dispatcher reading at most `budget` bytes/s.
    pub fn new(mounts: Vec<Mount>, budget: u64) -> Self {
        Planner {
            mounts,
            budget,
            admit: Default::default(),
            active: AtomicBool::new(false),
            state: Mutex::new(State::default()),
        }
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Makes the dispatcher's reads wait for `admit` (the agent's IO schedulers).
    pub fn set_admit(&self, admit: std::sync::Arc<dyn Admit>) {
        *self.admit.write().unwrap_or_else(|e| e.into_inner()) = Some(admit);
    }

    /// Waits until the read of `bytes` of `backing` may go; what holds its slot meanwhile.
    pub fn admit(&self, backing: &Path, bytes: u64) -> Option<Box<dyn Send>> {
        let admit = self.admit.read().unwrap_or_else(|e| e.into_inner()).clone();
        admit.and_then(|a| a.admit(backing, bytes))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The message's jobs replace the held ones: a job it no longer carries is dropped, one
    /// whose files are unchanged keeps its progress (its deadline, pace, pause and rate are
    /// taken anew), any other is accepted afresh (its files resolved and sized now). A message
    /// older than the held one is ignored (false).
    pub fn apply(&self, msg: &DeclaredIo, now: OffsetDateTime) -> bool {
        let mut st = self.lock();
        if msg.version < st.version {
            return false;
        }
        st.version = msg.version;
        let mut old = std::mem::take(&mut st.jobs);
        for spec in &msg.jobs {
            let job = match old.remove(&spec.id) {
                Some(mut j) if j.spec.files == spec.files && j.spec.tenant == spec.tenant => {
                    j.spec = spec.clone();
                    j
                }
                _ => self.accept(spec.clone(), now),
            };
            st.jobs.insert(spec.id.clone(), job);
        }
        self.reindex(&mut st);
        true
    }

    fn reindex(&self, st: &mut State) {
        st.index.clear();
        let mut active = false;
        for (id, j) in &st.jobs {
            if matches!(j.state(), JobState::Done | JobState::Failed) {
                continue;
            }
            active = true;
            for (i, f) in j.files.iter().enumerate() {
                st.index
                    .entry(f.mount)
                    .or_default()
                    .entry(f.ns_path.clone())
                    .or_default()
                    .push((id.clone(), i));
            }
        }
        self.active.store(active, Ordering::Release);
    }

    fn accept(&self, spec: JobSpec, now: OffsetDateTime) -> Job {
        let mut files = Vec::with_capacity(spec.files.len());
        let mut error = None;
        for r in &spec.files {
            match self.expand(r).and_then(|rs| {
                rs.iter()
                    .map(|r| self.resolve(r))
                    .collect::<Result<Vec<_>, _>>()
            }) {
                Ok(f) => files.extend(f),
                Err(e) => {
                    error = Some(e);
                    files.clear();
                    break;
                }
            }
            if files.len() > MAX_EXPANDED {
                error = Some(format!("more than {MAX_EXPANDED} files"));
                files.clear();
                break;
            }
        }
        Job {
            spec,
            accepted: now,
            files,
            counted: Covered::default(),
            error,
            credit: 0.0,
        }
    }

    /// A directory stands for every regular file under it (whole, in name order); any
    /// other path for itself.
    fn expand(&self, r: &FileRange) -> Result<Vec<FileRange>, String> {
        let Some(dir) = self.backing_of(&r.path) else {
            return Ok(vec![r.clone()]);
        };
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return Ok(vec![r.clone()]);
        }
        if r.offset != 0 || r.length.is_some() {
            return Err(format!("{}: a directory takes no offset or length", r.path));
        }
        let mut out = Vec::new();
        let mut stack = vec![(dir, r.path.clone())];
        while let Some((d, host)) = stack.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&d)
                .map_err(|e| format!("{host}: {e}"))?
                .filter_map(|e| e.ok())
                .collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries.into_iter().rev() {
                let Some(name) = e.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                if name == STATE_DIR && self.mounts.iter().any(|m| m.backing == d) {
                    continue;
                }
                let ty = e.file_type().map_err(|e| format!("{host}/{name}: {e}"))?;
                if ty.is_dir() {
                    stack.push((e.path(), format!("{host}/{name}")));
                } else if ty.is_file() {
                    out.push(FileRange {
                        path: format!("{host}/{name}"),
                        offset: 0,
                        length: None,
                    });
                }
                if out.len() > MAX_EXPANDED {
                    return Err(format!("{}: more than {MAX_EXPANDED} files", r.path));
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn backing_of(&self, host_path: &str) -> Option<PathBuf> {
        self.locate(host_path)
            .map(|(i, rel)| self.mounts[i].backing.join(rel))
    }

    /// The mount a path is in and its path there: a path under a mountpoint or a backing
    /// directory, else a path in a mount's namespace (what rules' path prefixes name, and
    /// what a policy's scrub declares for hosts whose mountpoints differ) that exists there.
    fn locate(&self, host_path: &str) -> Option<(usize, PathBuf)> {
        let path = Path::new(host_path);
        let under = self.mounts.iter().enumerate().find_map(|(i, m)| {
            path.strip_prefix(&m.mountpoint)
                .or_else(|_| path.strip_prefix(&m.backing))
                .ok()
                .map(|rel| (i, rel.to_path_buf()))
        });
        under.or_else(|| {
            let rel = path.strip_prefix("/").ok()?;
            self.mounts
                .iter()
                .position(|m| std::fs::symlink_metadata(m.backing.join(rel)).is_ok())
                .map(|i| (i, rel.to_path_buf()))
        })
    }

    /// Maps a host path under a mountpoint (or a backing directory) to its mount, its path
    /// in the mount's namespace and its backing file, and sizes the range.
    fn resolve(&self, r: &FileRange) -> Result<JobFile, String> {
        let (mount, rel) = self
            .locate(&r.path)
            .ok_or_else(|| format!("{}: under no mount of this agent", r.path))?;
        let rel = rel.as_path();
        if rel.components().any(|c| !matches!(c, Component::Normal(_)))
            || rel.as_os_str().is_empty()
        {
            return Err(format!("{}: not a file under the mount", r.path));
        }
        let rel_str = rel
            .to_str()
            .ok_or_else(|| format!("{}: not UTF-8", r.path))?;
        let backing = self.mounts[mount].backing.join(rel);
        let meta = std::fs::symlink_metadata(&backing).map_err(|e| format!("{}: {e}", r.path))?;
        if !meta.is_file() {
            return Err(format!("{}: not a regular file", r.path));
        }
        let size = meta.len();
        let end = match r.length {
            Some(n) => r.offset.saturating_add(n),
            None => size,
        };
        if r.offset > size || end > size {
            return Err(format!(
                "{}: range {}..{end} ends past the file's {size} bytes",
                r.path, r.offset
            ));
        }
        Ok(JobFile {
            range: r.clone(),
            mount,
            ns_path: format!("/{rel_str}"),
            backing,
            cov: Coverage::new(r.offset, end),
        })
    }

    /// Whether reads of `ns_path` at `mount` count for a job (they must then pass through
    /// the switch, not the kernel's passthrough).
    pub fn watches(&self, mount: usize, ns_path: &str) -> bool {
        self.active.load(Ordering::Acquire)
            && self
                .lock()
                .index
                .get(&mount)
                .is_some_and(|m| m.contains_key(ns_path))
    }

    /// A foreground read of `data` at `off` of `ns_path` through `mount`'s switch.
    pub fn observe(&self, mount: usize, ns_path: &str, off: u64, data: &[u8]) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let mut st = self.lock();
        let Some(entries) = st.index.get(&mount).and_then(|m| m.get(ns_path)).cloned() else {
            return;
        };
        let mut finished = false;
        for (id, i) in entries {
            if let Some(j) = st.jobs.get_mut(&id) {
                let c = j.files[i].cov.observe(off, data, false);
                j.add(c);
                finished |= j.files[i].cov.is_done();
            }
        }
        if finished {
            self.reindex(&mut st);
        }
    }

    /// The blocks to read for the `dt_s` seconds since the last call.
    pub fn plan(&self, dt_s: f64, now: OffsetDateTime) -> Vec<Work> {
        let mut st = self.lock();
        let budget = self.budget as f64;
        st.credit = (st.credit + budget * dt_s).min(budget * BURST_S);
        let mut order: Vec<(OffsetDateTime, String)> = st
            .jobs
            .iter()
            .filter(|(_, j)| j.state() == JobState::Running)
            .map(|(id, j)| (j.spec.deadline_at(), id.clone()))
            .collect();
        order.sort();
        let mut work = Vec::new();
        for (deadline, id) in order {
            if st.credit <= 0.0 {
                break;
            }
            let mut host = st.credit;
            let Some(j) = st.jobs.get_mut(&id) else {
                continue;
            };
            let remaining = j.remaining() as f64;
            let aim = deadline - (deadline - j.accepted) * AIM_MARGIN;
            let left = (aim - now).as_seconds_f64();
            let mut rate = match j.spec.pace {
                Pace::Deadline if left > dt_s => remaining / left,
                _ => budget,
            };
            if let Some(cap) = j.spec.rate_bytes_per_s {
                rate = rate.min(cap as f64);
            }
            j.credit = (j.credit + rate * dt_s).min(rate * BURST_S);
            'files: for (i, f) in j.files.iter_mut().enumerate() {
                while j.credit > 0.0 && host > 0.0 {
                    let Some(claim) = f.cov.claim() else {
                        continue 'files;
                    };
                    j.credit -= claim.len as f64;
                    host -= claim.len as f64;
                    work.push(Work {
                        job: id.clone(),
                        file: i,
                        backing: f.backing.clone(),
                        claim,
                    });
                }
                break;
            }
            st.credit = host;
        }
        work
    }

    /// The dispatcher read `data` for `w`; it also counts for the other jobs declaring it.
    pub fn complete(&self, w: &Work, data: &[u8]) {
        let mut st = self.lock();
        let Some(j) = st.jobs.get_mut(&w.job) else {
            return;
        };
        let Some(f) = j.files.get_mut(w.file) else {
            return;
        };
        let c = f.cov.complete(w.claim, data);
        let (mount, ns_path) = (f.mount, f.ns_path.clone());
        j.add(c);
        let others: Vec<(String, usize)> = st
            .index
            .get(&mount)
            .and_then(|m| m.get(&ns_path))
            .into_iter()
            .flatten()
            .filter(|(id, _)| *id != w.job)
            .cloned()
            .collect();
        for (id, i) in others {
            if let Some(o) = st.jobs.get_mut(&id) {
                let c = o.files[i].cov.observe(w.claim.off, data, true);
                o.add(c);
            }
        }
        self.reindex(&mut st);
    }

    /// The dispatcher could not read `w`: the job fails (a scrub that cannot read its data
    /// has found something), saying why.
    pub fn fail(&self, w: &Work, why: &str) {
        let mut st = self.lock();
        if let Some(j) = st.jobs.get_mut(&w.job) {
            if let Some(f) = j.files.get_mut(w.file) {
                f.cov.release(w.claim);
                j.error = Some(format!("{}: {why}", f.range.path));
            }
        }
        self.reindex(&mut st);
    }

    /// Every job's progress, for telemetry.
    pub fn reports(&self) -> Vec<JobReport> {
        let st = self.lock();
        st.jobs
            .values()
            .map(|j| {
                let state = j.state();
                JobReport {
                    id: j.spec.id.clone(),
                    state,
                    bytes_declared: j.files.iter().map(|f| f.cov.bytes()).sum(),
                    dispatched_bytes: j.counted.dispatched,
                    foreground_bytes: j.counted.foreground,
                    shared_bytes: j.counted.shared,
                    error: j.error.clone(),
                    files: (state == JobState::Done).then(|| {
                        j.files
                            .iter()
                            .map(|f| FileDigest {
                                path: f.range.path.clone(),
                                offset: f.range.offset,
                                length: f.cov.bytes(),
                                crc32: f.cov.digest().unwrap_or(0),
                            })
                            .collect()
                    }),
                }
            })
            .collect()
    }
}
