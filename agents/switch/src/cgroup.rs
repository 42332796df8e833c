//! The one meaning of a `cgroup` tenant classifier's value, for every part of an agent that
//! decides it (the FUSE switch at open, the eBPF metrics' cgroup map).
//!
//! The value is a cgroup v2 path relative to the cgroup2 hierarchy's root: what the `0::`
//! line of `/proc/PID/cgroup` shows (`/analytics`, `/system.slice/nginx.service`), which is
//! what the FUSE switch compares at open. It is not a host path: `/sys/fs/cgroup/analytics`
//! names the same cgroup as `/analytics` only on a host with cgroup2 mounted at
//! `/sys/fs/cgroup` (on a hybrid host it is `/sys/fs/cgroup/unified/analytics`), and no
//! process's `/proc/PID/cgroup` ever shows it. Such a value is refused ([`check_classifier`])
//! rather than rewritten: one spelling, one meaning on every host, whatever its mounts.
//!
//! Pure text: callers read `/proc/self/mountinfo` themselves (this crate does no IO).

use std::path::PathBuf;

use crate::rule::path_prefix_matches;

/// Where cgroup v2 is mounted on most hosts (`/sys/fs/cgroup` on a pure v2 host,
/// `/sys/fs/cgroup/unified` on a hybrid one). A value under it is a host path even where the
/// host's own mount is elsewhere: the controller, which knows no host's mounts, refuses the
/// same.
pub const CONVENTIONAL_MOUNT: &str = "/sys/fs/cgroup";

/// A cgroup2 mount, from a line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup2Mount {
    /// The cgroup the mount shows at its mount point, as `/proc/PID/cgroup` names it (`/`
    /// unless the mount is of a subtree, e.g. a container's without a cgroup namespace).
    pub root: String,
    /// Where it is mounted (`/sys/fs/cgroup`, `/sys/fs/cgroup/unified`).
    pub mount_point: String,
}

impl Cgroup2Mount {
    /// The first cgroup2 mount in the text of `/proc/self/mountinfo`, if any.
    pub fn from_mountinfo(mountinfo: &str) -> Option<Self> {
        mountinfo.lines().find_map(|line| {
            // "id parent major:minor root mount_point options [optional...] - fstype source super"
            let (left, right) = line.split_once(" - ")?;
            if right.split_whitespace().next() != Some("cgroup2") {
                return None;
            }
            let mut fields = left.split_whitespace().skip(3);
            let root = unescape_mountinfo(fields.next()?);
            let mount_point = unescape_mountinfo(fields.next()?);
            Some(Cgroup2Mount { root, mount_point })
        })
    }

    /// The host directory of the cgroup `cgroup` (a classifier's value), or `None` when that
    /// cgroup is outside what this mount shows.
    pub fn dir_of(&self, cgroup: &str) -> Option<PathBuf> {
        if !path_prefix_matches(&self.root, cgroup) {
            return None;
        }
        let rest = cgroup[self.root.trim_end_matches('/').len()..].trim_matches('/');
        let mut dir = PathBuf::from(&self.mount_point);
        if !rest.is_empty() {
            dir.push(rest);
        }
        Some(dir)
    }
}

/// Why `value` is not a cgroup classifier, if it is not: it must be absolute, and not a host
/// path (under [`CONVENTIONAL_MOUNT`] or under `mount`'s mount point), since no
/// `/proc/PID/cgroup` shows one and the FUSE switch would never match it. The reason names the
/// cgroup path to write instead where it can tell.
pub fn check_classifier(value: &str, mount: Option<&Cgroup2Mount>) -> Result<(), String> {
    if !value.starts_with('/') {
        return Err(format!("cgroup path {value:?} must start with /"));
    }
    let mut under: Vec<&str> = vec![CONVENTIONAL_MOUNT];
    if let Some(m) = mount {
        // A cgroup2 mounted at / (never in practice) would make every path a host path.
        if !m.mount_point.trim_end_matches('/').is_empty() {
            under.push(&m.mount_point);
        }
    }
    // The longest mount point it is under says what it was meant as (`/sys/fs/cgroup/unified`
    // over `/sys/fs/cgroup` on a hybrid host).
    let Some(mp) = under
        .into_iter()
        .filter(|mp| path_prefix_matches(mp, value))
        .max_by_key(|mp| mp.trim_end_matches('/').len())
    else {
        return Ok(());
    };
    let rest = value[mp.trim_end_matches('/').len()..].trim_end_matches('/');
    let rest = if rest.is_empty() { "/" } else { rest };
    Err(format!(
        "cgroup {value:?} is a host path under the cgroup2 mount {mp}: a cgroup classifier is the \
         path /proc/PID/cgroup shows, relative to the cgroup2 root (here probably {rest:?})"
    ))
}

/// Undoes mountinfo's escapes (space, tab, newline and backslash as `\ooo`).
pub fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // Three octal digits, the first at most 3: a byte (a `\` before anything else is kept).
        if b[i] == b'\\'
            && i + 3 < b.len()
            && (b'0'..=b'3').contains(&b[i + 1])
            && b[i + 2..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    // This CI host's: cgroup v1 controllers beside cgroup2 at /sys/fs/cgroup/unified.
    const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
        35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    #[test]
    fn finds_the_cgroup2_mount_and_its_root() {
        let m = Cgroup2Mount::from_mountinfo(HYBRID).unwrap();
        assert_eq!(m.mount_point, "/sys/fs/cgroup/unified");
        assert_eq!(m.root, "/");
        let sub = "50 1 0:40 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let m = Cgroup2Mount::from_mountinfo(sub).unwrap();
        assert_eq!(
            (m.root.as_str(), m.mount_point.as_str()),
            ("/docker/abc", "/sys/fs/cgroup")
        );
        let spaced = r"50 1 0:40 / /run/my\040cg rw shared:5 - cgroup2 none rw";
        assert_eq!(
            Cgroup2Mount::from_mountinfo(spaced).unwrap().mount_point,
            "/run/my cg"
        );
        assert_eq!(
            Cgroup2Mount::from_mountinfo("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"),
            None
        );
    }

    #[test]
    fn a_cgroup_path_is_under_the_mount_root() {
        let m = Cgroup2Mount::from_mountinfo(HYBRID).unwrap();
        assert_eq!(
            m.dir_of("/analytics"),
            Some("/sys/fs/cgroup/unified/analytics".into())
        );
        assert_eq!(m.dir_of("/a/b/"), Some("/sys/fs/cgroup/unified/a/b".into()));
        assert_eq!(m.dir_of("/"), Some("/sys/fs/cgroup/unified".into()));
        let sub = Cgroup2Mount {
            root: "/docker/abc".into(),
            mount_point: "/sys/fs/cgroup".into(),
        };
        assert_eq!(
            sub.dir_of("/docker/abc/job"),
            Some("/sys/fs/cgroup/job".into())
        );
        assert_eq!(sub.dir_of("/docker/abcd"), None);
        assert_eq!(sub.dir_of("/analytics"), None);
    }

    #[test]
    fn host_paths_are_refused_naming_the_cgroup_path() {
        let m = Cgroup2Mount::from_mountinfo(HYBRID).unwrap();
        for (value, mount, meant) in [
            (
                "/sys/fs/cgroup/unified/analytics",
                Some(&m),
                "\"/analytics\"",
            ),
            ("/sys/fs/cgroup/analytics", Some(&m), "\"/analytics\""),
            ("/sys/fs/cgroup/analytics/", None, "\"/analytics\""),
            ("/sys/fs/cgroup", None, "\"/\""),
        ] {
            let e = check_classifier(value, mount).unwrap_err();
            assert!(e.contains("host path") && e.contains(meant), "{value}: {e}");
        }
        let elsewhere = Cgroup2Mount {
            root: "/".into(),
            mount_point: "/run/cg2".into(),
        };
        let e = check_classifier("/run/cg2/jobs", Some(&elsewhere)).unwrap_err();
        assert!(e.contains("/run/cg2") && e.contains("\"/jobs\""), "{e}");
        for fine in ["/analytics", "/sys", "/sys/fs/cgroupx/a", "/run/cg2x", "/"] {
            assert_eq!(check_classifier(fine, Some(&elsewhere)), Ok(()), "{fine}");
        }
        assert!(check_classifier("jobs", None)
            .unwrap_err()
            .contains("must start with /"));
    }
}
