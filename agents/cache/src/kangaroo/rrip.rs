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

/// Objects and bytes (on the page, RRIP byte included) that set rewrites take in from the
/// log, write, and evict: where the objects a set holds come from and which ones it loses.
/// Kept per engine so cachebench can set FairyWREN's sets beside Kangaroo's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SetChurn {
    pub set_incoming_objects: u64,
    pub set_incoming_bytes: u64,
    pub set_written_objects: u64,
    pub set_written_bytes: u64,
    /// Evicted at a rewrite, and of those the ones that came in with it (never held).
    pub set_evicted_objects: u64,
    pub set_evicted_bytes: u64,
    pub set_evicted_incoming_objects: u64,
    pub set_evicted_incoming_bytes: u64,
}

impl SetChurn {
    pub fn incoming(&mut self, objs: &[Obj]) {
        self.set_incoming_objects += objs.len() as u64;
        self.set_incoming_bytes += bytes(objs);
    }

    pub fn written(&mut self, objs: &[Obj]) {
        self.set_written_objects += objs.len() as u64;
        self.set_written_bytes += bytes(objs);
    }

    pub fn evicted(&mut self, o: &Obj, was_incoming: bool) {
        let c = o.kset_cost() as u64;
        self.set_evicted_objects += 1;
        self.set_evicted_bytes += c;
        if was_incoming {
            self.set_evicted_incoming_objects += 1;
            self.set_evicted_incoming_bytes += c;
        }
    }
}

fn bytes(objs: &[Obj]) -> u64 {
    objs.iter().map(|o| o.kset_cost() as u64).sum()
}

/// An object a merge evicted, and whether it was one of the incoming ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evicted {
    pub obj: Obj,
    pub incoming: bool,
}

/// Merges a set's current objects (`existing`, hit bits already applied as NEAR) with objects
/// moving in from KLog. Returns the objects to write, FAR first (so the DRAM hit bits, which
/// cover the first positions of a set, track the objects closest to eviction), and the
/// objects evicted.
///
/// When everything fits nothing is aged or evicted. Otherwise all predictions are aged until
/// one reaches FAR, and the set is filled from NEAR to FAR, ties going to objects already in
/// the set.
pub fn merge(existing: Vec<Obj>, incoming: Vec<Obj>) -> (Vec<Obj>, Vec<Evicted>) {
    let total: usize = existing.iter().chain(&incoming).map(Obj::kset_cost).sum();
    let mut all: Vec<(Obj, bool)> = existing
        .into_iter()
        .map(|o| (o, true))
        .chain(incoming.into_iter().map(|o| (o, false)))
        .collect();
    let mut evicted = Vec::new();
    if total > SET_CAPACITY {
        let max = all.iter().map(|(o, _)| o.rrip).max().unwrap_or(FAR);
        let age = FAR - max.min(FAR);
        for (o, _) in &mut all {
            o.rrip = (o.rrip + age).min(FAR);
        }
        all.sort_by_key(|(o, existing)| (o.rrip, !*existing));
        let mut used = 0;
        let mut kept = Vec::with_capacity(all.len());
        for (o, existing) in all {
            let c = o.kset_cost();
            if used + c <= SET_CAPACITY {
                used += c;
                kept.push((o, existing));
            } else {
                evicted.push(Evicted {
                    obj: o,
                    incoming: !existing,
                });
            }
        }
        all = kept;
    }
    let mut keep: Vec<Obj> = all.into_iter().map(|(o, _)| o).collect();
    keep.sort_by_key(|o| std::cmp::Reverse(o.rrip));
    (keep, evicted)
}

/// An object of `size` value bytes, for tests of merges.
#[cfg(test)]
pub(crate) fn obj(k: &str, rrip: u8, size: usize) -> Obj {
    Obj {
        key: k.into(),
        value: vec![0; size],
        rrip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_without_eviction_far_first() {
        let (keep, ev) = merge(
            vec![obj("a", 1, 10), obj("b", 7, 10)],
            vec![obj("c", LONG, 10)],
        );
        assert!(ev.is_empty());
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
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].obj.key, b"A");
        assert!(!ev[0].incoming);
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
        assert_eq!(ev.len(), 1);
        assert!(ev[0].incoming);
        assert!(keep.iter().any(|o| o.key == b"old"));
    }
}
