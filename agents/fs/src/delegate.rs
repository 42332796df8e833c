//! Delegates (sRoute §6.3.4): once a write to a range was routed off the backing file (to an
//! endpoint, or into a stage that holds data), reads of that range follow it, whatever rule
//! they match. Each change is journaled next to the data it points at (the endpoint's
//! directory; the state directory for stage-only routes and for clears), with a global
//! sequence number, so a restarted switch replays all journals in order.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};

use crate::rangemap::RangeMap;
use crate::route::{Route, RouteSpec};

pub const JOURNAL: &str = ".lachesis-delegates.jsonl";
const ENDPOINTS: &str = "endpoints.txt";

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    seq: u64,
    path: String,
    start: u64,
    end: u64,
    /// `None`: the range is back on the backing file.
    route: Option<RouteSpec>,
}

pub struct Delegates {
    map: RwLock<HashMap<String, RangeMap<Arc<Route>>>>,
    seq: AtomicU64,
    /// Each journal, and whether it was appended to since it was last synced.
    journals: Mutex<HashMap<PathBuf, Journal>>,
    state_dir: PathBuf,
}

struct Journal {
    file: File,
    unsynced: bool,
}

/// A read piece: `[start, end)` and the route it must take (`None`: match the rules).
pub type Segment = (u64, u64, Option<Arc<Route>>);

impl Delegates {
    /// Opens the journals in `state_dir` and in every endpoint directory it knows of (plus
    /// `extra_dirs`), and replays them; `build` recompiles each journaled route.
    pub fn open(
        state_dir: &Path,
        extra_dirs: &[PathBuf],
        build: impl Fn(&RouteSpec) -> Result<Arc<Route>, String>,
    ) -> io::Result<Self> {
        crate::private::create_own_dir(state_dir)?;
        let mut dirs: Vec<PathBuf> = vec![state_dir.to_path_buf()];
        if let Ok(s) = std::fs::read_to_string(state_dir.join(ENDPOINTS)) {
            dirs.extend(s.lines().filter(|l| !l.is_empty()).map(PathBuf::from));
        }
        dirs.extend(extra_dirs.iter().cloned());
        dirs.sort();
        dirs.dedup();
        let mut records = Vec::new();
        for d in &dirs {
            let Ok(f) = File::open(d.join(JOURNAL)) else {
                continue;
            };
            for line in io::BufReader::new(f).lines() {
                // A torn last line (crash mid-append) is skipped.
                if let Ok(r) = serde_json::from_str::<Record>(&line?) {
                    records.push(r);
                }
            }
        }
        records.sort_by_key(|r| r.seq);
        let mut map: HashMap<String, RangeMap<Arc<Route>>> = HashMap::new();
        let mut built: Vec<(RouteSpec, Arc<Route>)> = Vec::new();
        let mut seq = 0;
        for r in records {
            seq = seq.max(r.seq);
            let m = map.entry(r.path.clone()).or_default();
            match r.route {
                None => m.remove(r.start, r.end),
                Some(spec) => {
                    let route = match built.iter().find(|(s, _)| *s == spec) {
                        Some((_, rt)) => rt.clone(),
                        None => match build(&spec) {
                            Ok(rt) => {
                                built.push((spec, rt.clone()));
                                rt
                            }
                            Err(e) => {
                                tracing::warn!(path = %r.path, "delegate not recovered: {e}");
                                continue;
                            }
                        },
                    };
                    m.insert(r.start, r.end, route);
                }
            }
        }
        map.retain(|_, m| !m.is_empty());
        Ok(Delegates {
            map: RwLock::new(map),
            seq: AtomicU64::new(seq + 1),
            journals: Mutex::new(HashMap::new()),
            state_dir: state_dir.to_path_buf(),
        })
    }

    /// Replaces every route `with` gives a replacement for (the stage it ran through was
    /// written back and replaced or removed). Journals name stages, not instances: they
    /// stay as they are.
    pub fn retarget(&self, with: impl Fn(&Arc<Route>) -> Option<Arc<Route>>) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        let mut done: Vec<(Arc<Route>, Arc<Route>)> = Vec::new();
        for m in map.values_mut() {
            for r in m.values_mut() {
                if let Some((_, new)) = done.iter().find(|(old, _)| Arc::ptr_eq(old, r)) {
                    *r = new.clone();
                } else if let Some(new) = with(r) {
                    done.push((r.clone(), new.clone()));
                    *r = new;
                }
            }
        }
    }

    /// Every route a delegate points at now (each once).
    pub fn routes(&self) -> Vec<Arc<Route>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Arc<Route>> = Vec::new();
        for m in map.values() {
            for (_, _, r) in m.iter() {
                if !out.iter().any(|x| Arc::ptr_eq(x, r)) {
                    out.push(r.clone());
                }
            }
        }
        out
    }

    /// Every path with a range delegated to a route `through` takes (each once).
    pub fn paths_through(&self, through: impl Fn(&Route) -> bool) -> Vec<String> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.iter()
            .filter(|(_, m)| m.iter().any(|(_, _, r)| through(r)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Whether any range of `path` is delegated.
    pub fn has(&self, path: &str) -> bool {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(path)
    }

    /// `[start, end)` of `path` cut by delegates; `None` when the file has none.
    pub fn segments(&self, path: &str, start: u64, end: u64) -> Option<Vec<Segment>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let m = map.get(path)?;
        Some(
            m.segments(start, end)
                .into_iter()
                .map(|(s, e, v)| (s, e, v.map(|(_, r)| r)))
                .collect(),
        )
    }

    /// A write of `[start, end)` of `path` went through `route`: later reads follow it (or, for
    /// a plain route, go back to matching rules).
    pub fn record(&self, path: &str, start: u64, end: u64, route: &Arc<Route>) -> io::Result<()> {
        let delegate = route.needs_delegate();
        {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            let unchanged = match map.get(path) {
                None => !delegate,
                Some(m) => delegate && m.covers_range(start, end, |r| Arc::ptr_eq(r, route)),
            };
            if unchanged {
                return Ok(());
            }
        }
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let rec = Record {
            seq,
            path: path.to_string(),
            start,
            end,
            route: delegate.then(|| route.spec.clone()),
        };
        let dir = route.journal_dir().filter(|_| delegate);
        self.append(dir.unwrap_or(&self.state_dir), &rec)?;
        let m = map.entry(path.to_string()).or_default();
        if delegate {
            m.insert(start, end, route.clone());
        } else {
            m.remove(start, end);
            if m.is_empty() {
                map.remove(path);
            }
        }
        Ok(())
    }

    /// Drops the delegates at and past `size` (truncate) or all of them (`size == 0`, unlink).
    pub fn truncate(&self, path: &str, size: u64) -> io::Result<()> {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        let Some(m) = map.get_mut(path) else {
            return Ok(());
        };
        let rec = Record {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            path: path.to_string(),
            start: size,
            end: u64::MAX,
            route: None,
        };
        self.append(&self.state_dir, &rec)?;
        m.remove(size, u64::MAX);
        if m.is_empty() {
            map.remove(path);
        }
        Ok(())
    }

    /// Moves the delegates of `from` (and of files under it) to `to`.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let moved: Vec<(String, String)> = {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            map.keys()
                .filter(|p| lachesis_switch::path_prefix_matches(from, p))
                .map(|p| (p.clone(), format!("{to}{}", &p[from.len()..])))
                .collect()
        };
        // The destination's old delegates go with the file it replaces.
        self.truncate(to, 0)?;
        for (old, new) in moved {
            let m = {
                let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
                map.remove(&old)
            };
            let Some(m) = m else { continue };
            self.append(
                &self.state_dir,
                &Record {
                    seq: self.seq.fetch_add(1, Ordering::Relaxed),
                    path: old,
                    start: 0,
                    end: u64::MAX,
                    route: None,
                },
            )?;
            for (s, e, r) in m.iter() {
                self.append(
                    r.journal_dir().unwrap_or(&self.state_dir),
                    &Record {
                        seq: self.seq.fetch_add(1, Ordering::Relaxed),
                        path: new.clone(),
                        start: s,
                        end: e,
                        route: Some(r.spec.clone()),
                    },
                )?;
            }
            self.map
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(new, m);
        }
        Ok(())
    }

    /// Makes the journals durable (after the data they point at).
    pub fn sync(&self) -> io::Result<()> {
        // Only journals with new records: every fsync of a switched file comes here, and an
        // fdatasync of an unchanged journal still flushes the disk's cache.
        let mut j = self.journals.lock().unwrap_or_else(|e| e.into_inner());
        for journal in j.values_mut().filter(|j| j.unsynced) {
            journal.file.sync_data()?;
            journal.unsynced = false;
        }
        Ok(())
    }

    fn append(&self, dir: &Path, rec: &Record) -> io::Result<()> {
        let mut j = self.journals.lock().unwrap_or_else(|e| e.into_inner());
        if !j.contains_key(dir) {
            let f = crate::private::open_append(&dir.join(JOURNAL))?;
            if dir != self.state_dir {
                // Remember the endpoint so a restart finds its journal even if no rule
                // names it any more.
                let known =
                    std::fs::read_to_string(self.state_dir.join(ENDPOINTS)).unwrap_or_default();
                let d = dir.to_string_lossy();
                if !known.lines().any(|l| l == d) {
                    let mut e = crate::private::open_append(&self.state_dir.join(ENDPOINTS))?;
                    writeln!(e, "{d}")?;
                    e.sync_data()?;
                }
            }
            j.insert(
                dir.to_path_buf(),
                Journal {
                    file: f,
                    unsynced: false,
                },
            );
        }
        let mut line = serde_json::to_vec(rec).map_err(io::Error::other)?;
        line.push(b'\n');
        let journal = j.get_mut(dir).expect("inserted");
        journal.unsynced = true;
        journal.file.write_all(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::StageRegistry;
    use lachesis_switch::{Detour, DetourKind, DetourWhat};

    fn endpoint_route(reg: &StageRegistry, dir: &Path) -> Arc<Route> {
        Arc::new(
            reg.build(RouteSpec {
                tenant: Some("w".into()),
                detours: vec![Detour::new(
                    DetourWhat::Io,
                    DetourKind::File,
                    dir.to_str().unwrap(),
                )],
            })
            .unwrap(),
        )
    }

    fn plain(reg: &StageRegistry) -> Arc<Route> {
        Arc::new(
            reg.build(RouteSpec {
                tenant: None,
                detours: vec![],
            })
            .unwrap(),
        )
    }

    #[test]
    fn writes_delegate_reads_and_a_restart_recovers_them() {
        let state = tempfile::tempdir().unwrap();
        let ep = tempfile::tempdir().unwrap();
        let reg = StageRegistry::default();
        let build = |s: &RouteSpec| reg.build(s.clone()).map(Arc::new);
        {
            let d = Delegates::open(state.path(), &[], build).unwrap();
            let y = endpoint_route(&reg, ep.path());
            assert!(d.segments("/f", 0, 10).is_none());
            d.record("/f", 100, 200, &y).unwrap();
            d.record("/f", 300, 400, &y).unwrap();
            // A later plain write takes part of a range back to the backing file.
            d.record("/f", 150, 160, &plain(&reg)).unwrap();
            d.rename("/f", "/g").unwrap();
            d.sync().unwrap();
            assert!(!d.has("/f"));
        }
        // The set records live with the endpoint's data.
        assert!(ep.path().join(JOURNAL).exists());
        let d = Delegates::open(state.path(), &[], build).unwrap();
        let segs = d.segments("/g", 0, 500).unwrap();
        let shape: Vec<_> = segs
            .iter()
            .map(|(s, e, r)| (*s, *e, r.as_ref().map(|r| r.replicas[0].clone())))
            .collect();
        let y = Some(ep.path().to_path_buf());
        assert_eq!(
            shape,
            vec![
                (0, 100, None),
                (100, 150, y.clone()),
                (150, 160, None),
                (160, 200, y.clone()),
                (200, 300, None),
                (300, 400, y.clone()),
                (400, 500, None)
            ]
        );
        d.truncate("/g", 120).unwrap();
        drop(d);
        let d = Delegates::open(state.path(), &[], build).unwrap();
        let segs = d.segments("/g", 0, 500).unwrap();
        assert_eq!(segs.iter().filter(|s| s.2.is_some()).count(), 1);
        d.truncate("/g", 0).unwrap();
        assert!(!d.has("/g"));
    }

    #[test]
    fn unchanged_delegates_are_not_journaled_twice() {
        let state = tempfile::tempdir().unwrap();
        let ep = tempfile::tempdir().unwrap();
        let reg = StageRegistry::default();
        let d = Delegates::open(state.path(), &[], |s| reg.build(s.clone()).map(Arc::new)).unwrap();
        let y = endpoint_route(&reg, ep.path());
        for _ in 0..5 {
            d.record("/f", 0, 4096, &y).unwrap();
        }
        d.record("/f", 0, 100, &y).unwrap();
        // Plain writes to files without delegates journal nothing.
        d.record("/other", 0, 10, &plain(&reg)).unwrap();
        let lines = std::fs::read_to_string(ep.path().join(JOURNAL)).unwrap();
        assert_eq!(lines.lines().count(), 1);
        assert!(!state.path().join(JOURNAL).exists());
    }
}
