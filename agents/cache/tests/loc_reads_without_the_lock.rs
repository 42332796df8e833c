//! The log's hits read the device without the lock its owner drives it under
//! (`Engine::lookup`, `PendingRead::read`, `Engine::finish`): whatever happens to the key or
//! its region between the lookup and the finish, the finish answers the value the key has
//! then (or a miss), never the bytes of an older one. Orders are driven step by step, so
//! every interleaving a second thread could cause is run without threads or timing.

mod common;

use std::collections::HashMap;

use common::*;
use lachesis_cache::{Engine, Loc, Lookup, PendingRead, RegionEviction};
use proptest::prelude::*;

/// 4 regions of 64 KiB on the simulated SSD (which reads concurrently).
fn log() -> Loc {
    let (_, dev) = device(64, 0.25);
    loc(&dev, 4 * 65536, RegionEviction::Fifo)
}

fn pending(e: &mut Loc, k: u32) -> PendingRead {
    match e.lookup(&key(k)).unwrap() {
        Lookup::Read(r) => r,
        Lookup::Done(v) => panic!("key {k} answered under the lock: {v:?}"),
    }
}

fn units(e: &Loc) -> (u64, u64) {
    let log = e.parts()[0].log.expect("a log");
    (log.units_written, log.units_reclaimed)
}

#[test]
fn a_hit_in_a_sealed_region_is_read_without_the_lock_and_counted_once() {
    let mut e = log();
    let v = value(1, 1, 3000);
    assert!(e.set(&key(1), &v).unwrap());
    // While its region is open the object is in memory: answered at once.
    assert!(matches!(e.lookup(&key(1)).unwrap(), Lookup::Done(Some(ref x)) if *x == v));
    let mut n = 2;
    while units(&e).0 == 0 {
        e.set(&key(n), &value(n, 1, 3000)).unwrap();
        n += 1;
    }
    let before = e.stats();
    let r = pending(&mut e, 1);
    let bytes = r.read();
    assert_eq!(e.finish(&key(1), r, bytes).unwrap(), Some(v));
    let after = e.stats();
    assert_eq!((after.gets - before.gets, after.hits - before.hits), (1, 1));
}

#[test]
fn a_read_finished_after_its_key_changed_answers_what_the_key_holds_then() {
    let mut e = log();
    for n in 0..40 {
        e.set(&key(n), &value(n, 1, 3000)).unwrap();
    }
    assert!(units(&e).0 > 0);
    // Rewritten between the read and the finish.
    let r = pending(&mut e, 0);
    let bytes = r.read();
    let newer = value(0, 2, 3000);
    e.set(&key(0), &newer).unwrap();
    assert_eq!(e.finish(&key(0), r, bytes).unwrap(), Some(newer));
    // Deleted between the lookup and the read.
    let r = pending(&mut e, 1);
    e.delete(&key(1)).unwrap();
    let bytes = r.read();
    assert_eq!(e.finish(&key(1), r, bytes).unwrap(), None);
}

/// The worst case: the key's region is evicted and reused, and the key written again at the
/// very same place with the same length, after the old bytes were read. Only the region's
/// generation tells the two apart.
#[test]
fn a_read_from_a_region_evicted_and_reused_meanwhile_is_never_answered() {
    let mut e = log();
    let len = 3000;
    e.set(&key(0), &value(0, 1, len)).unwrap();
    let mut n = 1;
    while units(&e).0 == 0 {
        e.set(&key(n), &value(n, 1, len)).unwrap();
        n += 1;
    }
    let r = pending(&mut e, 0);
    let old = r.read();
    assert!(old.as_ref().is_ok_and(|b| b.len() > len));
    // Rewrite key 0 until its write is the one that reopens region 0: it lands at offset 0
    // of region 0 again, where the old copy was.
    let mut version = 1;
    let reclaimed = units(&e).1;
    while units(&e).1 == reclaimed {
        version += 1;
        e.set(&key(0), &value(0, version, len)).unwrap();
    }
    assert_eq!(
        e.finish(&key(0), r, old).unwrap(),
        Some(value(0, version, len)),
        "the old bytes were answered"
    );
}

/// A planned read of a key, and what its device read returned once done.
type Pending = (u32, PendingRead, Option<lachesis_cache::Result<Vec<u8>>>);

#[derive(Clone, Debug)]
enum Op {
    Set(u32, usize),
    Delete(u32),
    /// Look up a key; a planned read joins the pending ones.
    Begin(u32),
    /// Do the device read of the i-th pending read (mod their number), if not done yet.
    Read(usize),
    /// Finish the i-th pending read (reading first if it was not).
    Finish(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..60u32, 1..6000usize).prop_map(|(k, l)| Op::Set(k, l)),
        1 => (0..60u32).prop_map(Op::Delete),
        3 => (0..60u32).prop_map(Op::Begin),
        2 => any::<usize>().prop_map(Op::Read),
        3 => any::<usize>().prop_map(Op::Finish),
    ];
    proptest::collection::vec(op, 1..500)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Against a map: a finished read answers the value its key has at the finish, or a
    /// miss; never a value the key no longer has.
    #[test]
    fn reads_finished_in_any_order_answer_only_current_values(ops in ops()) {
        let mut e = log();
        let mut model: HashMap<u32, Vec<u8>> = HashMap::new();
        let mut pending: Vec<Pending> = Vec::new();
        let mut version = 0;
        for op in ops {
            match op {
                Op::Set(k, len) => {
                    version += 1;
                    let v = value(k, version, len);
                    if e.set(&key(k), &v).unwrap() {
                        model.insert(k, v);
                    } else {
                        model.remove(&k);
                    }
                }
                Op::Delete(k) => {
                    e.delete(&key(k)).unwrap();
                    model.remove(&k);
                }
                Op::Begin(k) => match e.lookup(&key(k)).unwrap() {
                    Lookup::Done(got) => {
                        prop_assert!(got.is_none() || got.as_ref() == model.get(&k));
                    }
                    Lookup::Read(r) => pending.push((k, r, None)),
                },
                Op::Read(i) if !pending.is_empty() => {
                    let i = i % pending.len();
                    if pending[i].2.is_none() {
                        pending[i].2 = Some(pending[i].1.read());
                    }
                }
                Op::Finish(i) if !pending.is_empty() => {
                    let (k, r, bytes) = pending.swap_remove(i % pending.len());
                    let bytes = bytes.unwrap_or_else(|| r.read());
                    let got = e.finish(&key(k), r, bytes).unwrap();
                    prop_assert!(
                        got.is_none() || got.as_ref() == model.get(&k),
                        "key {} answered a value it no longer has", k
                    );
                }
                _ => {}
            }
        }
    }
}
