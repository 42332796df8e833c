//! For programs that embed the switch (the agent): mount it in-process, and turn the bus's
//! tenant classifiers into the switch's [`Classifier`], with the same mount options as
//! `lachesis-fs mount`.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

use lachesis_switch::cgroup::Cgroup2Mount;
use lachesis_switch::{ClassifierKind, Op};

use crate::classify::{Classifier, Selector, TenantSpec};
use crate::fuse::SwitchFs;
use crate::Switch;

pub use lachesis_fusering::Session as BackgroundSession;

/// Name of the state directory kept at the root of the backing directory, hidden from the
/// namespace (as `lachesis-fs mount` does without `--state-dir`).
pub const STATE_DIR: &str = ".lachesis-fs";

/// The classifier kinds the FUSE switch decides at open (the agent registers them, so the
/// controller can refuse a tenant the switch could not recognise before anything ships).
pub const CLASSIFIER_KINDS: [ClassifierKind; 3] = [
    ClassifierKind::Cgroup,
    ClassifierKind::PathPrefix,
    ClassifierKind::Uid,
];

/// The operations of the IO the FUSE switch routes: reads and writes. Creating and removing
/// names pass through to the backing directory, so a rule's `create` or `delete` op would
/// never match here; the agent registers these and the controller refuses the others.
pub const OPS: [Op; 2] = [Op::Read, Op::Write];

/// A tenant's classifier the FUSE switch cannot decide. Refused, never dropped: a tenant
/// the switch accepted but could not recognise would get none of its rules, silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unclassifiable {
    pub tenant: String,
    /// The classifier's index in the tenant's `classifiers`.
    pub index: usize,
    pub kind: ClassifierKind,
    pub reason: String,
}

impl fmt::Display for Unclassifiable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tenant {:?}: classifiers[{}] ({}): {}",
            self.tenant, self.index, self.kind, self.reason
        )
    }
}

impl std::error::Error for Unclassifiable {}

/// The FUSE classifier for bus tenants: `path_prefix` (the namespace path, as a rule's),
/// `uid` and `cgroup` classifiers are decided at open. A `key_prefix` classifier is left to
/// the key-value front end (a file IO carries no key, so no open can be that tenant's by
/// it). Anything else (a `process` classifier, a uid that is not a number, a relative
/// path, a cgroup written as a host path) is returned as an error, every such classifier
/// named.
pub fn classifier_of(
    tenants: &[lachesis_switch::Tenant],
) -> Result<Classifier, Vec<Unclassifiable>> {
    classifier_of_with(tenants, crate::classify::cgroup2_mount().as_ref())
}

/// [`classifier_of`], cgroups judged against the cgroup2 mount `mount`.
pub fn classifier_of_with(
    tenants: &[lachesis_switch::Tenant],
    mount: Option<&Cgroup2Mount>,
) -> Result<Classifier, Vec<Unclassifiable>> {
    use lachesis_switch::ClassifierKind as K;
    let mut specs = Vec::new();
    let mut refused = Vec::new();
    for t in tenants {
        for (index, c) in t.classifiers.iter().enumerate() {
            let selector = match c.kind {
                K::Uid => c
                    .value
                    .parse()
                    .map(Selector::Uid)
                    .map_err(|_| format!("uid {:?} is not a number", c.value)),
                K::Cgroup => Selector::cgroup(&c.value, mount),
                K::PathPrefix if c.value.starts_with('/') => {
                    Ok(Selector::PathPrefix(c.value.clone()))
                }
                K::PathPrefix => Err(format!("{:?} must start with /", c.value)),
                K::KeyPrefix => continue,
                K::Process => Err(format!(
                    "the FUSE switch cannot classify by {} (it classifies by {})",
                    c.kind,
                    CLASSIFIER_KINDS.map(ClassifierKind::as_str).join(", ")
                )),
            };
            match selector {
                Ok(selector) => specs.push(TenantSpec {
                    name: t.name.clone(),
                    selector,
                }),
                Err(reason) => refused.push(Unclassifiable {
                    tenant: t.name.clone(),
                    index,
                    kind: c.kind,
                    reason,
                }),
            }
        }
    }
    if refused.is_empty() {
        Ok(Classifier::new(specs))
    } else {
        Err(refused)
    }
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
) -> io::Result<BackgroundSession> {
    let fs = SwitchFs::new(
        backing,
        switch,
        classifier,
        true,
        Some(STATE_DIR.to_string()),
    )?;
    // The agent mounts with the kernel's default: io_uring where it is switched on.
    let transport = crate::fuse::FuseTransport::Auto
        .resolve(threads)
        .map_err(io::Error::other)?;
    let session = BackgroundSession::start(
        mountpoint,
        crate::fuse::mount_config(transport),
        Arc::new(lachesis_fusering::Dispatcher::new(fs)),
    )?;
    crate::fuse::check_transport(crate::fuse::FuseTransport::Auto, &session)
        .map_err(io::Error::other)?;
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_switch::{Classifier as BusClassifier, Tenant};

    fn t(name: &str, kind: ClassifierKind, value: &str) -> Tenant {
        Tenant {
            name: name.into(),
            classifiers: vec![BusClassifier {
                kind,
                value: value.into(),
            }],
        }
    }

    #[test]
    fn path_uid_and_cgroup_classifiers_carry_over_key_prefixes_are_the_kv_front_ends() {
        let c = classifier_of(&[
            t("a", ClassifierKind::Uid, "1001"),
            t("b", ClassifierKind::Cgroup, "/jobs/b"),
            t("w", ClassifierKind::PathPrefix, "/srv/web/"),
            t("k", ClassifierKind::KeyPrefix, "sess:"),
        ])
        .unwrap();
        assert_eq!(c.classify_with(None, 1001, "/f").as_deref(), Some("a"));
        assert_eq!(
            c.classify_with(Some("/jobs/b/x"), 0, "/f").as_deref(),
            Some("b")
        );
        assert_eq!(
            c.classify_with(None, 1001, "/srv/web/i").as_deref(),
            Some("w")
        );
        assert_eq!(c.classify_with(None, 0, "/srv/webx"), None);
        assert_eq!(c.tenants().len(), 3);
    }

    #[test]
    fn a_classifier_the_switch_cannot_decide_is_refused_and_named() {
        let mut search = t("search", ClassifierKind::PathPrefix, "/srv/search");
        search.classifiers.push(BusClassifier {
            kind: ClassifierKind::Process,
            value: "searchd".into(),
        });
        let refused = classifier_of(&[
            t("a", ClassifierKind::Uid, "1001"),
            search,
            t("b", ClassifierKind::Uid, "bob"),
            t("c", ClassifierKind::PathPrefix, "srv"),
        ])
        .unwrap_err();
        let said: Vec<String> = refused.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(said[0].starts_with("tenant \"search\": classifiers[1] (process): the FUSE switch cannot classify by process"), "{said:?}");
        assert!(
            said[1].contains("\"b\"") && said[1].contains("not a number"),
            "{said:?}"
        );
        assert!(
            said[2].contains("\"c\"") && said[2].contains("must start with /"),
            "{said:?}"
        );
    }

    #[test]
    fn a_cgroup_written_as_a_host_path_is_refused_and_named() {
        // This CI host's: cgroup2 beside v1 controllers, at /sys/fs/cgroup/unified.
        let mount = Cgroup2Mount::from_mountinfo(
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
        );
        let mut analytics = t("analytics", ClassifierKind::Cgroup, "/analytics");
        analytics.classifiers.push(BusClassifier {
            kind: ClassifierKind::Cgroup,
            value: "/sys/fs/cgroup/unified/analytics".into(),
        });
        let refused = classifier_of_with(
            &[
                analytics,
                t("b", ClassifierKind::Cgroup, "/sys/fs/cgroup/b"),
            ],
            mount.as_ref(),
        )
        .unwrap_err();
        let said: Vec<String> = refused.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].starts_with("tenant \"analytics\": classifiers[1] (cgroup): ")
                && said[0].contains("host path")
                && said[0].contains("\"/analytics\""),
            "{said:?}"
        );
        assert!(
            said[1].starts_with("tenant \"b\": classifiers[0] (cgroup)")
                && said[1].contains("\"/b\""),
            "{said:?}"
        );
        // The path /proc/PID/cgroup shows is the one meaning.
        let c = classifier_of_with(
            &[t("a", ClassifierKind::Cgroup, "/analytics")],
            mount.as_ref(),
        )
        .unwrap();
        assert_eq!(
            c.classify_with(Some("/analytics/job1"), 0, "/f").as_deref(),
            Some("a")
        );
    }
}
