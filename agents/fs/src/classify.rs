//! Tenant classification: the requesting process's uid or cgroup decides its tenant.

use std::fmt;

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
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    tenants: Vec<TenantSpec>,
}

impl Classifier {
    pub fn new(tenants: Vec<TenantSpec>) -> Self {
        Classifier { tenants }
    }

    /// The tenant of a request; reads `/proc/<pid>/cgroup` only when a cgroup selector exists.
    pub fn classify(&self, pid: u32, uid: u32) -> Option<String> {
        let needs_cgroup = self
            .tenants
            .iter()
            .any(|t| matches!(t.selector, Selector::Cgroup(_)));
        let cgroup = if needs_cgroup && pid != 0 {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .ok()
                .and_then(|s| cgroup_v2_path(&s).map(str::to_string))
        } else {
            None
        };
        self.classify_with(cgroup.as_deref(), uid)
    }

    /// Classification given the request's cgroup v2 path (if known) and uid.
    pub fn classify_with(&self, cgroup: Option<&str>, uid: u32) -> Option<String> {
        if let Some(cg) = cgroup {
            // The longest matching cgroup prefix wins, so nested tenants work.
            let best = self
                .tenants
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
        self.tenants
            .iter()
            .find(|t| t.selector == Selector::Uid(uid))
            .map(|t| t.name.clone())
    }
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
