//! Tenant classification: the opened file's path in the namespace, or the requesting
//! process's cgroup or uid, decides its tenant.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, RwLock};

use lachesis_switch::cgroup::Cgroup2Mount;

/// One way to recognise a tenant's IO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The requesting uid.
    Uid(u32),
    /// A cgroup v2 path prefix, component-wise (`/a` covers `/a` and `/a/b`, not `/ab`), as
    /// `/proc/PID/cgroup` shows it (relative to the cgroup2 root, not a host path: see
    /// [`Selector::cgroup`]).
    Cgroup(String),
    /// A prefix of the opened file's path in the mount's namespace (the path a rule's
    /// `path_prefix` matches), component-wise like a rule's, by the same
    /// [`lachesis_switch::path_prefix_matches`]: `/a` covers `/a` and `/a/b`, not `/ab`.
    PathPrefix(String),
}

impl Selector {
    /// The selector of a cgroup classifier `value`, given the host's cgroup2 mount (see
    /// [`cgroup2_mount`]). The value is compared with the `0::` line of `/proc/PID/cgroup`,
    /// which names a cgroup relative to the cgroup2 root (`/analytics`): a host path
    /// (`/sys/fs/cgroup/analytics`, or anything under the host's cgroup2 mount) would never
    /// match, so it is refused, with the path meant, instead of accepted and never matched
    /// (`lachesis_switch::cgroup`, shared with the eBPF metrics).
    pub fn cgroup(value: &str, mount: Option<&Cgroup2Mount>) -> Result<Selector, String> {
        lachesis_switch::cgroup::check_classifier(value, mount)?;
        Ok(Selector::Cgroup(value.to_string()))
    }
}

/// This host's cgroup2 mount, from `/proc/self/mountinfo` (`None` without one: then only
/// values under `/sys/fs/cgroup` are known to be host paths).
pub fn cgroup2_mount() -> Option<Cgroup2Mount> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    Cgroup2Mount::from_mountinfo(&info)
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
            Selector::PathPrefix(p) => write!(f, "{}=path:{p}", self.name),
        }
    }
}

impl std::str::FromStr for TenantSpec {
    type Err = String;

    /// `NAME=uid:N`, `NAME=cgroup:/PATH` or `NAME=path:/PREFIX`; a cgroup is judged against
    /// this host's cgroup2 mount.
    fn from_str(s: &str) -> Result<Self, String> {
        TenantSpec::parse_with(s, cgroup2_mount().as_ref())
    }
}

impl TenantSpec {
    /// As [`str::parse`], a cgroup judged against the cgroup2 mount `mount`.
    pub fn parse_with(s: &str, mount: Option<&Cgroup2Mount>) -> Result<Self, String> {
        let (name, sel) = s.split_once('=').ok_or_else(|| {
            format!("tenant {s:?}: expected NAME=path:PREFIX, NAME=uid:N or NAME=cgroup:PATH")
        })?;
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
            Some(("cgroup", p)) => {
                Selector::cgroup(p, mount).map_err(|e| format!("tenant {s:?}: {e}"))?
            }
            // Namespace paths are absolute ("/dir/file"): a relative prefix would match nothing.
            Some(("path", p)) if p.starts_with('/') => Selector::PathPrefix(p.to_string()),
            Some(("path", p)) => {
                return Err(format!("tenant {s:?}: path prefix {p:?} must start with /"))
            }
            _ => {
                return Err(format!(
                    "tenant {s:?}: selector {sel:?} must be path:PREFIX, uid:N or cgroup:PATH"
                ))
            }
        };
        Ok(TenantSpec {
            name: name.to_string(),
            selector,
        })
    }
}

/// Maps an open (the file's namespace path, the requesting pid and uid) to a tenant.
///
/// **Precedence** when several tenants' selectors match: a path prefix first, then a
/// cgroup, then a uid; among path prefixes (and among cgroups) the longest wins, trailing
/// `/` not counted, and of equally long ones the tenant declared first. Paths come first
/// because a path tenant names data, not who touches it: its cache, placement handle and
/// delegates must not depend on which process opened the file (a file read by two
/// processes of different cgroup tenants would otherwise be cached twice, in two tenants'
/// stages, and its writes placed by whoever wrote last). The longest prefix wins so nested
/// tenants (`/srv` and `/srv/web`) work as nested cgroups do.
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

    /// The tenant of an open of `path` (its namespace path) by `pid` as `uid`; reads
    /// `/proc/<pid>/cgroup` only when no path tenant claims the file and a cgroup selector
    /// exists.
    pub fn classify(&self, pid: u32, uid: u32, path: &str) -> Option<String> {
        let tenants = self.snapshot();
        if let Some(t) = by_path(&tenants, path) {
            return Some(t);
        }
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
        by_process(&tenants, cgroup.as_deref(), uid)
    }

    /// Classification given the request's cgroup v2 path (if known), uid and the file's
    /// namespace path.
    pub fn classify_with(&self, cgroup: Option<&str>, uid: u32, path: &str) -> Option<String> {
        let tenants = self.snapshot();
        by_path(&tenants, path).or_else(|| by_process(&tenants, cgroup, uid))
    }
}

/// The tenant whose selector `select` gives the longest prefix matching `of` (trailing `/`
/// not counted: `/a/` and `/a` are equally specific), the first declared on a tie.
fn longest<'a>(
    tenants: &'a [TenantSpec],
    of: &str,
    select: impl Fn(&Selector) -> Option<&str>,
) -> Option<&'a TenantSpec> {
    let mut best: Option<(usize, &TenantSpec)> = None;
    for t in tenants {
        let Some(p) = select(&t.selector) else {
            continue;
        };
        if !lachesis_switch::path_prefix_matches(p, of) {
            continue;
        }
        let len = p.trim_end_matches('/').len();
        // Strictly longer only: an equally long later prefix keeps the first.
        if best.is_none_or(|(l, _)| len > l) {
            best = Some((len, t));
        }
    }
    best.map(|(_, t)| t)
}

fn by_path(tenants: &[TenantSpec], path: &str) -> Option<String> {
    longest(tenants, path, |s| match s {
        Selector::PathPrefix(p) => Some(p),
        _ => None,
    })
    .map(|t| t.name.clone())
}

/// The tenant of the requesting process, when no path tenant claims the file: its cgroup's,
/// else its uid's.
fn by_process(tenants: &[TenantSpec], cgroup: Option<&str>, uid: u32) -> Option<String> {
    if let Some(cg) = cgroup {
        let best = longest(tenants, cg, |s| match s {
            Selector::Cgroup(p) => Some(p),
            _ => None,
        });
        if let Some(t) = best {
            return Some(t.name.clone());
        }
    }
    tenants
        .iter()
        .find(|t| t.selector == Selector::Uid(uid))
        .map(|t| t.name.clone())
}

/// Reads a tenants file: one `NAME=path:/PREFIX`, `NAME=uid:N` or `NAME=cgroup:/PATH` per
/// line; blank lines and lines starting with `#` are skipped. The error names the file and
/// line.
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
        assert_eq!(c.classify_with(None, 1001, "/f").as_deref(), Some("alice"));
        assert_eq!(c.classify_with(None, 1002, "/f"), None);
        assert_eq!(
            c.classify_with(Some("/jobs/x"), 1001, "/f").as_deref(),
            Some("batch")
        );
        assert_eq!(
            c.classify_with(Some("/jobs/etl/w1"), 0, "/f").as_deref(),
            Some("etl")
        );
        assert_eq!(c.classify_with(Some("/jobsx"), 0, "/f"), None);
        assert_eq!(
            c.classify_with(Some("/other"), 1001, "/f").as_deref(),
            Some("alice")
        );
    }

    #[test]
    fn replace_reaches_every_clone_and_keeps_earlier_answers() {
        let mounted = Classifier::default();
        let owner = mounted.clone();
        let before = mounted.classify_with(None, 1001, "/f");
        assert_eq!(before, None);
        owner.replace(&c());
        assert_eq!(
            mounted.classify_with(None, 1001, "/f").as_deref(),
            Some("alice")
        );
        assert_eq!(mounted.tenants().len(), 3);
        owner.replace(&Classifier::new(vec!["bob=uid:1001".parse().unwrap()]));
        assert_eq!(
            mounted.classify_with(None, 1001, "/f").as_deref(),
            Some("bob")
        );
        assert_eq!(mounted.classify_with(Some("/jobs"), 0, "/f"), None);
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
    fn path_prefix_is_component_wise() {
        for prefix in ["/srv/web", "/srv/web/"] {
            let c = Classifier::new(vec![format!("web=path:{prefix}").parse().unwrap()]);
            let of = |p: &str| c.classify_with(None, 0, p);
            assert_eq!(of("/srv/web").as_deref(), Some("web"), "{prefix}");
            assert_eq!(of("/srv/web/a").as_deref(), Some("web"), "{prefix}");
            assert_eq!(of("/srv/web/a/b/c").as_deref(), Some("web"), "{prefix}");
            // A sibling whose name starts with the prefix's last component is not under it.
            assert_eq!(of("/srv/webx"), None, "{prefix}");
            assert_eq!(of("/srv/webx/a"), None, "{prefix}");
            assert_eq!(of("/srv"), None, "{prefix}");
            assert_eq!(of("/other/srv/web"), None, "{prefix}");
        }
    }

    #[test]
    fn precedence_path_then_cgroup_then_uid_longest_prefix_first_declared_on_a_tie() {
        let c = Classifier::new(vec![
            "alice=uid:1001".parse().unwrap(),
            "batch=cgroup:/jobs".parse().unwrap(),
            "srv=path:/srv".parse().unwrap(),
            "web=path:/srv/web/".parse().unwrap(),
            "static=path:/srv/web/static".parse().unwrap(),
            // As specific as web's (a trailing / does not count), declared later: never wins.
            "web2=path:/srv/web".parse().unwrap(),
        ]);
        // A path tenant claims the file whoever opens it.
        assert_eq!(
            c.classify_with(Some("/jobs/x"), 1001, "/srv/a").as_deref(),
            Some("srv")
        );
        // The most specific path prefix wins, wherever it was declared.
        assert_eq!(
            c.classify_with(None, 0, "/srv/web/a").as_deref(),
            Some("web")
        );
        assert_eq!(
            c.classify_with(None, 0, "/srv/web/static/x").as_deref(),
            Some("static")
        );
        assert_eq!(c.classify_with(None, 0, "/srv/web").as_deref(), Some("web"));
        // No path tenant claims the file: the process's cgroup, then its uid.
        assert_eq!(
            c.classify_with(Some("/jobs/x"), 1001, "/home/f").as_deref(),
            Some("batch")
        );
        assert_eq!(
            c.classify_with(Some("/other"), 1001, "/home/f").as_deref(),
            Some("alice")
        );
        assert_eq!(
            c.classify_with(None, 1001, "/srvx").as_deref(),
            Some("alice")
        );
        assert_eq!(c.classify_with(None, 7, "/home/f"), None);
        // Equally specific cgroups: the first declared, as for paths.
        let c = Classifier::new(vec![
            "one=cgroup:/jobs/".parse().unwrap(),
            "two=cgroup:/jobs".parse().unwrap(),
        ]);
        assert_eq!(
            c.classify_with(Some("/jobs/x"), 0, "/f").as_deref(),
            Some("one")
        );
    }

    #[test]
    fn a_path_tenant_is_classified_without_reading_proc() {
        // pid 0 has no /proc entry: only the path and the uid can decide.
        let c = Classifier::new(vec![
            "web=path:/srv/web".parse().unwrap(),
            "batch=cgroup:/jobs".parse().unwrap(),
        ]);
        assert_eq!(c.classify(0, 0, "/srv/web/x").as_deref(), Some("web"));
        assert_eq!(c.classify(0, 0, "/home/x"), None);
    }

    #[test]
    fn path_specs_parse_and_print_back() {
        let t: TenantSpec = "web=path:/srv/web/".parse().unwrap();
        assert_eq!(t.selector, Selector::PathPrefix("/srv/web/".into()));
        assert_eq!(t.to_string(), "web=path:/srv/web/");
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tenants");
        std::fs::write(&p, "web=path:/srv/web\nalice=uid:1001\n").unwrap();
        let c = Classifier::new(load_tenants(&p).unwrap());
        assert_eq!(
            c.classify_with(None, 1001, "/srv/web/i").as_deref(),
            Some("web")
        );
        std::fs::write(&p, "web=path:/srv/web\nbad=path:srv\n").unwrap();
        let e = load_tenants(&p).unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("must start with /"),
            "{e}"
        );
    }

    #[test]
    fn parses_proc_cgroup() {
        let text = "9:name=systemd:/\n4:memory:/x\n0::/jobs/etl\n";
        assert_eq!(cgroup_v2_path(text), Some("/jobs/etl"));
        assert_eq!(cgroup_v2_path("4:memory:/x\n"), None);
    }

    // This CI host's /proc/self/mountinfo (abridged): cgroup v1 controllers under a tmpfs at
    // /sys/fs/cgroup, cgroup2 beside them at /sys/fs/cgroup/unified.
    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_cgroup_tenant_is_the_path_proc_pid_cgroup_shows_and_a_host_path_is_refused() {
        let mount = Cgroup2Mount::from_mountinfo(HYBRID_MOUNTINFO);
        // /proc/PID/cgroup of a process in the analytics cgroup (its directory is
        // /sys/fs/cgroup/unified/analytics/job1 on this host, /sys/fs/cgroup/... on a pure v2
        // one): the v2 line names it from the cgroup2 root.
        let proc_cgroup = "4:memory:/x\n1:name=systemd:/\n0::/analytics/job1\n";
        let c = Classifier::new(vec![TenantSpec::parse_with(
            "analytics=cgroup:/analytics",
            mount.as_ref(),
        )
        .unwrap()]);
        assert_eq!(
            c.classify_with(cgroup_v2_path(proc_cgroup), 0, "/f")
                .as_deref(),
            Some("analytics")
        );
        // A host path never equals what /proc/PID/cgroup shows: refused, naming the path meant,
        // where it was accepted and matched no open.
        for host_path in [
            "/sys/fs/cgroup/analytics",
            "/sys/fs/cgroup/unified/analytics",
            "/sys/fs/cgroup/unified/analytics/",
        ] {
            let e =
                TenantSpec::parse_with(&format!("analytics=cgroup:{host_path}"), mount.as_ref())
                    .unwrap_err();
            assert!(
                e.contains("host path") && e.contains("\"/analytics\""),
                "{host_path}: {e}"
            );
            assert!(format!("analytics=cgroup:{host_path}")
                .parse::<TenantSpec>()
                .is_err());
        }
        // cgroup2 mounted elsewhere: this host's mount point, from its mountinfo, is a host
        // path too; on a host where it is not mounted, it is a cgroup like any other.
        let elsewhere =
            Cgroup2Mount::from_mountinfo("30 1 0:26 / /run/cg2 rw shared:9 - cgroup2 cgroup2 rw\n");
        assert!(TenantSpec::parse_with("a=cgroup:/run/cg2/analytics", elsewhere.as_ref()).is_err());
        assert!(TenantSpec::parse_with("a=cgroup:/run/cg2/analytics", mount.as_ref()).is_ok());
    }

    #[test]
    fn own_process_classifies_by_uid() {
        let me = unsafe { libc::getuid() };
        let c = Classifier::new(vec![format!("me=uid:{me}").parse().unwrap()]);
        assert_eq!(
            c.classify(std::process::id(), me, "/f").as_deref(),
            Some("me")
        );
    }

    #[test]
    fn bad_tenant_specs_are_refused_with_a_reason() {
        for (s, why) in [
            ("alice", "expected NAME="),
            ("alice=uid:x", "not a number"),
            ("alice=cgroup:jobs", "must start with /"),
            ("alice=gid:3", "must be path:PREFIX, uid:N or cgroup:PATH"),
            ("alice=path:srv/web", "must start with /"),
            ("Bad Name=uid:1", "tenant"),
        ] {
            let e = s.parse::<TenantSpec>().unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
