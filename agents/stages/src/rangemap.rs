//! Non-overlapping byte intervals `[start, end)` mapped to values; a newer insert overwrites the
//! part of older intervals it covers. Delegates and the log writer's index are both this.

use std::collections::BTreeMap;

/// A piece of a queried range: `(start, end, Some((interval_start, value)))`, `None` in gaps.
pub type Piece<V> = (u64, u64, Option<(u64, V)>);

#[derive(Debug, Clone)]
pub struct RangeMap<V> {
    /// start -> (end, value)
    map: BTreeMap<u64, (u64, V)>,
}

impl<V> Default for RangeMap<V> {
    fn default() -> Self {
        RangeMap {
            map: BTreeMap::new(),
        }
    }
}

impl<V: Clone> RangeMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Removes `[start, end)`, splitting intervals that straddle its edges.
    pub fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        // An interval beginning before `start` may reach into the removed range.
        if let Some((&s, (e, v))) = self.map.range(..start).next_back() {
            let (e, v) = (*e, v.clone());
            if e > start {
                self.map.insert(s, (start, v.clone()));
                if e > end {
                    self.map.insert(end, (e, v));
                }
            }
        }
        let inside: Vec<u64> = self.map.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            let (e, v) = self.map.remove(&s).expect("key just listed");
            if e > end {
                self.map.insert(end, (e, v));
            }
        }
    }

    /// Maps `[start, end)` to `v`, replacing whatever covered it.
    pub fn insert(&mut self, start: u64, end: u64, v: V) {
        if start >= end {
            return;
        }
        self.remove(start, end);
        self.map.insert(start, (end, v));
    }

    /// Whether one interval covers all of `[start, end)` with a value `same` accepts.
    pub fn covers_range(&self, start: u64, end: u64, same: impl Fn(&V) -> bool) -> bool {
        match self.map.range(..=start).next_back() {
            Some((_, (e, v))) => *e >= end && same(v),
            None => false,
        }
    }

    /// `[start, end)` cut into consecutive pieces: `(piece_start, piece_end, Some((interval_start,
    /// value)))` where an interval covers the piece, `None` in the gaps.
    pub fn segments(&self, start: u64, end: u64) -> Vec<Piece<V>> {
        let mut out = Vec::new();
        let mut pos = start;
        let first = self
            .map
            .range(..start)
            .next_back()
            .filter(|(_, (e, _))| *e > start)
            .map(|(&s, (e, v))| (s, *e, v));
        let rest = self.map.range(start..end).map(|(&s, (e, v))| (s, *e, v));
        for (s, e, v) in first.into_iter().chain(rest) {
            if s > pos {
                out.push((pos, s, None));
            }
            let piece_end = e.min(end);
            out.push((pos.max(s), piece_end, Some((s, v.clone()))));
            pos = piece_end;
        }
        if pos < end {
            out.push((pos, end, None));
        }
        out
    }

    /// The intervals, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, &V)> {
        self.map.iter().map(|(&s, (e, v))| (s, *e, v))
    }

    /// Every value, to change in place (the intervals stay).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.map.values_mut().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_overwrites_and_splits() {
        let mut m = RangeMap::new();
        m.insert(0, 100, 'a');
        m.insert(40, 60, 'b');
        let v: Vec<_> = m.iter().map(|(s, e, v)| (s, e, *v)).collect();
        assert_eq!(v, vec![(0, 40, 'a'), (40, 60, 'b'), (60, 100, 'a')]);
        m.insert(30, 70, 'c');
        let v: Vec<_> = m.iter().map(|(s, e, v)| (s, e, *v)).collect();
        assert_eq!(v, vec![(0, 30, 'a'), (30, 70, 'c'), (70, 100, 'a')]);
        m.remove(0, 1000);
        assert!(m.is_empty());
    }

    #[test]
    fn segments_fill_gaps() {
        let mut m = RangeMap::new();
        m.insert(10, 20, 'x');
        m.insert(30, 40, 'y');
        let s = m.segments(15, 35);
        assert_eq!(
            s,
            vec![
                (15, 20, Some((10, 'x'))),
                (20, 30, None),
                (30, 35, Some((30, 'y')))
            ]
        );
        assert_eq!(m.segments(0, 5), vec![(0, 5, None)]);
        assert!(m.covers_range(12, 20, |v| *v == 'x'));
        assert!(!m.covers_range(12, 21, |v| *v == 'x'));
    }

    #[test]
    fn agrees_with_a_byte_array_model() {
        // Pseudo-random inserts and removes against a per-byte model.
        let mut m = RangeMap::new();
        let mut model = [0u32; 256];
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for i in 1..500u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = (x % 256) as usize;
            let b = ((x >> 8) % 256) as usize;
            let (s, e) = (a.min(b), a.max(b));
            if i % 5 == 0 {
                m.remove(s as u64, e as u64);
                model[s..e].iter_mut().for_each(|c| *c = 0);
            } else {
                m.insert(s as u64, e as u64, i);
                model[s..e].iter_mut().for_each(|c| *c = i);
            }
        }
        for (s, e, v) in m.segments(0, 256) {
            for b in s..e {
                assert_eq!(model[b as usize], v.map(|(_, v)| v).unwrap_or(0));
            }
        }
    }
}
