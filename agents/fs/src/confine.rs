//! Where rules may make the switch write: endpoint directories, header logs and log stages'
//! directories must lie under the configured roots. The switch runs as root and rules come
//! from tenant operators, so a target such as `/etc` would otherwise let a tenant create
//! root-owned files anywhere.
//!
//! A target is resolved before it is compared: `..` is refused outright, and the longest
//! part of it that exists is canonicalised, so a symlink inside a root that points out of it
//! does not lead out either.

use std::path::{Component, Path, PathBuf};

/// The roots targets must lie under; `None`: anywhere (the standalone `lachesis-fs mount`,
/// whose rules file its operator writes, unless given `--endpoint-root`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roots(Option<Vec<PathBuf>>);

impl Roots {
    /// No confinement.
    pub fn anywhere() -> Self {
        Roots(None)
    }

    /// Targets must lie under one of `roots` (existing directories, canonicalised here).
    pub fn under(roots: &[PathBuf]) -> Result<Self, String> {
        let mut out = Vec::with_capacity(roots.len());
        for r in roots {
            let c = r
                .canonicalize()
                .map_err(|e| format!("endpoint root {}: {e}", r.display()))?;
            if !c.is_dir() {
                return Err(format!("endpoint root {}: not a directory", r.display()));
            }
            if !out.contains(&c) {
                out.push(c);
            }
        }
        Ok(Roots(Some(out)))
    }

    /// The configured roots (canonical), `None` when unconfined.
    pub fn list(&self) -> Option<&[PathBuf]> {
        self.0.as_deref()
    }

    /// Refuses `target` (an absolute local path, of the kind `what`) unless it lies under a
    /// root; the error names the target and the roots.
    pub fn check(&self, what: &str, target: &str) -> Result<(), String> {
        let p = Path::new(target);
        if !p.is_absolute() {
            return Err(format!("{what} {target:?}: expected an absolute path"));
        }
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(format!("{what} {target:?}: '..' is not allowed in a path"));
        }
        let Some(roots) = &self.0 else {
            return Ok(());
        };
        let resolved = resolve(p);
        if roots.iter().any(|r| resolved.starts_with(r)) {
            return Ok(());
        }
        let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        Err(format!(
            "{what} {target:?} is outside this agent's endpoint roots ({}); the switch writes only under them (lachesis-agent run --endpoint-root)",
            if list.is_empty() { "none".to_string() } else { list.join(", ") }
        ))
    }
}

/// `p` (absolute, no `..`) with its longest existing prefix canonicalised.
fn resolve(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            return rest
                .iter()
                .rev()
                .fold(c, |acc, part: &std::ffi::OsString| acc.join(part));
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            // Only `/` is left and it did not canonicalise: keep the path as written.
            _ => return p.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_outside_the_roots_are_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("ep");
        std::fs::create_dir(&root).unwrap();
        let roots = Roots::under(std::slice::from_ref(&root)).unwrap();
        let inside = root.join("a/b").display().to_string();
        roots.check("endpoint", &inside).unwrap();
        roots
            .check("endpoint", &root.display().to_string())
            .unwrap();

        let e = roots.check("endpoint", "/etc").unwrap_err();
        assert!(e.contains("endpoint \"/etc\" is outside"), "{e}");
        assert!(
            e.contains(&root.canonicalize().unwrap().display().to_string()),
            "{e}"
        );
        // A sibling whose name starts like the root is not under it.
        let e = roots
            .check("header log", &format!("{}x/log", root.display()))
            .unwrap_err();
        assert!(e.starts_with("header log"), "{e}");
        let e = roots
            .check("endpoint", &format!("{}/../etc", root.display()))
            .unwrap_err();
        assert!(e.contains("'..'"), "{e}");
        assert!(roots.check("endpoint", "relative/dir").is_err());
        // Unconfined: anything absolute goes.
        Roots::anywhere().check("endpoint", "/etc").unwrap();
    }

    #[test]
    fn a_symlink_inside_a_root_does_not_lead_out() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("ep");
        let outside = d.path().join("outside");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let roots = Roots::under(std::slice::from_ref(&root)).unwrap();
        let e = roots
            .check("endpoint", &root.join("link/new").display().to_string())
            .unwrap_err();
        assert!(e.contains("is outside"), "{e}");
        assert!(Roots::under(&[d.path().join("missing")]).is_err());
    }
}
