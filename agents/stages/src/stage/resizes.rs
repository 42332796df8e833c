//! In-place resizes of the stages a change keeps, with the guarantees every stage reconciler
//! gives (the server level's `CachedStore::set_stages`, the KV front end's install): shrinks
//! run first, so the device space they free is there for the stages that grow and the ones
//! built anew in the same change; and a change is all or nothing: when one resize (or a later
//! step of the change) fails, the resizes made go back, growths first so the shrinks' space is
//! free again for them to grow back (cold where they shrank).
//!
//! The FUSE switch goes further (interim stage sets written back before a shrink, a retry
//! with replaced stages emptied); that is `Switch::set_rules`.

use super::error::StageError;

/// One stage to resize from `from` to `to` bytes.
pub struct Resize<T> {
    pub stage: T,
    pub from: u64,
    pub to: u64,
}

/// The resizes made so far of one change: [`Resized::undo`] takes them back.
pub struct Resized<T, F: Fn(&T, u64) -> Result<(), StageError>> {
    done: Vec<Resize<T>>,
    resize: F,
}

impl<T, F: Fn(&T, u64) -> Result<(), StageError>> Resized<T, F> {
    /// Puts every resized stage back at its former size (growths first), logging what cannot
    /// go back (its space went to another stage meanwhile).
    pub fn undo(self) {
        for r in self.done.iter().rev() {
            if let Err(e) = (self.resize)(&r.stage, r.from) {
                tracing::error!("a stage back from {} to {} bytes: {e}", r.to, r.from);
            }
        }
    }

    /// How many stages were resized.
    pub fn len(&self) -> usize {
        self.done.len()
    }

    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }
}

/// Runs `resize(stage, to)` for each of `resizes`, shrinks first. On a failure the ones made
/// are undone and the error returned; on success the caller holds what to undo should a later
/// step of its change fail.
pub fn resize_all<T, F: Fn(&T, u64) -> Result<(), StageError>>(
    mut resizes: Vec<Resize<T>>,
    resize: F,
) -> Result<Resized<T, F>, StageError> {
    resizes.sort_by_key(|r| r.to > r.from);
    let mut made = Resized {
        done: Vec::with_capacity(resizes.len()),
        resize,
    };
    for r in resizes {
        if let Err(e) = (made.resize)(&r.stage, r.to) {
            made.undo();
            return Err(e.context(format!("resizing from {} to {} bytes", r.from, r.to)));
        }
        made.done.push(r);
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Stages sharing `total` units: a resize fails when the sizes would exceed it.
    struct Pool {
        total: u64,
        sizes: RefCell<Vec<u64>>,
        log: RefCell<Vec<(usize, u64)>>,
    }

    impl Pool {
        fn resize(&self, i: &usize, to: u64) -> Result<(), StageError> {
            let mut s = self.sizes.borrow_mut();
            let used: u64 = s.iter().sum::<u64>() - s[*i] + to;
            if used > self.total {
                return Err(format!("full: {used} > {}", self.total).into());
            }
            s[*i] = to;
            self.log.borrow_mut().push((*i, to));
            Ok(())
        }
    }

    fn pool(total: u64, sizes: &[u64]) -> Pool {
        Pool {
            total,
            sizes: RefCell::new(sizes.to_vec()),
            log: RefCell::default(),
        }
    }

    #[test]
    fn shrinks_run_first_so_space_moves_in_one_change() {
        let p = pool(10, &[6, 4]);
        let changes = vec![
            Resize {
                stage: 1,
                from: 4,
                to: 7,
            },
            Resize {
                stage: 0,
                from: 6,
                to: 3,
            },
        ];
        let made = resize_all(changes, |i, to| p.resize(i, to)).unwrap();
        assert_eq!(made.len(), 2);
        assert_eq!(*p.sizes.borrow(), vec![3, 7]);
        assert_eq!(*p.log.borrow(), vec![(0, 3), (1, 7)]);
    }

    #[test]
    fn a_failure_undoes_what_was_made_growths_first() {
        let p = pool(10, &[6, 2, 2]);
        let changes = vec![
            Resize {
                stage: 0,
                from: 6,
                to: 4,
            },
            Resize {
                stage: 1,
                from: 2,
                to: 4,
            },
            Resize {
                stage: 2,
                from: 2,
                to: 9,
            },
        ];
        let e = resize_all(changes, |i, to| p.resize(i, to))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("from 2 to 9") && e.contains("full"), "{e}");
        assert_eq!(*p.sizes.borrow(), vec![6, 2, 2]);
        // Made: 0 shrank, 1 grew; undone: 1 first (its growth), then 0.
        assert_eq!(*p.log.borrow(), vec![(0, 4), (1, 4), (1, 2), (0, 6)]);
    }

    #[test]
    fn a_later_step_of_the_change_can_undo_them() {
        let p = pool(10, &[6, 4]);
        let changes = vec![Resize {
            stage: 0,
            from: 6,
            to: 2,
        }];
        let made = resize_all(changes, |i, to| p.resize(i, to)).unwrap();
        made.undo();
        assert_eq!(*p.sizes.borrow(), vec![6, 4]);
    }
}
