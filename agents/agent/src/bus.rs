//! The Redis bus: key names and the messages of `api-schemas/bus/*.schema.json`.
//!
//! This is the one place the agent's bus messages are defined; the rule types they carry live
//! in [`lachesis_switch`]. Deserialization enforces the schemas (unknown fields, patterns,
//! minimums, the `schema` constant), so a message that reaches the agent's logic is valid.
//! `tests/bus_contract.rs` checks these types against the schemas and fixtures.

use std::fmt;

use lachesis_switch::names::{check_len, de_name};
use lachesis_switch::{ClassifierKind, Match, Op, Rule, StageConfig, Tenant};
use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Key names. Every stream entry carries one field, [`keys::FIELD`], holding the JSON message.
///
/// The agent → controller streams are the host's own: its Redis user may append to its
/// streams only, and the controller rejects a message naming another host than the stream's.
pub mod keys {
    /// The one field of every stream entry.
    pub const FIELD: &str = "msg";

    /// Stream: agent → controller, [`super::Registration`].
    pub fn registrations(host_id: &str) -> String {
        format!("lachesis:agent:{host_id}:registrations")
    }

    /// Stream: agent → controller, [`super::Ack`].
    pub fn acks(host_id: &str) -> String {
        format!("lachesis:agent:{host_id}:acks")
    }

    /// Stream: agent → controller, [`crate::telemetry::Telemetry`].
    pub fn telemetry(host_id: &str) -> String {
        format!("lachesis:agent:{host_id}:telemetry")
    }

    /// Stream: agent → controller, [`crate::detour_link::DetourRequest`].
    pub fn detours(host_id: &str) -> String {
        format!("lachesis:agent:{host_id}:detours")
    }

    /// String with TTL: agent → controller, [`super::Heartbeat`].
    pub fn heartbeat(host_id: &str) -> String {
        format!("lachesis:agent:{host_id}:heartbeat")
    }

    /// String: controller → agent, the latest [`super::DesiredState`].
    pub fn desired(host_id: &str) -> String {
        format!("lachesis:agent:{host_id}:desired")
    }

    /// Stream: controller → agent, every [`super::DesiredState`].
    pub fn inbox(host_id: &str) -> String {
        format!("lachesis:agent:{host_id}:inbox")
    }
}

/// `^[a-z0-9][a-z0-9._-]{0,62}$`: a host id, also used in key names.
pub fn is_valid_host_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

/// `^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`: a W3C traceparent.
pub fn is_valid_traceparent(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 4
        && parts
            .iter()
            .zip([2, 32, 16, 2])
            .all(|(p, n)| p.len() == n && p.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
}

macro_rules! schema_tag {
    ($(#[$doc:meta])* $name:ident = $value:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;

        impl $name {
            pub const VALUE: &'static str = $value;
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($value)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                if s == $value {
                    Ok($name)
                } else {
                    Err(D::Error::custom(format!("schema must be {:?}, got {:?}", $value, s)))
                }
            }
        }
    };
}
// Other bus modules (the detour link) tag their messages the same way.
pub(crate) use schema_tag;

schema_tag!(
    /// `"lachesis.registration/v1"`
    RegistrationSchema = "lachesis.registration/v1"
);
schema_tag!(
    /// `"lachesis.heartbeat/v1"`
    HeartbeatSchema = "lachesis.heartbeat/v1"
);
schema_tag!(
    /// `"lachesis.desired-state/v1"`
    DesiredStateSchema = "lachesis.desired-state/v1"
);
schema_tag!(
    /// `"lachesis.ack/v1"`
    AckSchema = "lachesis.ack/v1"
);

/// An RFC 3339 timestamp, kept as the text it was received as (so it round-trips exactly).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Timestamp(String);

impl Timestamp {
    /// Now, in UTC with microseconds: `2026-11-21T10:00:00.123456Z`.
    pub fn now() -> Self {
        Self::from_datetime(OffsetDateTime::now_utc())
    }

    /// A time in UTC with microseconds.
    pub fn from_datetime(t: OffsetDateTime) -> Self {
        let t = t.to_offset(time::UtcOffset::UTC);
        Timestamp(format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.microsecond()
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The time this stands for.
    pub fn to_datetime(&self) -> OffsetDateTime {
        OffsetDateTime::parse(&self.0, &Rfc3339).expect("validated on construction")
    }
}

impl TryFrom<String> for Timestamp {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        match OffsetDateTime::parse(&s, &Rfc3339) {
            Ok(_) => Ok(Timestamp(s)),
            Err(e) => Err(format!("invalid RFC 3339 timestamp {s:?}: {e}")),
        }
    }
}

impl From<Timestamp> for String {
    fn from(t: Timestamp) -> String {
        t.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn de_host_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if is_valid_host_id(&s) {
        Ok(s)
    } else {
        Err(D::Error::custom(format!(
            "invalid host_id {s:?}: expected 1-63 characters of a-z, 0-9, '.', '_' and '-', \
             starting with a letter or digit"
        )))
    }
}

/// Required, nullable (the field must be present): a traceparent or `null`.
fn de_traceparent<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Option::<String>::deserialize(d)?;
    if let Some(s) = &v {
        if !is_valid_traceparent(s) {
            return Err(D::Error::custom(format!("invalid traceparent {s:?}")));
        }
    }
    Ok(v)
}

/// Required, nullable: a rollout id of 1-64 characters or `null`.
fn de_rollout_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| check_len("rollout_id", s, 1, 64))
        .transpose()
}

/// Required, nullable string.
fn de_nullable_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)
}

/// A count that must be at least 1; `what` names it in the error.
fn de_at_least_one<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default + PartialEq>(
    d: D,
    what: &str,
) -> Result<T, D::Error> {
    let n = T::deserialize(d)?;
    if n == T::default() {
        return Err(D::Error::custom(format!("{what} must be at least 1")));
    }
    Ok(n)
}

fn de_generation_positive<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    de_at_least_one(d, "generation")
}

fn de_agent_version<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    check_len("agent_version", String::deserialize(d)?, 1, 64)
}

fn de_nonempty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    check_len("path", String::deserialize(d)?, 1, usize::MAX)
}

fn de_cpus<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_at_least_one(d, "cpus")
}

/// The schema says `uniqueItems`: a kind listed twice is refused, as the controller does.
fn de_classifier_kinds<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ClassifierKind>, D::Error> {
    let kinds = Vec::<ClassifierKind>::deserialize(d)?;
    for (i, k) in kinds.iter().enumerate() {
        if kinds[..i].contains(k) {
            return Err(D::Error::custom(format!(
                "classifiers: {k} is listed twice"
            )));
        }
    }
    Ok(kinds)
}

fn de_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(D::Error::custom(format!(
            "uptime_s must be a number >= 0, got {v}"
        )));
    }
    Ok(v)
}

/// Whole seconds are written as integers (`0`, not `0.0`), so messages round-trip.
fn ser_seconds<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if v.fract() == 0.0 && *v >= 0.0 && *v < EXACT {
        s.serialize_u64(*v as u64)
    } else {
        s.serialize_f64(*v)
    }
}

/// Kind of a flash device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A regular file standing in for a device.
    File,
    /// A block device.
    Block,
    /// An NVMe namespace (character device for passthrough).
    Nvme,
    /// Data in a file with an FDP SSD's FTL simulated beside it (`lachesis_device::measured`).
    Measured,
}

/// One flash device of the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    #[serde(deserialize_with = "de_name")]
    pub name: String,
    #[serde(deserialize_with = "de_nonempty")]
    pub path: String,
    pub kind: DeviceKind,
    pub size_bytes: u64,
    pub fdp: bool,
    pub placement_handles: u32,
    /// Nominal reclaim unit size; absent: unknown or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_unit_bytes: Option<u64>,
}

/// What the kernel offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    pub release: String,
    pub btf: bool,
    pub io_uring: bool,
    pub fuse: bool,
}

/// One data path the agent runs, the tenant classifier kinds it decides and the operations
/// its IO carries (the rule ops it can match; the controller refuses the others).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataPath {
    #[serde(deserialize_with = "de_classifier_kinds")]
    pub classifiers: Vec<ClassifierKind>,
    /// `None`: not registered (an agent from before ops were), not judged.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lachesis_switch::rule::de_ops"
    )]
    pub ops: Option<Vec<Op>>,
}

/// The data paths the agent runs (`None`: not run), so the controller can refuse a tenant
/// one of them would see the IO of but could not recognise, before anything ships.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataPaths {
    /// The FUSE switch (`--mount`): file IO, classified at open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuse: Option<DataPath>,
    /// The key-value front end (`--kv-listen`): requests, classified by key (or port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<DataPath>,
}

/// What the host offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    #[serde(deserialize_with = "de_cpus")]
    pub cpus: u32,
    pub devices: Vec<Device>,
    pub kernel: Kernel,
    /// Absent: an agent from before data paths were registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_paths: Option<DataPaths>,
}

/// `lachesis.registration/v1`: appended to [`keys::registrations`] at start and after every
/// reconnect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    pub schema: RegistrationSchema,
    #[serde(deserialize_with = "de_host_id")]
    pub host_id: String,
    #[serde(deserialize_with = "de_agent_version")]
    pub agent_version: String,
    pub started_at: Timestamp,
    pub capabilities: Capabilities,
}

/// `lachesis.heartbeat/v1`: written to [`keys::heartbeat`] with a TTL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub schema: HeartbeatSchema,
    #[serde(deserialize_with = "de_host_id")]
    pub host_id: String,
    pub sent_at: Timestamp,
    /// The applied generation (0 before the first).
    pub generation: u64,
    #[serde(serialize_with = "ser_seconds", deserialize_with = "de_seconds")]
    pub uptime_s: f64,
}

/// A tenant's share of the cache: the controller's current allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSize {
    #[serde(deserialize_with = "de_name")]
    pub tenant: String,
    pub size_bytes: u64,
}

/// `lachesis.desired-state/v1`: the whole desired state of one agent, in [`keys::desired`]
/// (latest) and [`keys::inbox`] (every generation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesiredState {
    pub schema: DesiredStateSchema,
    #[serde(deserialize_with = "de_host_id")]
    pub host_id: String,
    #[serde(deserialize_with = "de_generation_positive")]
    pub generation: u64,
    #[serde(deserialize_with = "de_rollout_id")]
    pub rollout_id: Option<String>,
    pub issued_at: Timestamp,
    #[serde(deserialize_with = "de_traceparent")]
    pub traceparent: Option<String>,
    /// Absent: a one-phase install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Phase quiesce: the flows to quiesce and drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiesce: Option<Vec<Match>>,
    /// A rollback: the generation whose rules and tenants this one carries again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restores: Option<u64>,
    /// Per-tenant cache sizes; absent: no allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caches: Option<Vec<CacheSize>>,
    pub tenants: Vec<Tenant>,
    pub rules: Vec<Rule>,
    /// The stages rules name as targets; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<Vec<StageConfig>>,
}

impl DesiredState {
    /// The phase this message asks for (absent means install).
    pub fn phase(&self) -> Phase {
        self.phase.unwrap_or(Phase::Install)
    }
}

/// Phase of a two-phase rollout: first quiesce (and drain) the moving flows everywhere,
/// then install the new rules and resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Quiesce,
    Install,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Quiesce => "quiesce",
            Phase::Install => "install",
        })
    }
}

/// Outcome of a generation at an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckStatus {
    Applied,
    Rejected,
}

impl fmt::Display for AckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AckStatus::Applied => "applied",
            AckStatus::Rejected => "rejected",
        })
    }
}

/// `lachesis.ack/v1`: appended to [`keys::acks`] for every desired state received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ack {
    pub schema: AckSchema,
    #[serde(deserialize_with = "de_host_id")]
    pub host_id: String,
    /// The generation acknowledged (the one received, also when refused).
    #[serde(deserialize_with = "de_generation_positive")]
    pub generation: u64,
    #[serde(deserialize_with = "de_rollout_id")]
    pub rollout_id: Option<String>,
    /// The phase acknowledged; absent: install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    pub status: AckStatus,
    /// Why a generation was refused (`null` when applied).
    #[serde(deserialize_with = "de_nullable_string")]
    pub reason: Option<String>,
    /// Rules installed at the agent after handling this message.
    pub rules_installed: u64,
    /// Phase quiesce: in-flight IO operations of the quiesced flows waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained: Option<u64>,
    pub acked_at: Timestamp,
    #[serde(deserialize_with = "de_traceparent")]
    pub traceparent: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ids() {
        for ok in ["host-a", "edge.rack7-12", "0", "a_b", &"a".repeat(63)] {
            assert!(is_valid_host_id(ok), "{ok}");
        }
        for bad in ["", "Host A", "-a", ".a", "a b", "A", &"a".repeat(64), "a:b"] {
            assert!(!is_valid_host_id(bad), "{bad}");
        }
    }

    #[test]
    fn traceparents() {
        assert!(is_valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        for bad in [
            "not-a-trace",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "",
        ] {
            assert!(!is_valid_traceparent(bad), "{bad}");
        }
    }

    #[test]
    fn timestamps() {
        let now = Timestamp::now();
        assert!(now.as_str().ends_with('Z'));
        assert_eq!(now.as_str().len(), "2026-11-21T10:00:00.123456Z".len());
        assert!(Timestamp::try_from(now.as_str().to_string()).is_ok());
        assert!(Timestamp::try_from("2026-11-21T10:00:00.123456+01:00".to_string()).is_ok());
        assert!(Timestamp::try_from("2026-11-21 10:00".to_string()).is_err());
        assert!(Timestamp::try_from("yesterday".to_string()).is_err());
    }

    #[test]
    fn uptime_is_written_as_an_integer_when_whole() {
        let hb = Heartbeat {
            schema: HeartbeatSchema,
            host_id: "h".into(),
            sent_at: Timestamp::now(),
            generation: 0,
            uptime_s: 0.0,
        };
        let v = serde_json::to_value(&hb).unwrap();
        assert_eq!(v["uptime_s"], serde_json::json!(0));
        let hb = Heartbeat {
            uptime_s: 5.25,
            ..hb
        };
        assert_eq!(
            serde_json::to_value(&hb).unwrap()["uptime_s"],
            serde_json::json!(5.25)
        );
    }

    #[test]
    fn required_nullable_fields_must_be_present() {
        let ok = r#"{"schema":"lachesis.ack/v1","host_id":"h","generation":1,"rollout_id":null,
            "status":"applied","reason":null,"rules_installed":0,
            "acked_at":"2026-11-21T10:01:00Z","traceparent":null}"#;
        assert!(serde_json::from_str::<Ack>(ok).is_ok());
        let missing = ok.replace(r#""reason":null,"#, "");
        let err = serde_json::from_str::<Ack>(&missing).unwrap_err();
        assert!(err.to_string().contains("missing field `reason`"), "{err}");
    }
}
