//! Which part of the data path runs what of a desired state: the one place that splits an
//! applied generation between the FUSE switches, the KV front end and the server level, so
//! each part is given its share and nothing else decides it.
//!
//! - The server level: cache stages with `serves` (run by the forwarding server). A level-1
//!   stage's `next` naming one of them is dropped for the others: its misses reach that level
//!   through the route's remote endpoint.
//! - The KV front end (when the agent runs one): a tenant with a `key_prefix` classifier (or
//!   bound to a port with `--kv-tenant-port`), a rule that can match its keys (a `key_prefix`,
//!   or one of its tenants, and no `path_prefix`), and a stage such a rule names or such a
//!   tenant owns. One stage is served by one data path: a file rule naming a KV stage refuses
//!   the generation. Without a KV front end the FUSE switch gets everything but the server
//!   level (key-prefix rules never match a file).
//! - The FUSE switches: the rest, with every tenant (their classifiers).

use std::collections::HashMap;

use lachesis_kv::tenant::{is_kv_rule, kv_tenants};
use lachesis_switch::{CacheConfig, DetourKind, Rule, StageConfig, Tenant};

use crate::state::Applied;

/// The FUSE switches' share of a generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FsShare {
    pub rules: Vec<Rule>,
    pub stages: Vec<StageConfig>,
    pub tenants: Vec<Tenant>,
}

/// The KV front end's share: its tenants (with a tenant port's tenant the desired state does
/// not declare yet: until it does, the port's keys are the tenant's in a DRAM cache of its
/// own), its rules and the stages they use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvShare {
    pub tenants: Vec<Tenant>,
    pub rules: Vec<Rule>,
    pub stages: Vec<StageConfig>,
}

/// One generation, split between the parts that run it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub fs: FsShare,
    pub kv: KvShare,
    pub server: Vec<CacheConfig>,
}

/// How the agent's data path is made up, as far as splitting a generation goes.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// The agent runs a KV front end.
    pub kv: bool,
    /// `--kv-tenant-port`: port -> tenant.
    pub ports: HashMap<u16, String>,
}

impl Layout {
    /// The share of each part; an error (a file rule naming a KV stage) refuses the whole
    /// generation before any part changes.
    pub fn plan(&self, applied: &Applied) -> Result<Plan, String> {
        self.split(
            &applied.tenants,
            applied.table.rules().cloned().collect(),
            &applied.stages,
        )
    }

    /// What the parts run before any generation: nothing, but a tenant port's tenant.
    pub fn empty(&self) -> Plan {
        self.split(&[], Vec::new(), &[])
            .expect("nothing to refuse in an empty generation")
    }

    fn split(
        &self,
        tenants: &[Tenant],
        rules: Vec<Rule>,
        stages: &[StageConfig],
    ) -> Result<Plan, String> {
        let (server, rest) = server_level(stages);
        if !self.kv {
            return Ok(Plan {
                fs: FsShare {
                    rules,
                    stages: rest,
                    tenants: tenants.to_vec(),
                },
                kv: KvShare::default(),
                server,
            });
        }
        let names = kv_names(tenants, &rules, &rest, &self.ports);
        let (fs_rules, fs_stages) = fs_part(&rules, &rest, &names)?;
        let mut kv_tenants = tenants.to_vec();
        for t in self.ports.values() {
            if !kv_tenants.iter().any(|k| &k.name == t) {
                kv_tenants.push(Tenant {
                    name: t.clone(),
                    classifiers: Vec::new(),
                });
            }
        }
        Ok(Plan {
            kv: KvShare {
                tenants: kv_tenants,
                rules: rules
                    .iter()
                    .filter(|r| names.rules.contains(&r.name))
                    .cloned()
                    .collect(),
                stages: rest
                    .iter()
                    .filter(|s| names.stages.iter().any(|k| k == s.name()))
                    .cloned()
                    .collect(),
            },
            fs: FsShare {
                rules: fs_rules,
                stages: fs_stages,
                tenants: tenants.to_vec(),
            },
            server,
        })
    }
}

/// The server-level stages of `stages` (with `serves`), and the rest.
pub fn server_level(stages: &[StageConfig]) -> (Vec<CacheConfig>, Vec<StageConfig>) {
    let server: Vec<CacheConfig> = stages
        .iter()
        .filter_map(|s| match s {
            StageConfig::Cache(c) if c.serves.is_some() => Some(c.clone()),
            _ => None,
        })
        .collect();
    let rest = stages
        .iter()
        .filter(|s| !matches!(s, StageConfig::Cache(c) if c.serves.is_some()))
        .map(|s| match s {
            StageConfig::Cache(c)
                if c.next
                    .as_ref()
                    .is_some_and(|n| server.iter().any(|x| &x.name == n)) =>
            {
                StageConfig::Cache(CacheConfig {
                    next: None,
                    ..c.clone()
                })
            }
            other => other.clone(),
        })
        .collect();
    (server, rest)
}

/// The names of the KV front end's rules and stages.
struct KvNames {
    rules: Vec<String>,
    stages: Vec<String>,
}

fn kv_names(
    tenants: &[Tenant],
    rules: &[Rule],
    stages: &[StageConfig],
    ports: &HashMap<u16, String>,
) -> KvNames {
    let names: Vec<&str> = kv_tenants(tenants, ports)
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let kv_rules: Vec<&Rule> = rules.iter().filter(|r| is_kv_rule(r, &names)).collect();
    let stages = stages
        .iter()
        .filter(|s| {
            let named = kv_rules.iter().any(|r| {
                r.detours
                    .iter()
                    .any(|d| d.to.kind == DetourKind::Stage && d.to.target == s.name())
            });
            let owned =
                matches!(s, StageConfig::Cache(_)) && s.owner().is_some_and(|o| names.contains(&o));
            named || owned
        })
        .map(|s| s.name().to_string())
        .collect();
    KvNames {
        rules: kv_rules.iter().map(|r| r.name.clone()).collect(),
        stages,
    }
}

/// The FUSE switch's part: every rule and stage the KV front end does not serve. A file rule
/// naming a KV stage is an error naming both.
fn fs_part(
    rules: &[Rule],
    stages: &[StageConfig],
    kv: &KvNames,
) -> Result<(Vec<Rule>, Vec<StageConfig>), String> {
    let fs_rules: Vec<Rule> = rules
        .iter()
        .filter(|r| !kv.rules.contains(&r.name))
        .cloned()
        .collect();
    for r in &fs_rules {
        if let Some(d) = r
            .detours
            .iter()
            .find(|d| d.to.kind == DetourKind::Stage && kv.stages.contains(&d.to.target))
        {
            return Err(format!(
                "rule {:?} sends file IO to stage {:?}, which serves key-value requests: one stage is \
                 served by one data path",
                r.name, d.to.target
            ));
        }
    }
    let fs_stages = stages
        .iter()
        .filter(|s| !kv.stages.iter().any(|k| k == s.name()))
        .cloned()
        .collect();
    Ok((fs_rules, fs_stages))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_switch::{Classifier, ClassifierKind, Detour, DetourWhat, Match};

    fn tenant(name: &str, kind: ClassifierKind, value: &str) -> Tenant {
        Tenant {
            name: name.into(),
            classifiers: vec![Classifier {
                kind,
                value: value.into(),
            }],
        }
    }

    fn to_stage(name: &str, m: Match, stage: &str) -> Rule {
        Rule::new(
            name,
            10,
            m,
            vec![Detour::new(DetourWhat::Io, DetourKind::Stage, stage)],
        )
    }

    fn stages(names: &[(&str, &str)]) -> Vec<StageConfig> {
        names
            .iter()
            .map(|(n, owner)| {
                serde_json::from_value(serde_json::json!({
                    "kind": "ratelimit", "name": n, "owner": owner, "iops": 10, "bytes_per_s": null
                }))
                .unwrap()
            })
            .collect()
    }

    fn kv(ports: HashMap<u16, String>) -> Layout {
        Layout { kv: true, ports }
    }

    #[test]
    fn key_prefix_tenants_rules_and_their_stages_are_the_kv_front_ends() {
        let tenants = vec![
            tenant("web", ClassifierKind::PathPrefix, "/data/web"),
            tenant("sessions", ClassifierKind::KeyPrefix, "sess:"),
        ];
        let rules = vec![
            to_stage("web-limited", Match::any().tenant("web"), "qos/web"),
            to_stage("sess-limited", Match::any().tenant("sessions"), "qos/sess"),
            to_stage("bulk", Match::any().key_prefix("bulk:"), "qos/bulk"),
        ];
        let st = stages(&[
            ("qos/web", "web"),
            ("qos/sess", "sessions"),
            ("qos/bulk", "sessions"),
        ]);
        let plan = kv(HashMap::new())
            .split(&tenants, rules.clone(), &st)
            .unwrap();
        let rule_names = |r: &[Rule]| r.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        let stage_names =
            |s: &[StageConfig]| s.iter().map(|s| s.name().to_string()).collect::<Vec<_>>();
        assert_eq!(rule_names(&plan.kv.rules), ["sess-limited", "bulk"]);
        assert_eq!(stage_names(&plan.kv.stages), ["qos/sess", "qos/bulk"]);
        assert_eq!(rule_names(&plan.fs.rules), ["web-limited"]);
        assert_eq!(stage_names(&plan.fs.stages), ["qos/web"]);
        assert_eq!((plan.fs.tenants.len(), plan.kv.tenants.len()), (2, 2));

        // A tenant bound to a port is the front end's whatever its classifiers, and a port's
        // tenant the desired state does not declare is the front end's all the same.
        let ports = HashMap::from([(11400, "web".to_string()), (11401, "cold".to_string())]);
        let plan = kv(ports).split(&tenants, rules.clone(), &st).unwrap();
        assert_eq!(
            rule_names(&plan.kv.rules),
            ["web-limited", "sess-limited", "bulk"]
        );
        assert!(plan
            .kv
            .tenants
            .iter()
            .any(|t| t.name == "cold" && t.classifiers.is_empty()));
        assert!(plan.fs.rules.is_empty());

        // Without a KV front end the switch gets everything.
        let plan = Layout::default()
            .split(&tenants, rules.clone(), &st)
            .unwrap();
        assert_eq!((plan.fs.rules.len(), plan.fs.stages.len()), (3, 3));
        assert_eq!(plan.kv, KvShare::default());
    }

    #[test]
    fn a_file_rule_naming_a_kv_stage_is_refused_naming_both() {
        let tenants = vec![
            tenant("web", ClassifierKind::PathPrefix, "/data/web"),
            tenant("sessions", ClassifierKind::KeyPrefix, "sess:"),
        ];
        let rules = vec![
            to_stage(
                "sess-limited",
                Match::any().tenant("sessions"),
                "qos/shared",
            ),
            to_stage("web-limited", Match::any().tenant("web"), "qos/shared"),
        ];
        let st = stages(&[("qos/shared", "sessions")]);
        let e = kv(HashMap::new()).split(&tenants, rules, &st).unwrap_err();
        assert!(
            e.contains("\"web-limited\"") && e.contains("\"qos/shared\""),
            "{e}"
        );
    }

    #[test]
    fn server_stages_leave_the_switch_and_level_one_no_longer_chains_to_them() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../api-schemas/fixtures/desired-state/valid-stages-server-level.json"
        ))
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let stages: Vec<StageConfig> = serde_json::from_value(v["stages"].clone()).unwrap();
        let plan = Layout::default().split(&[], Vec::new(), &stages).unwrap();
        assert_eq!(
            plan.server
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["cache/alpha-l2", "cache/pool-l2"]
        );
        assert_eq!(plan.fs.stages.len(), 1);
        let StageConfig::Cache(l1) = &plan.fs.stages[0] else {
            unreachable!()
        };
        assert_eq!(
            (l1.name.as_str(), l1.next.as_deref()),
            ("cache/alpha", None)
        );
        lachesis_switch::check_stages(&plan.fs.stages).unwrap();
    }
}
