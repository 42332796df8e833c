//! The two-phase installer against a naive model: whatever part refuses (in prepare or in
//! commit), every part runs the last generation installed; otherwise every part runs the new
//! one. A refusal in prepare commits nothing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use lachesis_switch::StageConfig;
use proptest::prelude::*;

use super::plan::{Layout, Plan};
use super::{Part, TwoPhase};
use crate::runner::Installer;
use crate::state::{AgentState, Applied};

/// A part that runs the names of its share's stages and refuses a generation whose stages
/// name it (`refuse/prepare/<part>` or `refuse/commit/<part>`).
struct Fake {
    name: &'static str,
    runs: Mutex<Vec<String>>,
    commits: Mutex<u64>,
}

impl Fake {
    fn new(name: &'static str) -> Arc<Self> {
        Arc::new(Fake {
            name,
            runs: Mutex::default(),
            commits: Mutex::default(),
        })
    }

    fn runs(&self) -> Vec<String> {
        self.runs.lock().unwrap().clone()
    }
}

fn names(plan: &Plan) -> Vec<String> {
    plan.fs
        .stages
        .iter()
        .map(|s| s.name().to_string())
        .collect()
}

impl Part for Fake {
    fn name(&self) -> &'static str {
        self.name
    }

    fn prepare(&self, plan: &Plan) -> Result<(), String> {
        match names(plan).contains(&format!("refuse/prepare/{}", self.name)) {
            true => Err("refused in prepare".into()),
            false => Ok(()),
        }
    }

    fn commit(&self, plan: &Plan) -> Result<(), String> {
        *self.commits.lock().unwrap() += 1;
        if names(plan).contains(&format!("refuse/commit/{}", self.name)) {
            return Err("refused in commit".into());
        }
        *self.runs.lock().unwrap() = names(plan);
        Ok(())
    }
}

fn stage(name: &str) -> StageConfig {
    serde_json::from_value(serde_json::json!({
        "kind": "ratelimit", "name": name, "owner": null, "iops": 10, "bytes_per_s": null
    }))
    .unwrap()
}

fn generation(g: u64, refusals: &[String]) -> Applied {
    let base = AgentState::new("host-a").applied().clone();
    let mut stages = vec![stage(&format!("qos/g{g}"))];
    stages.extend(refusals.iter().map(|r| stage(r)));
    Applied {
        generation: g,
        stages: Arc::new(stages),
        ..base
    }
}

const PARTS: [&str; 3] = ["kv", "fs", "server"];

fn installer() -> (Arc<TwoPhase>, Vec<Arc<Fake>>) {
    let fakes: Vec<Arc<Fake>> = PARTS.iter().map(|n| Fake::new(n)).collect();
    let parts = fakes.iter().map(|f| f.clone() as Arc<dyn Part>).collect();
    (TwoPhase::new(Layout::default(), parts), fakes)
}

#[test]
fn a_later_part_refusing_gives_the_earlier_ones_the_previous_generation_back() {
    let (inst, fakes) = installer();
    inst.install(&generation(1, &[])).unwrap();
    let e = inst
        .install(&generation(2, &["refuse/commit/server".into()]))
        .unwrap_err();
    assert!(e.starts_with("server: refused in commit"), "{e}");
    for f in &fakes {
        assert_eq!(f.runs(), ["qos/g1"], "{}", f.name);
    }
    // kv and fs: generation 1, 2 (taken back), 1 again; server: 1, then 2 (refused).
    let commits: Vec<u64> = fakes.iter().map(|f| *f.commits.lock().unwrap()).collect();
    assert_eq!(commits, [3, 3, 2]);
    assert_eq!(names(&inst.installed()), ["qos/g1"]);
}

#[test]
fn a_refusal_in_prepare_commits_nothing() {
    let (inst, fakes) = installer();
    inst.install(&generation(1, &[])).unwrap();
    let e = inst
        .install(&generation(2, &["refuse/prepare/fs".into()]))
        .unwrap_err();
    assert!(e.starts_with("fs: refused in prepare"), "{e}");
    for f in &fakes {
        assert_eq!(
            (f.runs(), *f.commits.lock().unwrap()),
            (vec!["qos/g1".to_string()], 1)
        );
    }
}

#[test]
fn the_first_generation_refused_leaves_every_part_with_nothing() {
    let (inst, fakes) = installer();
    inst.install(&generation(1, &["refuse/commit/fs".into()]))
        .unwrap_err();
    assert_eq!(
        fakes[0].runs(),
        Vec::<String>::new(),
        "kv was given the empty plan back"
    );
    assert_eq!(inst.installed(), Layout::default().empty());
}

proptest! {
    #[test]
    fn every_part_runs_the_last_generation_no_part_refused(
        gens in prop::collection::vec(
            prop::collection::btree_set((0usize..3, any::<bool>()), 0..3), 1..12),
    ) {
        let (inst, fakes) = installer();
        let mut model: Vec<String> = Vec::new(); // what every part runs
        for (g, refusals) in gens.iter().enumerate() {
            let refusals: Vec<String> = refusals
                .iter()
                .map(|(p, in_prepare)| {
                    let phase = if *in_prepare { "prepare" } else { "commit" };
                    format!("refuse/{phase}/{}", PARTS[*p])
                })
                .collect();
            let applied = generation(g as u64 + 1, &refusals);
            let before: Vec<u64> = fakes.iter().map(|f| *f.commits.lock().unwrap()).collect();
            let result = inst.install(&applied);
            let prepared = !refusals.iter().any(|r| r.starts_with("refuse/prepare/"));
            prop_assert_eq!(result.is_ok(), refusals.is_empty());
            if refusals.is_empty() {
                model = names(&Layout::default().plan(&applied).unwrap());
            }
            let after: Vec<u64> = fakes.iter().map(|f| *f.commits.lock().unwrap()).collect();
            if !prepared {
                prop_assert_eq!(&before, &after);
            }
            let refused: HashSet<&str> = refusals.iter().map(|r| r.rsplit('/').next().unwrap()).collect();
            for f in &fakes {
                // A part whose own commit refused kept what it ran; the others were given it back.
                prop_assert_eq!(f.runs(), model.clone(), "part {} refused {:?}", f.name, refused);
            }
            prop_assert_eq!(names(&inst.installed()), model.clone());
        }
    }
}
