//! The switch's rule and stage contract (`agents/switch/src/rule.rs`, `table.rs`, `stage.rs`).
//!
//! A decoded rule list that builds a table must look up like the contract's reference
//! semantics (first match in priority, then name, order, by [`Match::matches`]) for headers
//! made from the rules' own fields, and keep doing so through the Switch API verbs; a decoded
//! stage list either passes [`check_stages`] as a set or is refused with a reason.

use std::collections::HashSet;

use lachesis_switch::{check_stages, IoHeader, Op, Rule, RuleTable, StageConfig};

use super::decode_json;

/// An IO header's fields, owned: (tenant, op, path, offset, length, key).
type Header = (Option<String>, Op, Option<String>, u64, u64, Option<String>);

/// Headers that hit the rules' edges: each rule's tenant, path prefix (and the path one
/// character longer), key prefix and range ends, with every op.
fn headers(rules: &[Rule]) -> Vec<Header> {
    let mut tenants: Vec<Option<String>> = vec![None, Some("zz-other".into())];
    let mut paths: Vec<Option<String>> = vec![None, Some("/".into())];
    let mut keys: Vec<Option<String>> = vec![None, Some(String::new())];
    let mut spans: Vec<(u64, u64)> = vec![(0, 0), (0, u64::MAX)];
    for r in rules {
        let m = &r.r#match;
        tenants.extend(m.tenant.as_option().cloned().map(Some));
        if let Some(p) = m.path_prefix.as_option() {
            paths.push(Some(p.clone()));
            paths.push(Some(format!("{p}/x")));
            paths.push(Some(format!("{p}x")));
        }
        if let Some(k) = m.key_prefix.as_option() {
            keys.push(Some(k.clone()));
            keys.push(Some(format!("{k}1")));
        }
        if let Some(rg) = m.range.as_option() {
            spans.extend([
                (rg.start, 0),
                (rg.start, 1),
                (rg.end.saturating_sub(1), 1),
                (rg.end, 0),
            ]);
        }
    }
    // Keep the product small: a few of each, always including the first ones.
    let mut out = Vec::new();
    for t in tenants.iter().take(4) {
        for op in Op::ALL {
            for p in paths.iter().take(5) {
                for &(off, len) in spans.iter().take(5) {
                    for k in keys.iter().take(3) {
                        out.push((t.clone(), op, p.clone(), off, len, k.clone()));
                    }
                }
            }
        }
    }
    out
}

/// The reference answer: the first rule in (priority, name) order whose match covers `h`.
fn naive<'a>(rules: &'a [Rule], h: &IoHeader<'_>) -> Option<&'a Rule> {
    let mut sorted: Vec<&Rule> = rules.iter().collect();
    sorted.sort_by(|a, b| (a.priority, &a.name).cmp(&(b.priority, &b.name)));
    sorted.into_iter().find(|r| r.r#match.matches(h))
}

fn agrees(table: &RuleTable, rules: &[Rule], when: &str) {
    for (t, op, p, off, len, k) in headers(rules) {
        let h = IoHeader {
            tenant: t.as_deref(),
            op,
            path: p.as_deref(),
            offset: off,
            length: len,
            key: k.as_deref(),
        };
        assert_eq!(
            table.lookup(&h).map(|r| &r.name),
            naive(rules, &h).map(|r| &r.name),
            "{when}: lookup disagrees with the reference semantics for {h:?}"
        );
    }
}

/// A JSON list of rules.
pub fn rules(data: &[u8]) {
    let Some(rules) = decode_json::<Vec<Rule>>("rules", data) else {
        return;
    };
    let table = match RuleTable::build(rules.clone()) {
        Ok(t) => t,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert_eq!(table.len(), rules.len());
    let names: HashSet<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names.len(),
        rules.len(),
        "a table was built with a duplicate name"
    );
    agrees(&table, &rules, "built");
    // Delete each rule and insert it back: the table answers as before; unknown names and
    // duplicates are refused and change nothing.
    let mut t = table.clone();
    for r in &rules {
        let gone = t.delete(&r.name).expect("a rule of the table deletes");
        assert_eq!(&gone, r);
        assert!(t.get(&r.name).is_none());
        assert!(t.delete(&r.name).is_err());
        assert!(t.quiesce(&r.name).is_err());
        t.insert(gone).expect("a deleted rule inserts again");
        assert!(
            t.insert(r.clone()).is_err(),
            "a duplicate name was inserted"
        );
        t.quiesce(&r.name).unwrap();
        assert!(t.is_quiesced(&r.name));
        t.resume(&r.name).unwrap();
        assert!(!t.is_quiesced(&r.name));
    }
    assert_eq!(t.len(), rules.len());
    agrees(&t, &rules, "after delete and insert of every rule");
}

/// A JSON list of stages, checked as a set.
pub fn stages(data: &[u8]) {
    let Some(stages) = decode_json::<Vec<StageConfig>>("stages", data) else {
        return;
    };
    match check_stages(&stages) {
        Ok(()) => {
            let names: HashSet<&str> = stages.iter().map(|s| s.name()).collect();
            assert_eq!(names.len(), stages.len(), "duplicate stage names passed");
            for s in &stages {
                let StageConfig::Cache(c) = s else { continue };
                // Every `next` chain ends at a cache stage of the set, without a cycle.
                let mut at = c;
                for _ in 0..=stages.len() {
                    let Some(next) = &at.next else { break };
                    match stages.iter().find(|s| s.name() == next) {
                        Some(StageConfig::Cache(n)) => at = n,
                        other => panic!("stage {:?}: next {next:?} is {other:?}", c.name),
                    }
                }
                assert!(at.next.is_none(), "stage {:?}: next stages cycle", c.name);
            }
        }
        Err(e) => assert!(!e.is_empty()),
    }
}
