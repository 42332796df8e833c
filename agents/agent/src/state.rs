//! The agent's desired-state generation state machine (pure: no IO).
//!
//! Every desired state carries a generation that only grows. The agent applies one newer than
//! the generation it holds (if its rule table builds; otherwise it refuses and keeps the old
//! one), re-acks one equal to it (idempotent), and refuses an older one.
//!
//! A two-phase rollout sends the same generation twice: phase quiesce (the flows that move
//! are quiesced and drained, the rules held stay installed: [`Outcome::Quiesce`]), then
//! phase install. Both phases are idempotent: a re-sent quiesce is acked again, an install
//! of the generation held is re-acked.

use std::sync::Arc;

use lachesis_switch::{check_stages, Match, RuleTable, StageConfig, Tenant};

use crate::bus::{Ack, AckSchema, AckStatus, CacheSize, DesiredState, Phase, Timestamp};

/// What the agent did with a desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A newer generation, now installed.
    Applied,
    /// The generation already held; nothing changed, acked `applied` again.
    AlreadyApplied,
    /// An older generation; refused.
    Stale { held: u64 },
    /// A newer generation that cannot be installed (bad rule table, wrong host); refused, the
    /// state held is unchanged.
    Invalid { reason: String },
    /// Phase quiesce of a newer generation (or again): quiesce and drain `flows`, then ack.
    Quiesce { flows: Vec<Match> },
    /// Phase quiesce of the generation already installed: nothing to do, acked again.
    AlreadyInstalled,
}

/// The applied state: generation, rule table and tenants.
#[derive(Debug, Clone)]
pub struct Applied {
    pub generation: u64,
    pub rollout_id: Option<String>,
    pub table: Arc<RuleTable>,
    pub tenants: Arc<Vec<Tenant>>,
    /// Per-tenant cache sizes (desired-state `caches`).
    pub caches: Arc<Vec<CacheSize>>,
    /// The stages rules name (desired-state `stages`), checked as a set.
    pub stages: Arc<Vec<StageConfig>>,
}

/// The agent's soft state.
#[derive(Debug, Clone)]
pub struct AgentState {
    host_id: String,
    applied: Applied,
    /// The newest generation whose quiesce phase was handled and not yet installed.
    quiescing: Option<u64>,
    /// The state held was restored from local disk and the controller has not been heard
    /// yet: its first install is taken even if older (its database may have been reset; the
    /// controller is the source of truth, the saved state only a bridge until it answers).
    restored: bool,
}

impl AgentState {
    /// An agent that holds generation 0 (no desired state yet: an empty table).
    pub fn new(host_id: impl Into<String>) -> Self {
        AgentState {
            host_id: host_id.into(),
            applied: Applied {
                generation: 0,
                rollout_id: None,
                table: Arc::new(RuleTable::new()),
                tenants: Arc::new(Vec::new()),
                caches: Arc::new(Vec::new()),
                stages: Arc::new(Vec::new()),
            },
            quiescing: None,
            restored: false,
        }
    }

    /// Holds `msg` (the last state this agent applied and acked, saved by
    /// [`crate::persist`]) as if it had just been applied, until the controller's first
    /// message. Refused, changing nothing, if it is another host's or does not build.
    pub fn restore(&mut self, msg: &DesiredState) -> Result<(), String> {
        if msg.host_id != self.host_id {
            return Err(format!(
                "saved state is host {}'s, this is host {}",
                msg.host_id, self.host_id
            ));
        }
        self.applied = applied_of(msg)?;
        self.quiescing = None;
        self.restored = true;
        Ok(())
    }

    /// The generation whose flows are quiesced, waiting for its install.
    pub fn quiescing(&self) -> Option<u64> {
        self.quiescing
    }

    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// The generation held (0 before the first).
    pub fn generation(&self) -> u64 {
        self.applied.generation
    }

    pub fn applied(&self) -> &Applied {
        &self.applied
    }

    /// Puts `previous` back after the data path refused the state just applied: the agent
    /// holds (and reports) only what is installed, and a later copy of the refused
    /// generation is tried again instead of being taken as already applied.
    pub fn refused_by_data_path(&mut self, previous: Applied) {
        self.applied = previous;
    }

    /// Handle one desired state and return what happened and the ack to send.
    pub fn handle(&mut self, msg: &DesiredState) -> (Outcome, Ack) {
        self.handle_at(msg, Timestamp::now())
    }

    /// [`AgentState::handle`] with the ack time given (for tests).
    pub fn handle_at(&mut self, msg: &DesiredState, now: Timestamp) -> (Outcome, Ack) {
        let held = self.applied.generation;
        let provisional = self.restored;
        let outcome = if msg.host_id != self.host_id {
            Outcome::Invalid {
                reason: format!(
                    "desired state for host {} delivered to host {}",
                    msg.host_id, self.host_id
                ),
            }
        } else if msg.generation < held && !(provisional && msg.phase() == Phase::Install) {
            Outcome::Stale { held }
        } else if msg.phase() == Phase::Quiesce {
            if msg.generation == held {
                Outcome::AlreadyInstalled
            } else {
                self.quiescing = Some(
                    self.quiescing
                        .map_or(msg.generation, |q| q.max(msg.generation)),
                );
                Outcome::Quiesce {
                    flows: msg.quiesce.clone().unwrap_or_default(),
                }
            }
        } else if msg.generation == held {
            Outcome::AlreadyApplied
        } else {
            match applied_of(msg) {
                Ok(applied) => {
                    self.applied = applied;
                    // Whatever was quiesced for this or an older generation moves now.
                    if self.quiescing.is_some_and(|q| q <= msg.generation) {
                        self.quiescing = None;
                    }
                    Outcome::Applied
                }
                Err(reason) => Outcome::Invalid { reason },
            }
        };
        if !matches!(outcome, Outcome::Stale { .. } | Outcome::Invalid { .. }) {
            // The controller has spoken: from now on older generations are stale again.
            self.restored = false;
        }
        let (status, reason) = match &outcome {
            Outcome::Applied
            | Outcome::AlreadyApplied
            | Outcome::Quiesce { .. }
            | Outcome::AlreadyInstalled => (AckStatus::Applied, None),
            Outcome::Stale { held } => (
                AckStatus::Rejected,
                Some(format!(
                    "stale generation {}: this agent holds generation {held}",
                    msg.generation
                )),
            ),
            Outcome::Invalid { reason } => (AckStatus::Rejected, Some(reason.clone())),
        };
        let ack = Ack {
            schema: AckSchema,
            host_id: self.host_id.clone(),
            generation: msg.generation,
            rollout_id: msg.rollout_id.clone(),
            phase: msg.phase,
            status,
            reason,
            rules_installed: self.applied.table.len() as u64,
            drained: None,
            acked_at: now,
            traceparent: msg.traceparent.clone(),
        };
        (outcome, ack)
    }
}

/// The applied state `msg` describes, if its stages and rule table check.
fn applied_of(msg: &DesiredState) -> Result<Applied, String> {
    let stages = msg.stages.clone().unwrap_or_default();
    let table = check_stages(&stages)
        .and_then(|()| RuleTable::build(msg.rules.iter().cloned()).map_err(|e| e.to_string()))
        .map_err(|e| {
            format!(
                "generation {}: invalid rules or stages: {e}",
                msg.generation
            )
        })?;
    Ok(Applied {
        generation: msg.generation,
        rollout_id: msg.rollout_id.clone(),
        table: Arc::new(table),
        tenants: Arc::new(msg.tenants.clone()),
        caches: Arc::new(msg.caches.clone().unwrap_or_default()),
        stages: Arc::new(stages),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::DesiredStateSchema;
    use lachesis_switch::{Detour, DetourKind, DetourWhat, IoHeader, Match, Op, Rule};

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn rule(name: &str, m: Match) -> Rule {
        Rule::new(
            name,
            1,
            m,
            vec![Detour::new(DetourWhat::Io, DetourKind::Stage, "cache/x")],
        )
    }

    fn desired(generation: u64, rules: Vec<Rule>) -> DesiredState {
        DesiredState {
            schema: DesiredStateSchema,
            host_id: "host-a".into(),
            generation,
            rollout_id: Some(format!("rollout-{generation}")),
            issued_at: Timestamp::now(),
            traceparent: Some(TP.into()),
            phase: None,
            quiesce: None,
            restores: None,
            caches: None,
            tenants: vec![],
            rules,
            stages: None,
        }
    }

    fn phased(generation: u64, phase: Phase, rules: Vec<Rule>) -> DesiredState {
        DesiredState {
            phase: Some(phase),
            quiesce: (phase == Phase::Quiesce).then(|| vec![Match::any().tenant("t")]),
            ..desired(generation, rules)
        }
    }

    #[test]
    fn quiesce_keeps_the_rules_until_install_and_both_phases_repeat() {
        let mut s = AgentState::new("host-a");
        s.handle(&desired(1, vec![rule("old", Match::any())]));
        let q = phased(2, Phase::Quiesce, vec![rule("new", Match::any())]);
        let (o, ack) = s.handle(&q);
        assert_eq!(
            o,
            Outcome::Quiesce {
                flows: vec![Match::any().tenant("t")]
            }
        );
        assert_eq!(ack.phase, Some(Phase::Quiesce));
        assert_eq!(ack.status, AckStatus::Applied);
        assert_eq!(ack.generation, 2);
        // Still running generation 1's table, but quiesced for 2.
        assert_eq!(s.generation(), 1);
        assert!(s.applied().table.get("old").is_some());
        assert_eq!(s.quiescing(), Some(2));
        // Re-sent: quiesced (and drained) again, acked again.
        assert!(matches!(s.handle(&q).0, Outcome::Quiesce { .. }));

        let (o, ack) = s.handle(&phased(2, Phase::Install, vec![rule("new", Match::any())]));
        assert_eq!(o, Outcome::Applied);
        assert_eq!(ack.phase, Some(Phase::Install));
        assert_eq!(s.generation(), 2);
        assert_eq!(s.quiescing(), None);
        assert!(s.applied().table.get("new").is_some());
        // A late copy of the quiesce of the installed generation changes nothing.
        let (o, ack) = s.handle(&q);
        assert_eq!(o, Outcome::AlreadyInstalled);
        assert_eq!(ack.status, AckStatus::Applied);
        assert_eq!(s.quiescing(), None);
        // And one of an older generation is refused like any stale one.
        let (o, ack) = s.handle(&phased(1, Phase::Quiesce, vec![]));
        assert_eq!(o, Outcome::Stale { held: 2 });
        assert_eq!(ack.status, AckStatus::Rejected);
    }

    #[test]
    fn a_rollback_generation_installs_the_old_rules_and_ends_the_quiesce() {
        let mut s = AgentState::new("host-a");
        s.handle(&desired(1, vec![rule("old", Match::any())]));
        s.handle(&phased(2, Phase::Quiesce, vec![rule("new", Match::any())]));
        // The rollout failed elsewhere: generation 3 carries generation 1's rules again.
        let mut back = phased(3, Phase::Install, vec![rule("old", Match::any())]);
        back.restores = Some(1);
        let (o, _) = s.handle(&back);
        assert_eq!(o, Outcome::Applied);
        assert_eq!(s.quiescing(), None);
        assert!(s.applied().table.get("old").is_some());
        // The install of the abandoned generation 2 arriving late is stale.
        let (o, _) = s.handle(&phased(2, Phase::Install, vec![rule("new", Match::any())]));
        assert_eq!(o, Outcome::Stale { held: 3 });
    }

    #[test]
    fn newer_generation_is_applied() {
        let mut s = AgentState::new("host-a");
        assert_eq!(s.generation(), 0);
        let (o, ack) = s.handle(&desired(
            3,
            vec![rule("a", Match::any().tenant("t")), rule("b", Match::any())],
        ));
        assert_eq!(o, Outcome::Applied);
        assert_eq!(s.generation(), 3);
        assert_eq!(ack.status, AckStatus::Applied);
        assert_eq!(ack.generation, 3);
        assert_eq!(ack.reason, None);
        assert_eq!(ack.rules_installed, 2);
        assert_eq!(ack.rollout_id.as_deref(), Some("rollout-3"));
        assert_eq!(ack.traceparent.as_deref(), Some(TP));
        assert_eq!(ack.host_id, "host-a");
        let t = &s.applied().table;
        assert_eq!(
            t.lookup(&IoHeader::new(Op::Read).tenant("t")).unwrap().name,
            "a"
        );

        // A later generation replaces the whole table.
        let (o, ack) = s.handle(&desired(4, vec![]));
        assert_eq!(o, Outcome::Applied);
        assert_eq!(ack.rules_installed, 0);
        assert!(s.applied().table.is_empty());
        assert_eq!(s.applied().rollout_id.as_deref(), Some("rollout-4"));
    }

    #[test]
    fn equal_generation_is_reacked() {
        let mut s = AgentState::new("host-a");
        s.handle(&desired(2, vec![rule("a", Match::any())]));
        let before = Arc::clone(&s.applied().table);
        // Same generation, even with other content: acked, nothing changes.
        let (o, ack) = s.handle(&desired(2, vec![]));
        assert_eq!(o, Outcome::AlreadyApplied);
        assert_eq!(ack.status, AckStatus::Applied);
        assert_eq!(ack.generation, 2);
        assert_eq!(ack.rules_installed, 1);
        assert!(Arc::ptr_eq(&before, &s.applied().table));
    }

    #[test]
    fn older_generation_is_refused() {
        let mut s = AgentState::new("host-a");
        s.handle(&desired(
            3,
            vec![rule("a", Match::any()), rule("b", Match::any())],
        ));
        let mut old = desired(2, vec![]);
        old.rollout_id = None;
        old.traceparent = None;
        let (o, ack) = s.handle(&old);
        assert_eq!(o, Outcome::Stale { held: 3 });
        assert_eq!(ack.status, AckStatus::Rejected);
        assert_eq!(ack.generation, 2);
        assert_eq!(
            ack.reason.as_deref(),
            Some("stale generation 2: this agent holds generation 3")
        );
        assert_eq!(ack.rules_installed, 2);
        assert_eq!(ack.rollout_id, None);
        assert_eq!(ack.traceparent, None);
        assert_eq!(s.generation(), 3);
        assert_eq!(s.applied().table.len(), 2);
    }

    #[test]
    fn bad_table_is_refused_and_old_one_kept() {
        let mut s = AgentState::new("host-a");
        s.handle(&desired(1, vec![rule("keep", Match::any())]));
        let dup = desired(2, vec![rule("x", Match::any()), rule("x", Match::any())]);
        let (o, ack) = s.handle(&dup);
        assert!(matches!(o, Outcome::Invalid { .. }));
        assert_eq!(ack.status, AckStatus::Rejected);
        assert_eq!(ack.generation, 2);
        let reason = ack.reason.unwrap();
        assert!(reason.contains("duplicate rule name \"x\""), "{reason}");
        assert_eq!(ack.rules_installed, 1);
        assert_eq!(s.generation(), 1);
        assert_eq!(s.applied().table.get("keep").map(|r| r.priority), Some(1));

        let inverted = desired(2, vec![rule("r", Match::any().range(8, 8))]);
        let (o, ack) = s.handle(&inverted);
        assert!(matches!(o, Outcome::Invalid { .. }));
        assert!(ack.reason.unwrap().contains("range start 8"));
        assert_eq!(s.generation(), 1);

        // The same generation, fixed, is then applied.
        let (o, _) = s.handle(&desired(2, vec![rule("r", Match::any().range(0, 8))]));
        assert_eq!(o, Outcome::Applied);
        assert_eq!(s.generation(), 2);
    }

    #[test]
    fn other_hosts_state_is_refused() {
        let mut s = AgentState::new("host-b");
        let (o, ack) = s.handle(&desired(5, vec![]));
        assert!(matches!(o, Outcome::Invalid { .. }));
        assert_eq!(ack.host_id, "host-b");
        assert_eq!(
            ack.reason.as_deref(),
            Some("desired state for host host-a delivered to host host-b")
        );
        assert_eq!(s.generation(), 0);
    }

    #[test]
    fn a_restored_state_is_held_until_the_controller_speaks_whose_first_install_wins() {
        let mut s = AgentState::new("host-a");
        s.restore(&desired(5, vec![rule("saved", Match::any())]))
            .unwrap();
        assert_eq!(s.generation(), 5);
        assert!(s.applied().table.get("saved").is_some());
        // The controller still wants 5: acked again, nothing changes.
        let (o, ack) = s.handle(&desired(5, vec![]));
        assert_eq!(o, Outcome::AlreadyApplied);
        assert_eq!((ack.status, ack.rules_installed), (AckStatus::Applied, 1));
        // From then on an older generation is stale as usual.
        assert_eq!(s.handle(&desired(4, vec![])).0, Outcome::Stale { held: 5 });

        // A controller that starts over (database reset) is followed at its first word.
        let mut s = AgentState::new("host-a");
        s.restore(&desired(5, vec![rule("saved", Match::any())]))
            .unwrap();
        assert_eq!(
            s.handle(&phased(2, Phase::Quiesce, vec![])).0,
            Outcome::Stale { held: 5 }
        );
        let (o, ack) = s.handle(&desired(1, vec![rule("fresh", Match::any())]));
        assert_eq!((o, ack.status), (Outcome::Applied, AckStatus::Applied));
        assert_eq!(s.generation(), 1);
        assert_eq!(s.handle(&desired(0, vec![])).0, Outcome::Stale { held: 1 });

        // A pending rollout's quiesce goes on from the restored generation.
        let mut s = AgentState::new("host-a");
        s.restore(&desired(5, vec![])).unwrap();
        assert!(matches!(
            s.handle(&phased(6, Phase::Quiesce, vec![])).0,
            Outcome::Quiesce { .. }
        ));
        assert_eq!((s.generation(), s.quiescing()), (5, Some(6)));

        // Another host's, or one that does not build, is refused and changes nothing.
        let mut s = AgentState::new("host-b");
        assert!(s
            .restore(&desired(5, vec![]))
            .unwrap_err()
            .contains("host-a"));
        let mut s = AgentState::new("host-a");
        let dup = desired(5, vec![rule("x", Match::any()), rule("x", Match::any())]);
        assert!(s.restore(&dup).is_err());
        assert_eq!(s.generation(), 0);
    }

    #[test]
    fn a_state_the_data_path_refused_is_undone_and_tried_again() {
        let mut s = AgentState::new("host-a");
        s.handle(&desired(1, vec![rule("old", Match::any())]));
        let previous = s.applied().clone();
        assert_eq!(s.handle(&desired(2, vec![])).0, Outcome::Applied);
        s.refused_by_data_path(previous);
        assert_eq!(s.generation(), 1);
        assert!(s.applied().table.get("old").is_some());
        assert_eq!(s.handle(&desired(2, vec![])).0, Outcome::Applied);
    }

    #[test]
    fn acks_validate_as_messages() {
        // Every ack the state machine makes survives a serde round trip.
        let mut s = AgentState::new("host-a");
        for g in [2, 2, 1, 3] {
            let (_, ack) = s.handle(&desired(g, vec![]));
            let text = serde_json::to_string(&ack).unwrap();
            let back: Ack = serde_json::from_str(&text).unwrap();
            assert_eq!(back, ack);
        }
    }
}
