//! Property test: `RuleTable::lookup` (sorted, tenant-indexed, compiled) agrees with a naive
//! linear scan written independently here from the contract's wording.

use lachesis_switch::{
    Detour, DetourKind, DetourWhat, IoHeader, Match, Nullable, Op, Rule, RuleTable,
};
use proptest::prelude::*;

const TENANTS: [&str; 3] = ["a", "b", "c"];
const PATH_PREFIXES: [&str; 6] = ["/", "/a", "/a/", "/a/b", "/ab", "/b/"];
const PATHS: [&str; 8] = ["/", "/a", "/a/", "/ab", "/a/b", "/a/bc", "/a/b/c", "/b"];
const KEY_PREFIXES: [&str; 3] = ["k", "ka", "x"];
const KEYS: [&str; 5] = ["", "k", "ka1", "kb", "xk"];

fn nullable<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Nullable<T>> {
    prop_oneof![
        1 => Just(Nullable::Absent),
        1 => Just(Nullable::Null),
        2 => s.prop_map(Nullable::Value),
    ]
    .boxed()
}

fn op() -> impl Strategy<Value = Op> {
    prop::sample::select(Op::ALL.to_vec())
}

fn a_match() -> impl Strategy<Value = Match> {
    (
        nullable(prop::sample::select(TENANTS.to_vec()).prop_map(String::from)),
        prop::option::of(prop::sample::subsequence(Op::ALL.to_vec(), 0..=4)),
        nullable(prop::sample::select(PATH_PREFIXES.to_vec()).prop_map(String::from)),
        nullable(prop::sample::select(KEY_PREFIXES.to_vec()).prop_map(String::from)),
        nullable((0u64..20, 1u64..10).prop_map(|(s, n)| lachesis_switch::ByteRange::new(s, s + n))),
    )
        .prop_map(|(tenant, ops, path_prefix, key_prefix, range)| Match {
            tenant,
            ops,
            path_prefix,
            key_prefix,
            range,
        })
}

fn rules() -> impl Strategy<Value = Vec<Rule>> {
    prop::collection::vec((0u32..4, a_match()), 0..24).prop_map(|v| {
        v.into_iter()
            .enumerate()
            // Names sort differently from insertion order so ties on priority are exercised.
            .map(|(i, (prio, m))| {
                Rule::new(
                    format!("r{}", (i * 7919) % 101),
                    prio,
                    m,
                    vec![Detour::new(DetourWhat::Io, DetourKind::Stage, "s")],
                )
            })
            .collect()
    })
}

#[derive(Debug, Clone)]
struct Header {
    tenant: Option<&'static str>,
    op: Op,
    path: Option<&'static str>,
    offset: u64,
    length: u64,
    key: Option<&'static str>,
}

impl Header {
    fn io(&self) -> IoHeader<'static> {
        IoHeader {
            tenant: self.tenant,
            op: self.op,
            path: self.path,
            offset: self.offset,
            length: self.length,
            key: self.key,
        }
    }
}

fn header() -> impl Strategy<Value = Header> {
    (
        prop::option::of(prop::sample::select(vec!["a", "b", "c", "d"])),
        op(),
        prop::option::of(prop::sample::select(PATHS.to_vec())),
        0u64..32,
        0u64..8,
        prop::option::of(prop::sample::select(KEYS.to_vec())),
    )
        .prop_map(|(tenant, op, path, offset, length, key)| Header {
            tenant,
            op,
            path,
            offset,
            length,
            key,
        })
}

/// Path components, ignoring empty ones (all generated paths are absolute).
fn components(p: &str) -> Vec<&str> {
    p.split('/').filter(|c| !c.is_empty()).collect()
}

fn naive_matches(m: &Match, h: &Header) -> bool {
    let tenant_ok = match &m.tenant {
        Nullable::Value(t) => h.tenant == Some(t.as_str()),
        _ => true,
    };
    let op_ok = match &m.ops {
        Some(ops) if !ops.is_empty() => ops.contains(&h.op),
        _ => true,
    };
    let path_ok = match (&m.path_prefix, h.path) {
        (Nullable::Value(p), Some(path)) => components(path).starts_with(&components(p)),
        (Nullable::Value(_), None) => false,
        _ => true,
    };
    let key_ok = match (&m.key_prefix, h.key) {
        (Nullable::Value(k), Some(key)) => key.starts_with(k.as_str()),
        (Nullable::Value(_), None) => false,
        _ => true,
    };
    let range_ok = match &m.range {
        Nullable::Value(r) => {
            if h.length == 0 {
                r.start <= h.offset && h.offset < r.end
            } else {
                // [offset, offset+length) ∩ [start, end) ≠ ∅
                (h.offset..h.offset + h.length).any(|b| r.start <= b && b < r.end)
            }
        }
        _ => true,
    };
    tenant_ok && op_ok && path_ok && key_ok && range_ok
}

fn naive_lookup<'r>(rules: &'r [Rule], h: &Header) -> Option<&'r str> {
    let mut sorted: Vec<&Rule> = rules.iter().collect();
    sorted.sort_by(|a, b| {
        a.priority
            .cmp(&b.priority)
            .then_with(|| a.name.cmp(&b.name))
    });
    sorted
        .into_iter()
        .find(|r| naive_matches(&r.r#match, h))
        .map(|r| r.name.as_str())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn lookup_equals_naive_scan(rules in rules(), headers in prop::collection::vec(header(), 1..16)) {
        // Names are unique for fewer than 101 rules; keep the first of each name regardless.
        let mut seen = std::collections::HashSet::new();
        let rules: Vec<Rule> = rules.into_iter().filter(|r| seen.insert(r.name.clone())).collect();
        let table = RuleTable::build(rules.clone()).expect("generated rules are valid");
        for h in &headers {
            let got = table.lookup(&h.io()).map(|r| r.name.as_str());
            prop_assert_eq!(got, naive_lookup(&rules, h), "header {:?}", h);
            // The crate's reference semantics agree too.
            let reference = table.rules().find(|r| r.r#match.matches(&h.io())).map(|r| r.name.as_str());
            prop_assert_eq!(got, reference);
        }
    }

    #[test]
    fn insert_and_delete_keep_lookup_consistent(
        rules in rules(),
        headers in prop::collection::vec(header(), 1..8),
        delete_mask in prop::collection::vec(any::<bool>(), 24),
    ) {
        // Names are unique for fewer than 101 rules; keep the first of each name regardless.
        let mut seen = std::collections::HashSet::new();
        let rules: Vec<Rule> = rules.into_iter().filter(|r| seen.insert(r.name.clone())).collect();
        let mut table = RuleTable::new();
        for r in &rules {
            table.insert(r.clone()).expect("unique names");
        }
        let mut kept = Vec::new();
        for (r, del) in rules.iter().zip(delete_mask) {
            if del {
                table.delete(&r.name).expect("present");
            } else {
                kept.push(r.clone());
            }
        }
        prop_assert_eq!(table.len(), kept.len());
        for h in &headers {
            prop_assert_eq!(table.lookup(&h.io()).map(|r| r.name.as_str()), naive_lookup(&kept, h));
        }
    }
}
