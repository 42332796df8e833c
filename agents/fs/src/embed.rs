//! For programs that embed the switch (the agent): mount it in-process, and turn the bus's
//! tenant classifiers into the switch's [`Classifier`], with the same mount options as
//! `lachesis-fs mount`.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::classify::{Classifier, Selector, TenantSpec};
use crate::fuse::SwitchFs;
use crate::Switch;

pub use fuser::BackgroundSession;

/// Name of the state directory kept at the root of the backing directory, hidden from the
/// namespace (as `lachesis-fs mount` does without `--state-dir`).
pub const STATE_DIR: &str = ".lachesis-fs";

/// The FUSE classifier for bus tenants. Only `uid` and `cgroup` classifiers can be decided at
/// the mount; the others (process, path or key prefix) are returned as `tenant/kind` so the
/// caller can say they are ignored here.
pub fn classifier_of(tenants: &[lachesis_switch::Tenant]) -> (Classifier, Vec<String>) {
    use lachesis_switch::ClassifierKind as K;
    let mut specs = Vec::new();
    let mut ignored = Vec::new();
    for t in tenants {
        for c in &t.classifiers {
            let selector = match c.kind {
                K::Uid => c.value.parse().ok().map(Selector::Uid),
                K::Cgroup if c.value.starts_with('/') => Some(Selector::Cgroup(c.value.clone())),
                _ => None,
            };
            match selector {
                Some(selector) => specs.push(TenantSpec {
                    name: t.name.clone(),
                    selector,
                }),
                None => ignored.push(format!("{}/{:?}={}", t.name, c.kind, c.value)),
            }
        }
    }
    (Classifier::new(specs), ignored)
}

/// Mounts `switch` over `backing` at `mountpoint` (kernel passthrough on, the state
/// directory hidden) and serves it on `threads` FUSE threads until the session is dropped or
/// unmounted.
pub fn mount(
    backing: &Path,
    mountpoint: &Path,
    switch: Arc<Switch>,
    classifier: Classifier,
    threads: usize,
) -> io::Result<fuser::BackgroundSession> {
    let fs = SwitchFs::new(
        backing,
        switch,
        classifier,
        true,
        Some(STATE_DIR.to_string()),
    )?;
    fuser::spawn_mount(fs, mountpoint, &crate::fuse::mount_config(threads.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_switch::{Classifier as BusClassifier, ClassifierKind, Tenant};

    #[test]
    fn uid_and_cgroup_classifiers_carry_over_the_rest_is_reported() {
        let t = |name: &str, kind, value: &str| Tenant {
            name: name.into(),
            classifiers: vec![BusClassifier {
                kind,
                value: value.into(),
            }],
        };
        let (c, ignored) = classifier_of(&[
            t("a", ClassifierKind::Uid, "1001"),
            t("b", ClassifierKind::Cgroup, "/jobs/b"),
            t("c", ClassifierKind::Process, "postgres"),
        ]);
        assert_eq!(c.classify_with(None, 1001).as_deref(), Some("a"));
        assert_eq!(c.classify_with(Some("/jobs/b/x"), 0).as_deref(), Some("b"));
        assert_eq!(c.classify_with(None, 0), None);
        assert_eq!(ignored.len(), 1);
        assert!(ignored[0].starts_with("c/"), "{ignored:?}");
    }
}
