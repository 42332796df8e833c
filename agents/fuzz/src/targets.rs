//! Every fuzz target: its name (also its corpus folder, `corpus/<name>/`, and its cargo-fuzz
//! target), its property, how its seeds are edited and how many cases the suite runs.

use crate::props::{bus, frame, kv_protocol, rules_file, switch, traces};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edits {
    /// Byte edits ([`crate::mutate::bytes_from`]): binary and line formats.
    Bytes,
    /// Tree edits of JSON seeds ([`crate::mutate::json_from`]), and byte edits as well for a
    /// quarter of the cases (the JSON reader itself).
    Json,
}

pub struct Target {
    pub name: &'static str,
    pub check: fn(&[u8]),
    pub edits: Edits,
    /// Proptest cases per suite run (the bound on its time).
    pub cases: u32,
}

const fn t(name: &'static str, check: fn(&[u8]), edits: Edits, cases: u32) -> Target {
    Target {
        name,
        check,
        edits,
        cases,
    }
}

pub const TARGETS: &[Target] = &[
    t("trace_arc", traces::arc, Edits::Bytes, 400),
    t(
        "trace_cloudphysics",
        traces::cloudphysics,
        Edits::Bytes,
        400,
    ),
    t("trace_msr", traces::msr, Edits::Bytes, 400),
    t("trace_oracle", traces::oracle, Edits::Bytes, 400),
    t("trace_lines", traces::lines, Edits::Bytes, 400),
    t("desired_state", bus::desired_state, Edits::Json, 600),
    t("detour_verdict", bus::detour_verdict, Edits::Json, 400),
    t("registration", bus::registration, Edits::Json, 300),
    t("heartbeat", bus::heartbeat, Edits::Json, 200),
    t("ack", bus::ack, Edits::Json, 300),
    t("detour_request", bus::detour_request, Edits::Json, 300),
    t("telemetry", bus::telemetry, Edits::Json, 300),
    t("rules", switch::rules, Edits::Json, 500),
    t("stages", switch::stages, Edits::Json, 500),
    t("rules_file", rules_file::check, Edits::Json, 500),
    t("frame", frame::check, Edits::Bytes, 600),
    t("kv_protocol", kv_protocol::check, Edits::Bytes, 600),
];

/// The target of this name; panics on a name that is not one.
pub fn get(name: &str) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no fuzz target {name:?}"))
}
