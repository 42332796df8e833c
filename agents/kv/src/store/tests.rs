use std::sync::atomic::AtomicU64;

use super::*;
use crate::cache::DramCache;

fn store() -> (Store, Arc<AtomicU64>) {
    let now = Arc::new(AtomicU64::new(1_800_000_000));
    let n = now.clone();
    let clock: Clock = Arc::new(move || n.load(Ordering::Relaxed));
    let s = Store::new(
        Arc::new(DramCache::new(1 << 20)),
        Arc::new(AtomicU64::new(1)),
        clock,
        100,
    );
    (s, now)
}

fn set(s: &Store, mode: StoreMode, k: &str, v: &str) -> Stored {
    s.store(mode, k.as_bytes(), 0, 0, v.as_bytes().to_vec())
        .unwrap()
        .0
}

fn data(s: &Store, k: &str) -> Option<Vec<u8>> {
    s.get(k.as_bytes()).unwrap().map(|i| i.data)
}

#[test]
fn storage_commands_follow_memcached() {
    let (s, _) = store();
    assert_eq!(set(&s, StoreMode::Replace, "k", "v"), Stored::NotStored);
    assert_eq!(set(&s, StoreMode::Append, "k", "v"), Stored::NotStored);
    assert_eq!(set(&s, StoreMode::Add, "k", "v"), Stored::Stored);
    assert_eq!(set(&s, StoreMode::Add, "k", "w"), Stored::NotStored);
    assert_eq!(
        s.store(StoreMode::Set, b"k", 42, 0, b"mid".to_vec())
            .unwrap()
            .0,
        Stored::Stored
    );
    // append/prepend keep the item's flags.
    assert_eq!(
        s.store(StoreMode::Append, b"k", 7, 0, b">".to_vec())
            .unwrap()
            .0,
        Stored::Stored
    );
    assert_eq!(set(&s, StoreMode::Prepend, "k", "<"), Stored::Stored);
    let i = s.get(b"k").unwrap().unwrap();
    assert_eq!((i.data.as_slice(), i.flags), (&b"<mid>"[..], 42));
    // CAS: the unique of the last store, then a mismatch.
    assert_eq!(
        set(&s, StoreMode::Cas(i.cas + 1000), "k", "x"),
        Stored::Exists
    );
    assert_eq!(set(&s, StoreMode::Cas(i.cas), "k", "x"), Stored::Stored);
    assert_eq!(set(&s, StoreMode::Cas(i.cas), "k", "y"), Stored::Exists);
    assert_eq!(set(&s, StoreMode::Cas(1), "missing", "y"), Stored::NotFound);
    assert_eq!(
        set(&s, StoreMode::Set, "big", &"x".repeat(101)),
        Stored::TooLarge
    );
    assert_eq!(
        set(&s, StoreMode::Append, "k", &"x".repeat(100)),
        Stored::TooLarge
    );
    assert_eq!(s.delete(b"k", Some(1)).unwrap(), Deleted::Exists);
    assert_eq!(s.delete(b"k", None).unwrap(), Deleted::Deleted);
    assert_eq!(s.delete(b"k", None).unwrap(), Deleted::NotFound);
}

#[test]
fn incr_wraps_and_decr_stops_at_zero() {
    let (s, _) = store();
    assert_eq!(s.arith(b"n", true, 1).unwrap().0, Arith::NotFound);
    set(&s, StoreMode::Set, "n", &u64::MAX.to_string());
    assert_eq!(s.arith(b"n", true, 2).unwrap().0, Arith::Value(1));
    assert_eq!(s.arith(b"n", false, 5).unwrap().0, Arith::Value(0));
    set(&s, StoreMode::Set, "t", "12a");
    assert_eq!(s.arith(b"t", true, 1).unwrap().0, Arith::NonNumeric);
}

#[test]
fn expiry_relative_absolute_negative_and_touch() {
    let (s, now) = store();
    let t0 = now.load(Ordering::Relaxed);
    s.store(StoreMode::Set, b"rel", 0, 10, b"v".to_vec())
        .unwrap();
    s.store(StoreMode::Set, b"abs", 0, (t0 + 20) as i64, b"v".to_vec())
        .unwrap();
    s.store(StoreMode::Set, b"neg", 0, -1, b"v".to_vec())
        .unwrap();
    assert_eq!(data(&s, "neg"), None);
    now.store(t0 + 10, Ordering::Relaxed);
    assert_eq!(data(&s, "rel"), None, "expired at its second");
    assert!(data(&s, "abs").is_some());
    assert!(s.touch(b"abs", 100).unwrap());
    now.store(t0 + 50, Ordering::Relaxed);
    let i = s.get(b"abs").unwrap().unwrap();
    assert_eq!(s.ttl(&i), 60);
    assert!(!s.touch(b"rel", 100).unwrap());
}

#[test]
fn flush_all_now_and_delayed() {
    let (s, now) = store();
    let t0 = now.load(Ordering::Relaxed);
    set(&s, StoreMode::Set, "a", "1");
    s.flush_all(0);
    assert_eq!(data(&s, "a"), None);
    set(&s, StoreMode::Set, "b", "2");
    assert!(data(&s, "b").is_some(), "stored after the flush");
    s.flush_all(5);
    set(&s, StoreMode::Set, "c", "3");
    assert!(
        data(&s, "b").is_some() && data(&s, "c").is_some(),
        "not yet"
    );
    now.store(t0 + 5, Ordering::Relaxed);
    assert_eq!((data(&s, "b"), data(&s, "c")), (None, None));
    set(&s, StoreMode::Set, "d", "4");
    assert!(data(&s, "d").is_some());
}
