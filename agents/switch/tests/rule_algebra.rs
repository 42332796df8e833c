//! The rule algebra against `api-schemas/fixtures/rule-match/cases.json`, the cases every
//! implementation of it (this crate, the controller's) runs: `matches` (a match and one IO),
//! `covers` (a covers b: every IO b matches, a matches) and `overlaps` (some IO matches both).

use std::path::Path;

use lachesis_switch::{IoHeader, Match, Op};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Io {
    tenant: Option<String>,
    op: Op,
    path: Option<String>,
    key: Option<String>,
    offset: u64,
    length: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchCase {
    name: String,
    r#match: Match,
    io: Io,
    expect: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PairCase {
    name: String,
    a: Match,
    b: Match,
    expect: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cases {
    matches: Vec<MatchCase>,
    covers: Vec<PairCase>,
    overlaps: Vec<PairCase>,
}

fn cases() -> Cases {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../api-schemas/fixtures/rule-match/cases.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs every case, then fails naming all that disagree (not just the first).
fn check<C>(list: &[C], name: impl Fn(&C) -> &str, got_expected: impl Fn(&C) -> (bool, bool)) {
    assert!(!list.is_empty(), "no cases");
    let wrong: Vec<String> = list
        .iter()
        .filter_map(|c| {
            let (got, expected) = got_expected(c);
            (got != expected).then(|| format!("{}: got {got}, expected {expected}", name(c)))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn matches_cases() {
    check(
        &cases().matches,
        |c| &c.name,
        |c| {
            let io = &c.io;
            let h = IoHeader {
                tenant: io.tenant.as_deref(),
                op: io.op,
                path: io.path.as_deref(),
                offset: io.offset,
                length: io.length,
                key: io.key.as_deref(),
            };
            (c.r#match.matches(&h), c.expect)
        },
    );
}

#[test]
fn covers_cases() {
    check(
        &cases().covers,
        |c| &c.name,
        |c| (c.a.covers(&c.b), c.expect),
    );
}

#[test]
fn overlaps_cases() {
    // Symmetric: each case holds both ways round.
    check(
        &cases().overlaps,
        |c| &c.name,
        |c| {
            let (ab, ba) = (c.a.overlaps(&c.b), c.b.overlaps(&c.a));
            assert_eq!(ab, ba, "{}: not symmetric", c.name);
            (ab, c.expect)
        },
    );
}

#[test]
fn covering_implies_overlapping() {
    let cases = cases();
    for c in cases.covers.iter().filter(|c| c.expect) {
        assert!(
            c.a.overlaps(&c.b),
            "{}: covers but does not overlap",
            c.name
        );
    }
}
