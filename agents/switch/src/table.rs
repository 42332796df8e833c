//! The rule table: rules ordered by (priority, name), indexed by tenant, first match wins.

use std::collections::{HashMap, HashSet};

use crate::gate::Held;
use crate::names::{is_valid_name, name_error};
use crate::rule::{Op, Rule, MAX_PRIORITY};

/// The header of one IO, as the front ends see it (sRoute's IO header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoHeader<'a> {
    /// The tenant the classifier put the IO in, if any.
    pub tenant: Option<&'a str>,
    pub op: Op,
    /// File path, for file IO.
    pub path: Option<&'a str>,
    pub offset: u64,
    pub length: u64,
    /// Object key, for KV IO.
    pub key: Option<&'a str>,
}

impl<'a> IoHeader<'a> {
    /// An IO with no tenant, path or key, at offset 0 with length 0.
    pub fn new(op: Op) -> Self {
        IoHeader {
            tenant: None,
            op,
            path: None,
            offset: 0,
            length: 0,
            key: None,
        }
    }

    pub fn tenant(mut self, tenant: &'a str) -> Self {
        self.tenant = Some(tenant);
        self
    }

    pub fn path(mut self, path: &'a str) -> Self {
        self.path = Some(path);
        self
    }

    pub fn key(mut self, key: &'a str) -> Self {
        self.key = Some(key);
        self
    }

    pub fn at(mut self, offset: u64, length: u64) -> Self {
        self.offset = offset;
        self.length = length;
        self
    }
}

/// An [`IoHeader`] that outlives the IO call: kept while the IO is in flight, to decide
/// whether it belongs to a flow quiesced after it was admitted ([`crate::gate`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnedIoHeader {
    pub tenant: Option<String>,
    pub op: Op,
    pub path: Option<String>,
    pub offset: u64,
    pub length: u64,
    pub key: Option<String>,
}

impl OwnedIoHeader {
    pub fn of(h: &IoHeader<'_>) -> Self {
        OwnedIoHeader {
            tenant: h.tenant.map(str::to_owned),
            op: h.op,
            path: h.path.map(str::to_owned),
            offset: h.offset,
            length: h.length,
            key: h.key.map(str::to_owned),
        }
    }

    /// The header to match.
    pub fn header(&self) -> IoHeader<'_> {
        IoHeader {
            tenant: self.tenant.as_deref(),
            op: self.op,
            path: self.path.as_deref(),
            offset: self.offset,
            length: self.length,
            key: self.key.as_deref(),
        }
    }
}

/// Why a rule table could not be built or changed. The table is unchanged after an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("duplicate rule name {0:?}")]
    DuplicateName(String),
    #[error("rule {name:?}: range start {start} must be below its end {end}")]
    EmptyRange { name: String, start: u64, end: u64 },
    #[error("rule {0:?}: a rule needs at least one detour")]
    NoDetours(String),
    #[error("rule {name:?}: priority {priority} is above the maximum {MAX_PRIORITY}")]
    Priority { name: String, priority: u32 },
    #[error("rule {name:?}: {field} must not be empty")]
    EmptyPrefix { name: String, field: &'static str },
    #[error("rule {0:?}: {msg}", msg = name_error(.0))]
    InvalidName(String),
    #[error("rule {name:?}: tenant {tenant:?}: {msg}", msg = name_error(.tenant))]
    InvalidTenant { name: String, tenant: String },
    #[error("no rule named {0:?}")]
    UnknownRule(String),
}

/// A rule with its match compiled for lookup.
#[derive(Debug, Clone)]
struct Entry {
    rule: Rule,
    /// Bit set of [`Op::bit`] (`Match::op_set`).
    ops: u8,
}

impl Entry {
    fn compile(rule: Rule) -> Result<Self, TableError> {
        validate(&rule)?;
        let ops = rule.r#match.op_set();
        Ok(Entry { rule, ops })
    }

    #[inline]
    fn accepts(&self, h: &IoHeader<'_>) -> bool {
        // The tenant was already checked by the index.
        self.ops & h.op.bit() != 0 && self.rule.r#match.path_key_and_range_match(h)
    }
}

fn validate(rule: &Rule) -> Result<(), TableError> {
    let name = &rule.name;
    if !is_valid_name(name) {
        return Err(TableError::InvalidName(name.clone()));
    }
    if rule.priority > MAX_PRIORITY {
        return Err(TableError::Priority {
            name: name.clone(),
            priority: rule.priority,
        });
    }
    if rule.detours.is_empty() {
        return Err(TableError::NoDetours(name.clone()));
    }
    let m = &rule.r#match;
    if let Some(t) = m.tenant.as_option() {
        if !is_valid_name(t) {
            return Err(TableError::InvalidTenant {
                name: name.clone(),
                tenant: t.clone(),
            });
        }
    }
    for (field, v) in [
        ("path_prefix", &m.path_prefix),
        ("key_prefix", &m.key_prefix),
    ] {
        if v.as_option().is_some_and(|s| s.is_empty()) {
            return Err(TableError::EmptyPrefix {
                name: name.clone(),
                field,
            });
        }
    }
    if let Some(r) = m.range.as_option() {
        if r.start >= r.end {
            return Err(TableError::EmptyRange {
                name: name.clone(),
                start: r.start,
                end: r.end,
            });
        }
    }
    Ok(())
}

/// The sSwitch rule table.
///
/// Rules are kept ordered by (priority ascending, name ascending); [`RuleTable::lookup`]
/// returns the first rule whose match covers the IO header. Rules are indexed by tenant, so a
/// lookup only visits rules for the IO's tenant and rules for any tenant.
#[derive(Debug, Clone, Default)]
pub struct RuleTable {
    /// All rules, in evaluation order.
    entries: Vec<Entry>,
    /// Rule name to its position in `entries`.
    by_name: HashMap<String, usize>,
    /// For each tenant named by some rule: positions of the rules for that tenant or for any
    /// tenant, ascending.
    by_tenant: HashMap<String, Vec<usize>>,
    /// Positions of the rules for any tenant, ascending (what an IO of another or no tenant
    /// can match).
    any_tenant: Vec<usize>,
    /// Names of quiesced rules.
    quiesced: Held<String>,
}

impl RuleTable {
    /// An empty table (no IO matches).
    pub fn new() -> Self {
        RuleTable::default()
    }

    /// Build a table from a rule list in any order. Fails on duplicate names, an empty or
    /// inverted range, a rule without detours, or a name or priority outside the schema.
    pub fn build(rules: impl IntoIterator<Item = Rule>) -> Result<Self, TableError> {
        let mut entries = Vec::new();
        let mut seen = HashSet::new();
        for rule in rules {
            if !seen.insert(rule.name.clone()) {
                return Err(TableError::DuplicateName(rule.name));
            }
            entries.push(Entry::compile(rule)?);
        }
        let mut t = RuleTable {
            entries,
            ..RuleTable::default()
        };
        t.reindex();
        Ok(t)
    }

    fn reindex(&mut self) {
        self.entries
            .sort_by(|a, b| (a.rule.priority, &a.rule.name).cmp(&(b.rule.priority, &b.rule.name)));
        self.by_name = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.rule.name.clone(), i))
            .collect();
        self.any_tenant.clear();
        self.by_tenant.clear();
        for (i, e) in self.entries.iter().enumerate() {
            if let Some(t) = e.rule.r#match.tenant.as_option() {
                self.by_tenant.entry(t.clone()).or_default();
            } else {
                self.any_tenant.push(i);
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            match e.rule.r#match.tenant.as_option() {
                Some(t) => self.by_tenant.get_mut(t).expect("inserted above").push(i),
                None => {
                    for list in self.by_tenant.values_mut() {
                        list.push(i);
                    }
                }
            }
        }
        self.quiesced.retain(|n| self.by_name.contains_key(n));
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The rules in evaluation order.
    pub fn rules(&self) -> impl ExactSizeIterator<Item = &Rule> + '_ {
        self.entries.iter().map(|e| &e.rule)
    }

    /// The rule with this name.
    pub fn get(&self, name: &str) -> Option<&Rule> {
        self.by_name.get(name).map(|&i| &self.entries[i].rule)
    }

    /// The first rule, in (priority, name) order, matching the IO.
    pub fn lookup(&self, h: &IoHeader<'_>) -> Option<&Rule> {
        let candidates = match h.tenant.and_then(|t| self.by_tenant.get(t)) {
            Some(list) => list.as_slice(),
            None => self.any_tenant.as_slice(),
        };
        candidates
            .iter()
            .map(|&i| &self.entries[i])
            .find(|e| e.accepts(h))
            .map(|e| &e.rule)
    }

    /// Switch API Insert: add a rule. Fails, leaving the table unchanged, if a rule of that
    /// name exists or the rule is invalid.
    pub fn insert(&mut self, rule: Rule) -> Result<(), TableError> {
        if self.by_name.contains_key(&rule.name) {
            return Err(TableError::DuplicateName(rule.name));
        }
        self.entries.push(Entry::compile(rule)?);
        self.reindex();
        Ok(())
    }

    /// Switch API Delete: remove the rule of that name and return it.
    pub fn delete(&mut self, name: &str) -> Result<Rule, TableError> {
        let i = *self
            .by_name
            .get(name)
            .ok_or_else(|| TableError::UnknownRule(name.to_string()))?;
        let e = self.entries.remove(i);
        self.reindex();
        Ok(e.rule)
    }

    /// Switch API Quiesce: mark a rule so the IO path holds the IO it matches (until
    /// [`RuleTable::resume`]). Lookups still return the rule; callers check
    /// [`RuleTable::is_quiesced`].
    pub fn quiesce(&mut self, name: &str) -> Result<(), TableError> {
        if !self.by_name.contains_key(name) {
            return Err(TableError::UnknownRule(name.to_string()));
        }
        self.quiesced.hold(name.to_string());
        Ok(())
    }

    /// Undo [`RuleTable::quiesce`].
    pub fn resume(&mut self, name: &str) -> Result<(), TableError> {
        if !self.by_name.contains_key(name) {
            return Err(TableError::UnknownRule(name.to_string()));
        }
        self.quiesced.release(name);
        Ok(())
    }

    pub fn is_quiesced(&self, name: &str) -> bool {
        self.quiesced.holds(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::{Detour, DetourKind, DetourWhat, Match, Nullable};

    fn rule(name: &str, priority: u32, m: Match) -> Rule {
        Rule::new(
            name,
            priority,
            m,
            vec![Detour::new(
                DetourWhat::Io,
                DetourKind::Stage,
                format!("stage/{name}"),
            )],
        )
    }

    fn hit<'t>(t: &'t RuleTable, h: IoHeader<'_>) -> Option<&'t str> {
        let got = t.lookup(&h).map(|r| r.name.as_str());
        // The reference semantics must agree.
        let naive = t
            .rules()
            .find(|r| r.r#match.matches(&h))
            .map(|r| r.name.as_str());
        assert_eq!(got, naive, "{h:?}");
        got
    }

    #[test]
    fn empty_table_matches_nothing() {
        let t = RuleTable::new();
        assert!(t.is_empty());
        assert_eq!(hit(&t, IoHeader::new(Op::Read)), None);
    }

    #[test]
    fn wildcard_matches_everything() {
        let t = RuleTable::build([rule("all", 5, Match::any())]).unwrap();
        assert_eq!(hit(&t, IoHeader::new(Op::Read)), Some("all"));
        assert_eq!(
            hit(
                &t,
                IoHeader::new(Op::Delete)
                    .tenant("x")
                    .path("/p")
                    .key("k")
                    .at(9, 9)
            ),
            Some("all")
        );
    }

    #[test]
    fn tenant_is_exact() {
        let t = RuleTable::build([rule("web", 1, Match::any().tenant("web"))]).unwrap();
        assert_eq!(hit(&t, IoHeader::new(Op::Read).tenant("web")), Some("web"));
        assert_eq!(hit(&t, IoHeader::new(Op::Read).tenant("web2")), None);
        assert_eq!(hit(&t, IoHeader::new(Op::Read).tenant("we")), None);
        assert_eq!(hit(&t, IoHeader::new(Op::Read)), None);
    }

    #[test]
    fn null_fields_are_wildcards() {
        let m = Match {
            tenant: Nullable::Null,
            ops: Some(vec![]),
            path_prefix: Nullable::Null,
            key_prefix: Nullable::Null,
            range: Nullable::Null,
        };
        let t = RuleTable::build([rule("n", 1, m)]).unwrap();
        for op in Op::ALL {
            assert_eq!(hit(&t, IoHeader::new(op).tenant("a")), Some("n"));
        }
    }

    #[test]
    fn ops() {
        let t = RuleTable::build([
            rule("w", 1, Match::any().ops([Op::Write, Op::Create])),
            rule("rest", 2, Match::any()),
        ])
        .unwrap();
        assert_eq!(hit(&t, IoHeader::new(Op::Write)), Some("w"));
        assert_eq!(hit(&t, IoHeader::new(Op::Create)), Some("w"));
        assert_eq!(hit(&t, IoHeader::new(Op::Read)), Some("rest"));
        assert_eq!(hit(&t, IoHeader::new(Op::Delete)), Some("rest"));
    }

    #[test]
    fn path_prefix() {
        let t = RuleTable::build([
            rule("data", 1, Match::any().path_prefix("/data")),
            rule("srv", 1, Match::any().path_prefix("/srv/web/")),
        ])
        .unwrap();
        let p = |path| hit(&t, IoHeader::new(Op::Read).path(path));
        assert_eq!(p("/data"), Some("data"));
        assert_eq!(p("/data/x/y"), Some("data"));
        assert_eq!(p("/database"), None);
        assert_eq!(p("/srv/web/index.html"), Some("srv"));
        assert_eq!(p("/srv/web"), Some("srv"));
        assert_eq!(p("/srv/website"), None);
        // An IO without a path (an object) does not match a path rule.
        assert_eq!(hit(&t, IoHeader::new(Op::Read).key("/data/x")), None);
    }

    #[test]
    fn key_prefix_is_plain() {
        let t = RuleTable::build([rule("k", 1, Match::any().key_prefix("user:"))]).unwrap();
        assert_eq!(hit(&t, IoHeader::new(Op::Read).key("user:42")), Some("k"));
        assert_eq!(hit(&t, IoHeader::new(Op::Read).key("user:")), Some("k"));
        assert_eq!(hit(&t, IoHeader::new(Op::Read).key("user")), None);
        assert_eq!(hit(&t, IoHeader::new(Op::Read).key("xuser:1")), None);
        assert_eq!(hit(&t, IoHeader::new(Op::Read).path("user:42")), None);
    }

    #[test]
    fn range_overlap() {
        let t = RuleTable::build([rule("r", 1, Match::any().range(4096, 8192))]).unwrap();
        let at = |o, l| hit(&t, IoHeader::new(Op::Read).at(o, l));
        assert_eq!(at(0, 4096), None);
        assert_eq!(at(0, 4097), Some("r"));
        assert_eq!(at(8191, 100), Some("r"));
        assert_eq!(at(8192, 100), None);
        assert_eq!(at(4096, 0), Some("r"));
        assert_eq!(at(8192, 0), None);
        assert_eq!(at(u64::MAX, u64::MAX), None);
        assert_eq!(at(0, u64::MAX), Some("r"));
    }

    #[test]
    fn all_fields_together() {
        let m = Match::any()
            .tenant("analytics")
            .ops([Op::Read])
            .path_prefix("/data/")
            .range(0, 1 << 20);
        let t = RuleTable::build([rule("a", 10, m)]).unwrap();
        let base = IoHeader::new(Op::Read)
            .tenant("analytics")
            .path("/data/f")
            .at(0, 4096);
        assert_eq!(hit(&t, base), Some("a"));
        assert_eq!(
            hit(
                &t,
                IoHeader {
                    op: Op::Write,
                    ..base
                }
            ),
            None
        );
        assert_eq!(
            hit(
                &t,
                IoHeader {
                    tenant: Some("web"),
                    ..base
                }
            ),
            None
        );
        assert_eq!(
            hit(
                &t,
                IoHeader {
                    path: Some("/etc/f"),
                    ..base
                }
            ),
            None
        );
        assert_eq!(
            hit(
                &t,
                IoHeader {
                    offset: 1 << 20,
                    ..base
                }
            ),
            None
        );
    }

    #[test]
    fn first_match_by_priority_then_name() {
        // Given in scrambled order.
        let t = RuleTable::build([
            rule("zz", 1, Match::any()),
            rule("late", 100, Match::any()),
            rule("aa", 1, Match::any().ops([Op::Write])),
            rule("first", 0, Match::any().tenant("t")),
        ])
        .unwrap();
        let order: Vec<_> = t.rules().map(|r| r.name.as_str()).collect();
        assert_eq!(order, ["first", "aa", "zz", "late"]);
        assert_eq!(hit(&t, IoHeader::new(Op::Write).tenant("t")), Some("first"));
        assert_eq!(hit(&t, IoHeader::new(Op::Write).tenant("u")), Some("aa"));
        assert_eq!(hit(&t, IoHeader::new(Op::Read).tenant("u")), Some("zz"));
        assert_eq!(hit(&t, IoHeader::new(Op::Read)), Some("zz"));
    }

    #[test]
    fn tenant_rules_interleave_with_wildcards() {
        let t = RuleTable::build([
            rule("any-first", 1, Match::any().ops([Op::Delete])),
            rule("mine", 2, Match::any().tenant("me")),
            rule("any-last", 3, Match::any()),
        ])
        .unwrap();
        assert_eq!(
            hit(&t, IoHeader::new(Op::Delete).tenant("me")),
            Some("any-first")
        );
        assert_eq!(hit(&t, IoHeader::new(Op::Read).tenant("me")), Some("mine"));
        assert_eq!(
            hit(&t, IoHeader::new(Op::Read).tenant("you")),
            Some("any-last")
        );
    }

    #[test]
    fn build_rejects_bad_tables() {
        let dup = RuleTable::build([rule("a", 1, Match::any()), rule("a", 2, Match::any())]);
        assert_eq!(dup.unwrap_err(), TableError::DuplicateName("a".into()));
        let inverted = RuleTable::build([rule("r", 1, Match::any().range(10, 10))]);
        assert!(matches!(
            inverted,
            Err(TableError::EmptyRange {
                start: 10,
                end: 10,
                ..
            })
        ));
        let inverted = RuleTable::build([rule("r", 1, Match::any().range(11, 10))]);
        assert!(inverted.unwrap_err().to_string().contains("range start 11"));
        let mut no_detours = rule("r", 1, Match::any());
        no_detours.detours.clear();
        assert_eq!(
            RuleTable::build([no_detours]).unwrap_err(),
            TableError::NoDetours("r".into())
        );
        assert!(matches!(
            RuleTable::build([rule("Bad", 1, Match::any())]),
            Err(TableError::InvalidName(_))
        ));
        assert!(matches!(
            RuleTable::build([rule("r", MAX_PRIORITY + 1, Match::any())]),
            Err(TableError::Priority { .. })
        ));
        assert!(matches!(
            RuleTable::build([rule("r", 1, Match::any().key_prefix(""))]),
            Err(TableError::EmptyPrefix {
                field: "key_prefix",
                ..
            })
        ));
    }

    #[test]
    fn insert_delete_quiesce() {
        let mut t = RuleTable::build([rule("b", 2, Match::any())]).unwrap();
        t.insert(rule("a", 1, Match::any().tenant("x"))).unwrap();
        assert_eq!(
            t.insert(rule("a", 5, Match::any())).unwrap_err(),
            TableError::DuplicateName("a".into())
        );
        assert!(t.insert(rule("c", 1, Match::any().range(5, 1))).is_err());
        assert_eq!(t.len(), 2);
        assert_eq!(hit(&t, IoHeader::new(Op::Read).tenant("x")), Some("a"));
        assert_eq!(hit(&t, IoHeader::new(Op::Read).tenant("y")), Some("b"));

        t.quiesce("a").unwrap();
        assert!(t.is_quiesced("a"));
        assert!(!t.is_quiesced("b"));
        assert!(t.quiesce("nope").is_err());
        t.resume("a").unwrap();
        assert!(!t.is_quiesced("a"));

        t.quiesce("a").unwrap();
        assert_eq!(t.delete("a").unwrap().name, "a");
        assert!(!t.is_quiesced("a"));
        assert_eq!(
            t.delete("a").unwrap_err(),
            TableError::UnknownRule("a".into())
        );
        assert_eq!(hit(&t, IoHeader::new(Op::Read).tenant("x")), Some("b"));
        assert_eq!(t.get("b").map(|r| r.priority), Some(2));
    }
}
