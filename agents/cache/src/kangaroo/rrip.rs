//! RRIParoo (§5.4): RRIP with 3-bit predictions kept on flash, one hit bit per object in DRAM,
//! and every prediction update deferred to the moment a set is rewritten anyway.

use super::page::{Obj, SET_CAPACITY};

pub const NEAR: u8 = 0;
/// New objects start here, so they are evicted soon unless they are hit again.
pub const LONG: u8 = 6;
pub const FAR: u8 = 7;

/// A KLog hit moves the prediction one step towards NEAR.
pub fn on_klog_hit(rrip: u8) -> u8 {
    rrip.saturating_sub(1)
}

/// Merges a set's current objects (`existing`, hit bits already applied as NEAR) with objects
/// moving in from KLog. Returns the objects to write, FAR first (so the DRAM hit bits, which
/// cover the first positions of a set, track the objects closest to eviction), and how many
/// were evicted.
///
/// When everything fits nothing is aged or evicted. Otherwise all predictions are aged until
/// one reaches FAR, and the set is filled from NEAR to FAR, ties going to objects already in
/// the set.
pub fn merge(existing: Vec<Obj>, incoming: Vec<Obj>) -> (Vec<Obj>, usize) {
    let total: usize = existing.iter().chain(&incoming).map(Obj::kset_cost).sum();
    let n = existing.len() + incoming.len();
    let mut all: Vec<(Obj, bool)> = existing
        .into_iter()
        .map(|o| (o, true))
        .chain(incoming.into_iter().map(|o| (o, false)))
        .collect();
    let mut evicted = 0;
    if total > SET_CAPACITY {
        let max = all.iter().map(|(o, _)| o.rrip).max().unwrap_or(FAR);
        let age = FAR - max.min(FAR);
        for (o, _) in &mut all {
            o.rrip = (o.rrip + age).min(FAR);
        }
        all.sort_by_key(|(o, existing)| (o.rrip, !*existing));
        let mut used = 0;
        all.retain(|(o, _)| {
            let c = o.kset_cost();
            if used + c <= SET_CAPACITY {
                used += c;
                true
            } else {
                false
            }
        });
        evicted = n - all.len();
    }
    let mut keep: Vec<Obj> = all.into_iter().map(|(o, _)| o).collect();
    keep.sort_by_key(|o| std::cmp::Reverse(o.rrip));
    (keep, evicted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(k: &str, rrip: u8, size: usize) -> Obj {
        Obj {
            key: k.into(),
            value: vec![0; size],
            rrip,
        }
    }

    #[test]
    fn fits_without_eviction_far_first() {
        let (keep, ev) = merge(
            vec![obj("a", 1, 10), obj("b", 7, 10)],
            vec![obj("c", LONG, 10)],
        );
        assert_eq!(ev, 0);
        assert_eq!(
            keep.iter().map(|o| o.rrip).collect::<Vec<_>>(),
            vec![7, 6, 1]
        );
    }

    /// The paper's Fig. 10: B was hit (NEAR), nothing is at FAR, so all age by 3 and A, the
    /// furthest, is evicted to make room for F (hit three times in KLog).
    #[test]
    fn figure_10() {
        let size = 1000;
        let existing = vec![
            obj("A", 4, size),
            obj("B", NEAR, size),
            obj("C", 3, size),
            obj("D", 2, size),
        ];
        let (keep, ev) = merge(existing, vec![obj("F", 3, size)]);
        assert_eq!(ev, 1);
        let mut keys: Vec<_> = keep
            .iter()
            .map(|o| String::from_utf8(o.key.clone()).unwrap())
            .collect();
        keys.sort();
        assert_eq!(keys, vec!["B", "C", "D", "F"]);
    }

    #[test]
    fn ties_favour_objects_already_in_the_set() {
        let size = 2000;
        let (keep, ev) = merge(
            vec![obj("old", 5, size)],
            vec![obj("new1", 5, size), obj("new2", 5, size)],
        );
        assert_eq!(ev, 1);
        assert!(keep.iter().any(|o| o.key == b"old"));
    }
}
