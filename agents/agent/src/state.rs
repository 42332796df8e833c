//! The agent's desired-state generation state machine (pure: no IO).
//!
//! Every desired state carries a generation that only grows. The agent applies one newer than
//! the generation it holds (if its rule table builds; otherwise it refuses and keeps the old
//! one), re-acks one equal to it (idempotent), and refuses an older one.

use std::sync::Arc;

use lachesis_switch::{RuleTable, Tenant};

use crate::bus::{Ack, AckSchema, AckStatus, DesiredState, Timestamp};

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
}

/// The applied state: generation, rule table and tenants.
#[derive(Debug, Clone)]
pub struct Applied {
    pub generation: u64,
    pub rollout_id: Option<String>,
    pub table: Arc<RuleTable>,
    pub tenants: Arc<Vec<Tenant>>,
}

/// The agent's soft state.
#[derive(Debug, Clone)]
pub struct AgentState {
    host_id: String,
    applied: Applied,
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
            },
        }
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

    /// Handle one desired state and return what happened and the ack to send.
    pub fn handle(&mut self, msg: &DesiredState) -> (Outcome, Ack) {
        self.handle_at(msg, Timestamp::now())
    }

    /// [`AgentState::handle`] with the ack time given (for tests).
    pub fn handle_at(&mut self, msg: &DesiredState, now: Timestamp) -> (Outcome, Ack) {
        let held = self.applied.generation;
        let outcome = if msg.host_id != self.host_id {
            Outcome::Invalid {
                reason: format!(
                    "desired state for host {} delivered to host {}",
                    msg.host_id, self.host_id
                ),
            }
        } else if msg.generation < held {
            Outcome::Stale { held }
        } else if msg.generation == held {
            Outcome::AlreadyApplied
        } else {
            match RuleTable::build(msg.rules.iter().cloned()) {
                Ok(table) => {
                    self.applied = Applied {
                        generation: msg.generation,
                        rollout_id: msg.rollout_id.clone(),
                        table: Arc::new(table),
                        tenants: Arc::new(msg.tenants.clone()),
                    };
                    Outcome::Applied
                }
                Err(e) => Outcome::Invalid {
                    reason: format!("generation {}: invalid rule table: {e}", msg.generation),
                },
            }
        };
        let (status, reason) = match &outcome {
            Outcome::Applied | Outcome::AlreadyApplied => (AckStatus::Applied, None),
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
            status,
            reason,
            rules_installed: self.applied.table.len() as u64,
            acked_at: now,
            traceparent: msg.traceparent.clone(),
        };
        (outcome, ack)
    }
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
            tenants: vec![],
            rules,
        }
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
