//! Rule types of the bus contract (`api-schemas/bus/common.schema.json`); what a match
//! matches is the rule algebra's (`algebra.rs`).
//!
//! Deserialization enforces the schema: unknown fields are refused, names follow the name
//! pattern, `ops` has no duplicates, strings have their length limits, a rule has at least one
//! detour and a priority of at most [`MAX_PRIORITY`]. Cross-rule checks (duplicate names, empty
//! ranges) happen when a [`crate::RuleTable`] is built.

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error as _};
use serde::{Serialize, Serializer};

use crate::names::{check_len, de_name, is_valid_name, name_error};

/// Highest rule priority the schema allows (lower values are evaluated first).
pub const MAX_PRIORITY: u32 = 1_000_000;

/// A match field that the schema lets be absent, `null`, or a value.
///
/// Absent and `null` both mean "anything"; they are kept apart only so that a message
/// survives a serde round trip unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Nullable<T> {
    /// The field is not in the message.
    #[default]
    Absent,
    /// The field is `null`.
    Null,
    /// The field has a value.
    Value(T),
}

impl<T> Nullable<T> {
    /// The value, if there is one (absent and `null` give `None`).
    pub fn as_option(&self) -> Option<&T> {
        match self {
            Nullable::Value(v) => Some(v),
            Nullable::Absent | Nullable::Null => None,
        }
    }

    /// True when the field was not in the message (used to skip it when serializing).
    pub fn is_absent(&self) -> bool {
        matches!(self, Nullable::Absent)
    }
}

impl<T> From<Option<T>> for Nullable<T> {
    /// `Some(v)` is a value, `None` is absent.
    fn from(o: Option<T>) -> Self {
        match o {
            Some(v) => Nullable::Value(v),
            None => Nullable::Absent,
        }
    }
}

impl<T: Serialize> Serialize for Nullable<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Nullable::Value(v) => s.serialize_some(v),
            Nullable::Absent | Nullable::Null => s.serialize_none(),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Nullable<T> {
    /// Only called when the field is present; an absent field takes `#[serde(default)]`.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Option::<T>::deserialize(d)? {
            Some(v) => Nullable::Value(v),
            None => Nullable::Null,
        })
    }
}

/// The operation of an IO.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
    Create,
    Delete,
}

impl Op {
    /// Every operation, in schema order.
    pub const ALL: [Op; 4] = [Op::Read, Op::Write, Op::Create, Op::Delete];

    /// The name used on the bus.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Create => "create",
            Op::Delete => "delete",
        }
    }

    /// A distinct bit per operation, for op sets.
    pub(crate) fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A byte range `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    pub fn new(start: u64, end: u64) -> Self {
        ByteRange { start, end }
    }

    /// Whether an IO of `length` bytes at `offset` overlaps the range. A zero-length IO
    /// matches when its offset lies inside the range.
    pub fn overlaps_io(&self, offset: u64, length: u64) -> bool {
        if length == 0 {
            self.start <= offset && offset < self.end
        } else {
            offset < self.end && offset.saturating_add(length) > self.start
        }
    }
}

/// Whether `prefix` matches `path` component-wise: `/data` (or `/data/`) matches `/data` and
/// `/data/x` but not `/database`; trailing slashes of the prefix are ignored, so `/` matches
/// every absolute path. An empty prefix matches nothing (the schema forbids it).
pub fn path_prefix_matches(prefix: &str, path: &str) -> bool {
    if prefix.is_empty() {
        return false;
    }
    let p = prefix.trim_end_matches('/');
    if p.is_empty() {
        return path.starts_with('/');
    }
    match path.strip_prefix(p) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// The header fields a rule matches; an absent or `null` field matches anything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// Exact tenant name.
    #[serde(
        default,
        skip_serializing_if = "Nullable::is_absent",
        deserialize_with = "de_nullable_name"
    )]
    pub tenant: Nullable<String>,
    /// The operations matched; absent or empty means any operation.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "de_ops"
    )]
    pub ops: Option<Vec<Op>>,
    /// Component-wise path prefix, see [`path_prefix_matches`].
    #[serde(
        default,
        skip_serializing_if = "Nullable::is_absent",
        deserialize_with = "de_nullable_nonempty"
    )]
    pub path_prefix: Nullable<String>,
    /// Plain string prefix of the object key.
    #[serde(
        default,
        skip_serializing_if = "Nullable::is_absent",
        deserialize_with = "de_nullable_nonempty"
    )]
    pub key_prefix: Nullable<String>,
    /// Byte range the IO must overlap.
    #[serde(default, skip_serializing_if = "Nullable::is_absent")]
    pub range: Nullable<ByteRange>,
}

impl Match {
    /// A match of everything.
    pub fn any() -> Self {
        Match::default()
    }

    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Nullable::Value(tenant.into());
        self
    }

    pub fn ops(mut self, ops: impl IntoIterator<Item = Op>) -> Self {
        self.ops = Some(ops.into_iter().collect());
        self
    }

    pub fn path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.path_prefix = Nullable::Value(prefix.into());
        self
    }

    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Nullable::Value(prefix.into());
        self
    }

    pub fn range(mut self, start: u64, end: u64) -> Self {
        self.range = Nullable::Value(ByteRange::new(start, end));
        self
    }
}

/// What a detour sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DetourWhat {
    /// The IO itself (header and data).
    Io,
    /// Only the header (a copy, e.g. to the controller).
    Header,
}

/// Kind of a detour's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DetourKind {
    /// An endpoint: another file (or host).
    File,
    /// A waypoint stage (cache, rate limiter, log writer).
    Stage,
    /// The controller.
    Controller,
}

/// Destination of a detour.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetourTarget {
    pub kind: DetourKind,
    #[serde(deserialize_with = "de_target")]
    pub target: String,
}

/// One step of a rule's action.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Detour {
    pub what: DetourWhat,
    pub to: DetourTarget,
}

impl Detour {
    pub fn new(what: DetourWhat, kind: DetourKind, target: impl Into<String>) -> Self {
        Detour {
            what,
            to: DetourTarget {
                kind,
                target: target.into(),
            },
        }
    }
}

/// One sSwitch forwarding rule. Rules are evaluated in ascending priority, then name; the
/// first match wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(deserialize_with = "de_name")]
    pub name: String,
    #[serde(deserialize_with = "de_priority")]
    pub priority: u32,
    pub r#match: Match,
    #[serde(deserialize_with = "de_detours")]
    pub detours: Vec<Detour>,
}

impl Rule {
    pub fn new(name: impl Into<String>, priority: u32, m: Match, detours: Vec<Detour>) -> Self {
        Rule {
            name: name.into(),
            priority,
            r#match: m,
            detours,
        }
    }
}

/// How a classifier recognises a tenant's IO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassifierKind {
    Cgroup,
    Uid,
    Process,
    PathPrefix,
    KeyPrefix,
}

impl ClassifierKind {
    /// The name used on the bus (and in refusals that name a classifier).
    pub fn as_str(self) -> &'static str {
        match self {
            ClassifierKind::Cgroup => "cgroup",
            ClassifierKind::Uid => "uid",
            ClassifierKind::Process => "process",
            ClassifierKind::PathPrefix => "path_prefix",
            ClassifierKind::KeyPrefix => "key_prefix",
        }
    }
}

impl fmt::Display for ClassifierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One way to recognise a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Classifier {
    pub kind: ClassifierKind,
    #[serde(deserialize_with = "de_target")]
    pub value: String,
}

/// A tenant and how to recognise its IO.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    #[serde(deserialize_with = "de_name")]
    pub name: String,
    pub classifiers: Vec<Classifier>,
}

fn de_priority<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let p = u32::deserialize(d)?;
    if p > MAX_PRIORITY {
        return Err(D::Error::custom(format!(
            "priority {p} is above the maximum {MAX_PRIORITY}"
        )));
    }
    Ok(p)
}

fn de_detours<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Detour>, D::Error> {
    let v = Vec::<Detour>::deserialize(d)?;
    if v.is_empty() {
        return Err(D::Error::custom("a rule needs at least one detour"));
    }
    Ok(v)
}

fn de_target<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    check_len("target", String::deserialize(d)?, 1, 4096)
}

/// A list of operations in which none repeats (the schemas say `uniqueItems`): a rule's
/// `match.ops`, and the ops a data path registers (the agent's bus contract).
pub fn de_ops<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Op>>, D::Error> {
    let ops = Vec::<Op>::deserialize(d)?;
    for (i, op) in ops.iter().enumerate() {
        if ops[..i].contains(op) {
            return Err(D::Error::custom(format!("ops: {op} is listed twice")));
        }
    }
    Ok(Some(ops))
}

fn de_nullable_name<'de, D: Deserializer<'de>>(d: D) -> Result<Nullable<String>, D::Error> {
    let v = Nullable::<String>::deserialize(d)?;
    if let Nullable::Value(s) = &v {
        if !is_valid_name(s) {
            return Err(D::Error::custom(name_error(s)));
        }
    }
    Ok(v)
}

fn de_nullable_nonempty<'de, D: Deserializer<'de>>(d: D) -> Result<Nullable<String>, D::Error> {
    let v = Nullable::<String>::deserialize(d)?;
    if let Nullable::Value(s) = &v {
        if s.is_empty() {
            return Err(D::Error::custom("prefix must not be empty"));
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_prefix_is_component_aware() {
        assert!(path_prefix_matches("/data", "/data"));
        assert!(path_prefix_matches("/data", "/data/x"));
        assert!(path_prefix_matches("/data", "/data/"));
        assert!(!path_prefix_matches("/data", "/database"));
        assert!(!path_prefix_matches("/data", "/dat"));
        assert!(!path_prefix_matches("/data", "/other/data"));
        assert!(path_prefix_matches("/data/", "/data/x"));
        assert!(path_prefix_matches("/data/", "/data"));
        assert!(!path_prefix_matches("/data/", "/database"));
        assert!(path_prefix_matches("/", "/anything"));
        assert!(path_prefix_matches("/", "/"));
        assert!(!path_prefix_matches("/", "relative"));
        assert!(path_prefix_matches("/a/b", "/a/b/c/d"));
        assert!(!path_prefix_matches("/a/b", "/a/bc/d"));
        assert!(!path_prefix_matches("", "/x"));
    }

    #[test]
    fn range_overlap() {
        let r = ByteRange::new(100, 200);
        assert!(r.overlaps_io(100, 1));
        assert!(r.overlaps_io(199, 1));
        assert!(r.overlaps_io(50, 51));
        assert!(!r.overlaps_io(50, 50));
        assert!(!r.overlaps_io(200, 10));
        assert!(r.overlaps_io(0, u64::MAX));
        assert!(r.overlaps_io(150, u64::MAX));
        // zero-length IO: inside [start, end)
        assert!(r.overlaps_io(100, 0));
        assert!(r.overlaps_io(199, 0));
        assert!(!r.overlaps_io(200, 0));
        assert!(!r.overlaps_io(99, 0));
    }

    #[test]
    fn nullable_round_trip_keeps_absent_and_null_apart() {
        let m: Match = serde_json::from_str(r#"{"tenant": null, "key_prefix": "k"}"#).unwrap();
        assert_eq!(m.tenant, Nullable::Null);
        assert!(m.path_prefix.is_absent());
        assert_eq!(m.key_prefix, Nullable::Value("k".to_string()));
        let back = serde_json::to_value(&m).unwrap();
        assert_eq!(back, serde_json::json!({"tenant": null, "key_prefix": "k"}));
    }

    #[test]
    fn serde_enforces_the_schema() {
        let bad = [
            r#"{"inode": 1}"#,
            r#"{"ops": ["truncate"]}"#,
            r#"{"ops": ["read", "read"]}"#,
            r#"{"ops": null}"#,
            r#"{"tenant": "Bad Name"}"#,
            r#"{"path_prefix": ""}"#,
            r#"{"range": {"start": 1}}"#,
            r#"{"range": {"start": 1, "end": 2, "step": 1}}"#,
        ];
        for b in bad {
            assert!(serde_json::from_str::<Match>(b).is_err(), "{b}");
        }
        let rule = |extra: &str| {
            format!(r#"{{"name": "r", "priority": 1, "match": {{}}, "detours": {extra}}}"#)
        };
        assert!(serde_json::from_str::<Rule>(&rule("[]")).is_err());
        assert!(serde_json::from_str::<Rule>(&rule(
            r#"[{"what": "io", "to": {"kind": "stage", "target": "x"}}]"#
        ))
        .is_ok());
        assert!(serde_json::from_str::<Rule>(&rule(
            r#"[{"what": "io", "to": {"kind": "stage", "target": ""}}]"#
        ))
        .is_err());
        assert!(serde_json::from_str::<Rule>(
            r#"{"name": "r", "priority": 1000001, "match": {}, "detours": [{"what": "io", "to": {"kind": "stage", "target": "x"}}]}"#
        )
        .is_err());
    }
}
