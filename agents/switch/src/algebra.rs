//! The rule algebra: what a [`Match`] matches, and how two matches relate.
//!
//! - [`Match::matches`]: whether one IO header matches.
//! - [`Match::covers`]: every IO the other matches, this one matches (a rule that covers a
//!   later one shadows it).
//! - [`Match::overlaps`]: some IO matches both (a quiesce of one holds the other).
//!
//! The three agree field by field, and `api-schemas/fixtures/rule-match/cases.json` pins them
//! for every language that implements them (`tests/rule_algebra.rs` runs it here). Ranges are
//! taken as the table accepts them (`start < end`).

use crate::rule::{path_prefix_matches, ByteRange, Match, Op};
use crate::table::IoHeader;

/// Bits of every operation: what an absent or empty `ops` stands for.
const ALL_OPS: u8 = {
    let mut bits = 0;
    let mut i = 0;
    while i < Op::ALL.len() {
        bits |= 1 << (Op::ALL[i] as u8);
        i += 1;
    }
    bits
};

/// Whether two optional fields agree: a field absent on either side lets every value through.
fn both<T: ?Sized>(a: Option<&T>, b: Option<&T>, f: impl Fn(&T, &T) -> bool) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => f(a, b),
        _ => true,
    }
}

/// Whether an optional field of `a` admits everything `b`'s admits: an absent field of `a`
/// admits all, a present one nothing more than a present field of `b` shows it must.
fn field_covers<T: ?Sized>(a: Option<&T>, b: Option<&T>, f: impl Fn(&T, &T) -> bool) -> bool {
    match (a, b) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => f(a, b),
    }
}

/// Whether the component-wise prefix `a` matches every path the prefix `b` matches.
fn path_covers(a: &str, b: &str) -> bool {
    let b = b.trim_end_matches('/');
    if b.is_empty() {
        // `b` is `/`, every absolute path: only another `/` matches them all.
        return !a.is_empty() && a.trim_end_matches('/').is_empty();
    }
    // `a` matches `b`'s own path, so also every path below it.
    path_prefix_matches(a, b)
}

impl Match {
    /// The operations matched, as a bit set of [`Op::bit`] (absent or empty: every one).
    pub(crate) fn op_set(&self) -> u8 {
        match &self.ops {
            Some(ops) if !ops.is_empty() => ops.iter().fold(0, |m, op| m | op.bit()),
            _ => ALL_OPS,
        }
    }

    /// The reference semantics of a match: every present field must match the header. A
    /// field that needs a header value the IO does not have (a path, key or tenant) does not
    /// match. [`crate::RuleTable::lookup`] gives the same answers faster.
    pub fn matches(&self, h: &IoHeader<'_>) -> bool {
        self.tenant
            .as_option()
            .is_none_or(|t| h.tenant == Some(t.as_str()))
            && self.op_set() & h.op.bit() != 0
            && self.path_key_and_range_match(h)
    }

    /// The path, key and range fields of [`Match::matches`] (the table checks tenant and
    /// operation by its index and op bits, then these).
    pub(crate) fn path_key_and_range_match(&self, h: &IoHeader<'_>) -> bool {
        let prefix = |field: Option<&String>, value: Option<&str>, f: fn(&str, &str) -> bool| {
            field.is_none_or(|p| value.is_some_and(|v| f(p, v)))
        };
        self.range
            .as_option()
            .is_none_or(|r| r.overlaps_io(h.offset, h.length))
            && prefix(self.path_prefix.as_option(), h.path, path_prefix_matches)
            && prefix(self.key_prefix.as_option(), h.key, |p, k| k.starts_with(p))
    }

    /// Whether every IO `other` matches, `self` matches too (field by field: `self`'s tenant
    /// absent or equal, its ops a superset, its path prefix a component-wise prefix of
    /// `other`'s, its key prefix a string prefix of `other`'s, its range containing
    /// `other`'s).
    pub fn covers(&self, other: &Match) -> bool {
        field_covers(self.tenant.as_option(), other.tenant.as_option(), |a, b| {
            a == b
        }) && other.op_set() & !self.op_set() == 0
            && field_covers(
                self.path_prefix.as_option(),
                other.path_prefix.as_option(),
                |a, b| path_covers(a, b),
            )
            && field_covers(
                self.key_prefix.as_option(),
                other.key_prefix.as_option(),
                |a, b| b.starts_with(a.as_str()),
            )
            && field_covers(
                self.range.as_option(),
                other.range.as_option(),
                |a: &ByteRange, b| a.start <= b.start && b.end <= a.end,
            )
    }

    /// Whether some IO of at most one byte matches both: tenants equal where both name one,
    /// a common operation, one path prefix below the other, one key prefix a prefix of the
    /// other, ranges that intersect (half-open). A field absent on either side meets all.
    pub fn overlaps(&self, other: &Match) -> bool {
        both(self.tenant.as_option(), other.tenant.as_option(), |a, b| {
            a == b
        }) && self.op_set() & other.op_set() != 0
            && both(
                self.path_prefix.as_option(),
                other.path_prefix.as_option(),
                |a, b| path_prefix_matches(a, b) || path_prefix_matches(b, a),
            )
            && both(
                self.key_prefix.as_option(),
                other.key_prefix.as_option(),
                |a, b| a.starts_with(b.as_str()) || b.starts_with(a.as_str()),
            )
            && both(self.range.as_option(), other.range.as_option(), |a, b| {
                a.start < b.end && b.start < a.end
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_decided_per_field() {
        let data = Match::any().path_prefix("/data");
        assert!(data.overlaps(&Match::any()));
        assert!(data.overlaps(&Match::any().path_prefix("/data/x")));
        assert!(!data.overlaps(&Match::any().path_prefix("/database")));
        assert!(!Match::any().tenant("a").overlaps(&Match::any().tenant("b")));
        assert!(!Match::any()
            .ops([Op::Read])
            .overlaps(&Match::any().ops([Op::Write])));
        assert!(!Match::any()
            .range(0, 10)
            .overlaps(&Match::any().range(10, 20)));
        assert!(Match::any()
            .range(0, 11)
            .overlaps(&Match::any().range(10, 20)));
    }

    #[test]
    fn every_op_listed_is_any_op() {
        assert!(Match::any().ops(Op::ALL).covers(&Match::any()));
        assert!(Match::any().covers(&Match::any().ops(Op::ALL)));
        assert_eq!(Match::any().ops([]).op_set(), ALL_OPS);
    }
}
