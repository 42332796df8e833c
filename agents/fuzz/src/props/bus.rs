//! The agent's bus messages (`agents/agent/src/bus.rs`, `detour_link.rs`, `telemetry.rs`).
//!
//! The agent decodes two of them from Redis: the desired state (inbox stream and desired key)
//! and the controller's detour verdicts. Both are followed past the decoder, into the
//! generation state machine and the verdict the switch acts on. The messages the agent writes
//! (registration, heartbeat, ack, detour request, telemetry) must decode back to what was
//! written.

use lachesis_agent::bus::{
    Ack, AckStatus, DesiredState, Heartbeat, Phase, Registration, Timestamp,
};
use lachesis_agent::detour_link::{DetourRequest, DetourVerdict};
use lachesis_agent::state::{AgentState, Outcome};
use lachesis_agent::telemetry::Telemetry;
use lachesis_fs::detour::Verdict;

use super::{decode_json, json_round_trip};

/// A desired state from the bus: decoded (or refused), then handled by a fresh agent of its
/// host, twice, and by an agent of another host.
pub fn desired_state(data: &[u8]) {
    let Some(msg) = decode_json::<DesiredState>("desired state", data) else {
        return;
    };
    let at = Timestamp::try_from("2026-11-24T00:00:00Z".to_string()).unwrap();
    let mut agent = AgentState::new(msg.host_id.clone());
    let (first, ack) = agent.handle_at(&msg, at.clone());
    check_ack(&msg, &ack, &first);
    match (&first, msg.phase()) {
        (Outcome::Applied, _) => {
            assert_eq!(agent.generation(), msg.generation);
            assert_eq!(agent.applied().table.len(), msg.rules.len());
            let (again, ack) = agent.handle_at(&msg, at.clone());
            assert_eq!(
                again,
                Outcome::AlreadyApplied,
                "a re-sent install is not idempotent"
            );
            check_ack(&msg, &ack, &again);
        }
        (Outcome::Invalid { .. }, _) => {
            // A table that does not build changes nothing.
            assert_eq!(agent.generation(), 0);
            assert!(agent.applied().table.is_empty());
        }
        (Outcome::Quiesce { flows }, Phase::Quiesce) => {
            assert_eq!(flows, msg.quiesce.as_deref().unwrap_or_default());
            assert_eq!(agent.quiescing(), Some(msg.generation));
            assert_eq!(agent.generation(), 0, "a quiesce installed rules");
        }
        (other, phase) => panic!("a fresh agent answered {other:?} to phase {phase}"),
    }
    let mut stranger = AgentState::new(format!("not-{}", msg.host_id));
    let (outcome, ack) = stranger.handle_at(&msg, at);
    assert!(
        matches!(outcome, Outcome::Invalid { .. }),
        "another host's state was taken: {outcome:?}"
    );
    assert_eq!(ack.status, AckStatus::Rejected);
    assert_eq!(stranger.generation(), 0);
}

/// The ack answers the message and is itself a valid ack on the bus.
fn check_ack(msg: &DesiredState, ack: &Ack, outcome: &Outcome) {
    assert_eq!(ack.generation, msg.generation);
    assert_eq!(ack.rollout_id, msg.rollout_id);
    assert_eq!(ack.traceparent, msg.traceparent);
    let rejected = matches!(outcome, Outcome::Invalid { .. } | Outcome::Stale { .. });
    assert_eq!(
        ack.status == AckStatus::Rejected,
        rejected,
        "{outcome:?} acked {}",
        ack.status
    );
    assert_eq!(ack.reason.is_some(), rejected);
    json_round_trip("ack", ack);
}

/// A detour verdict from the controller: decoded (or refused); a decoded one turns into what
/// the switch does, which agrees with it.
pub fn detour_verdict(data: &[u8]) {
    let Some(v) = decode_json::<DetourVerdict>("detour verdict", data) else {
        return;
    };
    match v.to_verdict() {
        Verdict::Proceed { ttl } => {
            assert!(v.errno.is_none());
            assert_eq!(ttl.map(|t| t.as_millis() as u64), v.ttl_ms);
        }
        Verdict::Deny { errno } => {
            assert_eq!(Some(errno), v.errno);
            assert!(v.ttl_ms.is_none());
        }
    }
}

/// The messages the agent writes, fuzzed through their decoders: whatever decodes must
/// round-trip.
pub fn registration(data: &[u8]) {
    decode_json::<Registration>("registration", data);
}

pub fn heartbeat(data: &[u8]) {
    decode_json::<Heartbeat>("heartbeat", data);
}

pub fn ack(data: &[u8]) {
    decode_json::<Ack>("ack", data);
}

pub fn detour_request(data: &[u8]) {
    decode_json::<DetourRequest>("detour request", data);
}

pub fn telemetry(data: &[u8]) {
    decode_json::<Telemetry>("telemetry", data);
}
