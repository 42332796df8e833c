//! Tenant classification: the requesting process's uid or cgroup decides its tenant.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, RwLock};

/// One way to recognise a tenant's IO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The requesting uid.
    Uid(u32),
    /// A cgroup v2 path prefix, component-wise (`/a` covers `/a` and `/a/b`, not `/ab`).
    Cgroup(String),
}

/// A tenant name and its selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSpec {
    pub name: String,
    pub selector: Selector,
}

impl fmt::Display for TenantSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.selector {
            Selector::Uid(u) => write!(f, "{}=uid:{u}", self.name),
            Selector::Cgroup(p) => write!(f, "{}=cgroup:{p}", self.name),
        }
    }
}

impl std::str::FromStr for TenantSpec {
    type Err = String;

    /// `NAME=uid:N` or `NAME=cgroup:/PATH`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, sel) = s
            .split_once('=')
            .ok_or_else(|| format!("tenant {s:?}: expected NAME=uid:N or NAME=cgroup:PATH"))?;
        if !lachesis_switch::names::is_valid_name(name) {
            return Err(format!(
                "tenant {s:?}: {}",
                lachesis_switch::names::name_error(name)
            ));
        }
        let selector = match sel.split_once(':') {
            Some(("uid", n)) => Selector::Uid(
                n.parse()
                    .map_err(|_| format!("tenant {s:?}: uid {n:?} is not a number"))?,
            ),
            Some(("cgroup", p)) if p.starts_with('/') => Selector::Cgroup(p.to_string()),
            Some(("cgroup", p)) => {
                return Err(format!("tenant {s:?}: cgroup path {p:?} must start with /"))
            }
            _ => {
                return Err(format!(
                    "tenant {s:?}: selector {sel:?} must be uid:N or cgroup:PATH"
                ))
            }
        };
        Ok(TenantSpec {
            name: name.to_string(),
            selector,
        })
    }
}

/// Maps a request (pid, uid) to a tenant: cgroup selectors first (more specific), then uid.
///
/// A shared handle: clones see the same tenants, and [`Classifier::replace`] changes them for
/// every clone at once, so the owner of a mounted switch (the agent, `lachesis-fs mount
/// --tenants-file`) can change tenants without a remount. Files are classified at open: a
/// handle keeps the tenant it was opened as (like the credentials of an open file), the next
/// open sees the new tenants. Classifying every request instead would cost a `/proc` read
/// per IO and could move one handle's IO between flows mid-stream.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    tenants: Arc<RwLock<Arc<Vec<TenantSpec>>>>,
}

impl Classifier {
    pub fn new(tenants: Vec<TenantSpec>) -> Self {
        Classifier {
            tenants: Arc::new(RwLock::new(Arc::new(tenants))),
        }
    }

    fn snapshot(&self) -> Arc<Vec<TenantSpec>> {
        self.tenants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The tenants as of now.
    pub fn tenants(&self) -> Vec<TenantSpec> {
        self.snapshot().to_vec()
    }

    /// Takes `other`'s tenants, for this handle and every clone of it (opens from now on).
    pub fn replace(&self, other: &Classifier) {
        let t = other.snapshot();
        *self.tenants.write().unwrap_or_else(|e| e.into_inner()) = t;
    }

    /// The tenant of a request; reads `/proc/<pid>/cgroup` only when a cgroup selector exists.
    pub fn classify(&self, pid: u32, uid: u32) -> Option<String> {
        let tenants = self.snapshot();
        let needs_cgroup = tenants
            .iter()
            .any(|t| matches!(t.selector, Selector::Cgroup(_)));
        let cgroup = if needs_cgroup && pid != 0 {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .ok()
                .and_then(|s| cgroup_v2_path(&s).map(str::to_string))
        } else {
            None
        };
        classify_in(&tenants, cgroup.as_deref(), uid)
    }

    /// Classification given the request's cgroup v2 path (if known) and uid.
    pub fn classify_with(&self, cgroup: Option<&str>, uid: u32) -> Option<String> {
        classify_in(&self.snapshot(), cgroup, uid)
    }
}

fn classify_in(tenants: &[TenantSpec], cgroup: Option<&str>, uid: u32) -> Option<String> {
    if let Some(cg) = cgroup {
        // The longest matching cgroup prefix wins, so nested tenants work.
        let best = tenants
            .iter()
            .filter_map(|t| match &t.selector {
                Selector::Cgroup(p) if lachesis_switch::path_prefix_matches(p, cg) => {
                    Some((p.len(), t))
                }
                _ => None,
            })
            .max_by_key(|(len, _)| *len);
        if let Some((_, t)) = best {
            return Some(t.name.clone());
        }
    }
    tenants
        .iter()
        .find(|t| t.selector == Selector::Uid(uid))
        .map(|t| t.name.clone())
}

/// Reads a tenants file: one `NAME=uid:N` or `NAME=cgroup:/PATH` per line; blank lines and
/// lines starting with `#` are skipped. The error names the file and line.
pub fn load_tenants(path: &Path) -> Result<Vec<TenantSpec>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("tenants file {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| (i, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            l.parse()
                .map_err(|e| format!("tenants file {} line {}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// The cgroup v2 path in the text of `/proc/<pid>/cgroup` (the `0::` line).
pub fn cgroup_v2_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c() -> Classifier {
        Classifier::new(vec![
            "alice=uid:1001".parse().unwrap(),
            "batch=cgroup:/jobs".parse().unwrap(),
            "etl=cgroup:/jobs/etl".parse().unwrap(),
        ])
    }

    #[test]
    fn uid_and_cgroup_classification() {
        let c = c();
        assert_eq!(c.classify_with(None, 1001).as_deref(), Some("alice"));
        assert_eq!(c.classify_with(None, 1002), None);
        assert_eq!(
            c.classify_with(Some("/jobs/x"), 1001).as_deref(),
            Some("batch")
        );
        assert_eq!(
            c.classify_with(Some("/jobs/etl/w1"), 0).as_deref(),
            Some("etl")
        );
        assert_eq!(c.classify_with(Some("/jobsx"), 0), None);
        assert_eq!(
            c.classify_with(Some("/other"), 1001).as_deref(),
            Some("alice")
        );
    }

    #[test]
    fn replace_reaches_every_clone_and_keeps_earlier_answers() {
        let mounted = Classifier::default();
        let owner = mounted.clone();
        let before = mounted.classify_with(None, 1001);
        assert_eq!(before, None);
        owner.replace(&c());
        assert_eq!(mounted.classify_with(None, 1001).as_deref(), Some("alice"));
        assert_eq!(mounted.tenants().len(), 3);
        owner.replace(&Classifier::new(vec!["bob=uid:1001".parse().unwrap()]));
        assert_eq!(mounted.classify_with(None, 1001).as_deref(), Some("bob"));
        assert_eq!(mounted.classify_with(Some("/jobs"), 0), None);
    }

    #[test]
    fn tenants_file_parses_and_names_the_bad_line() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tenants");
        std::fs::write(&p, "# who\nalice=uid:1001\n\n  batch=cgroup:/jobs \n").unwrap();
        let t = load_tenants(&p).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].to_string(), "batch=cgroup:/jobs");
        std::fs::write(&p, "alice=uid:1001\nbob=uid:x\n").unwrap();
        let e = load_tenants(&p).unwrap_err();
        assert!(e.contains("line 2") && e.contains("not a number"), "{e}");
        assert!(load_tenants(&d.path().join("none")).is_err());
    }

    #[test]
    fn parses_proc_cgroup() {
        let text = "9:name=systemd:/\n4:memory:/x\n0::/jobs/etl\n";
        assert_eq!(cgroup_v2_path(text), Some("/jobs/etl"));
        assert_eq!(cgroup_v2_path("4:memory:/x\n"), None);
    }

    #[test]
    fn own_process_classifies_by_uid() {
        let me = unsafe { libc::getuid() };
        let c = Classifier::new(vec![format!("me=uid:{me}").parse().unwrap()]);
        assert_eq!(c.classify(std::process::id(), me).as_deref(), Some("me"));
    }

    #[test]
    fn bad_tenant_specs_are_refused_with_a_reason() {
        for (s, why) in [
            ("alice", "expected NAME="),
            ("alice=uid:x", "not a number"),
            ("alice=cgroup:jobs", "must start with /"),
            ("alice=gid:3", "must be uid:N or cgroup:PATH"),
            ("Bad Name=uid:1", "tenant"),
        ] {
            let e = s.parse::<TenantSpec>().unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
