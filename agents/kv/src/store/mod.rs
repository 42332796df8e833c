//! memcached's semantics over one cache: add/replace/append/prepend/cas, incr/decr on 64-bit
//! decimals, touch, expiry, flush_all with a delay. A read-modify-write command holds its
//! key's stripe lock from read to write, so two of them on one key never interleave; a plain
//! get takes no lock (it reads the last value an engine completed).
//!
//! CAS uniques come from one counter shared by every store of a service, so they are unique
//! across tenants. `flush_all` invalidates by unique: items whose unique is below the counter
//! at the flush are dead. A delayed flush is turned into that threshold by the first command
//! at or after its time, so items stored before its time die and those stored after live.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::cache::Cache;
use crate::item::{deadline, Item};
use crate::protocol::StoreMode;

/// Unix time in seconds; tests move it by hand.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    })
}

const STRIPES: usize = 64;

/// Outcome of a storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    Stored,
    NotStored,
    /// CAS unique mismatch.
    Exists,
    /// CAS on a missing key.
    NotFound,
    /// append/prepend would exceed the largest item.
    TooLarge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    NotFound,
    NonNumeric,
    Value(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    NotFound,
    Exists,
}

#[derive(Default)]
struct Flush {
    /// Items with a unique below this are dead.
    below: u64,
    /// A delayed flush: (unix time, pending).
    at: Option<u64>,
}

/// A cache with memcached's semantics.
pub struct Store {
    cache: Arc<dyn Cache>,
    stripes: Vec<Mutex<()>>,
    uniques: Arc<AtomicU64>,
    flush: Mutex<Flush>,
    clock: Clock,
    max_item: usize,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub type Result<T> = std::result::Result<T, String>;

impl Store {
    pub fn new(
        cache: Arc<dyn Cache>,
        uniques: Arc<AtomicU64>,
        clock: Clock,
        max_item: usize,
    ) -> Store {
        Store {
            cache,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            uniques,
            flush: Mutex::new(Flush::default()),
            clock,
            max_item,
        }
    }

    pub fn cache(&self) -> &Arc<dyn Cache> {
        &self.cache
    }

    fn stripe(&self, key: &[u8]) -> MutexGuard<'_, ()> {
        locked(&self.stripes[(lachesis_cache::object::key_hash(key) as usize) % STRIPES])
    }

    fn next_unique(&self) -> u64 {
        self.uniques.fetch_add(1, Ordering::Relaxed)
    }

    /// The unique below which items are flushed, applying a delayed flush that is due.
    fn flushed_below(&self, now: u64) -> u64 {
        let mut f = locked(&self.flush);
        if f.at.is_some_and(|t| t <= now) {
            f.at = None;
            f.below = self.uniques.load(Ordering::Relaxed);
        }
        f.below
    }

    /// The live item under `key` (expired and flushed items read as misses).
    fn live(&self, key: &[u8]) -> Result<Option<Item>> {
        let now = (self.clock)();
        let below = self.flushed_below(now);
        let Some(raw) = self.cache.get(key)? else {
            return Ok(None);
        };
        match Item::decode(raw) {
            Some(i) if !i.expired(now) && i.cas >= below => Ok(Some(i)),
            _ => Ok(None),
        }
    }

    fn put(&self, key: &[u8], item: &Item) -> Result<bool> {
        self.cache.set(key, &item.encode())
    }

    /// `get`/`gets`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Item>> {
        self.live(key)
    }

    /// `gat`/`gats`, and `mg` with `T`: the item with its expiry set to `exptime`.
    pub fn get_and_touch(&self, key: &[u8], exptime: i64) -> Result<Option<Item>> {
        let _g = self.stripe(key);
        let Some(mut item) = self.live(key)? else {
            return Ok(None);
        };
        match deadline(exptime, (self.clock)()) {
            Some(d) => {
                item.exptime = d;
                self.put(key, &item)?;
                Ok(Some(item))
            }
            None => {
                // Expired by the touch: this read still sees it, later ones do not.
                self.cache.delete(key)?;
                Ok(Some(item))
            }
        }
    }

    /// A storage command; `compare`: the unique the current item must have (`cas`, `ms C`).
    pub fn store(
        &self,
        mode: StoreMode,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: Vec<u8>,
    ) -> Result<(Stored, u64)> {
        if data.len() > self.max_item {
            return Ok((Stored::TooLarge, 0));
        }
        let _g = self.stripe(key);
        let needs_old = !matches!(mode, StoreMode::Set);
        let old = if needs_old { self.live(key)? } else { None };
        let now = (self.clock)();
        let cas = self.next_unique();
        let mut item = Item {
            flags,
            exptime: deadline(exptime, now).unwrap_or(0),
            cas,
            data,
        };
        match (mode, &old) {
            (StoreMode::Add, Some(_)) => return Ok((Stored::NotStored, 0)),
            (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
                return Ok((Stored::NotStored, 0))
            }
            (StoreMode::Cas(_), None) => return Ok((Stored::NotFound, 0)),
            (StoreMode::Cas(c), Some(o)) if o.cas != c => return Ok((Stored::Exists, 0)),
            (StoreMode::Append | StoreMode::Prepend, Some(o)) => {
                // The old item's flags and expiry stay (memcached ignores the new ones).
                if o.data.len() + item.data.len() > self.max_item {
                    return Ok((Stored::TooLarge, 0));
                }
                let mut d = Vec::with_capacity(o.data.len() + item.data.len());
                if mode == StoreMode::Append {
                    d.extend_from_slice(&o.data);
                    d.extend_from_slice(&item.data);
                } else {
                    d.extend_from_slice(&item.data);
                    d.extend_from_slice(&o.data);
                }
                item.data = d;
                item.flags = o.flags;
                item.exptime = o.exptime;
            }
            _ => {}
        }
        if deadline(exptime, now).is_none()
            && !matches!(mode, StoreMode::Append | StoreMode::Prepend)
        {
            // Stored already expired: the old value goes, nothing reads the new one.
            self.cache.delete(key)?;
            return Ok((Stored::Stored, cas));
        }
        if self.put(key, &item)? {
            Ok((Stored::Stored, cas))
        } else {
            Ok((Stored::NotStored, 0))
        }
    }

    /// `delete`, `md` (`compare`: with `C`).
    pub fn delete(&self, key: &[u8], compare: Option<u64>) -> Result<Deleted> {
        let _g = self.stripe(key);
        let Some(old) = self.live(key)? else {
            // A dead item may still be in the engine: remove it all the same.
            self.cache.delete(key)?;
            return Ok(Deleted::NotFound);
        };
        if compare.is_some_and(|c| c != old.cas) {
            return Ok(Deleted::Exists);
        }
        self.cache.delete(key)?;
        Ok(Deleted::Deleted)
    }

    /// `touch`: whether the key was there.
    pub fn touch(&self, key: &[u8], exptime: i64) -> Result<bool> {
        Ok(self.get_and_touch(key, exptime)?.is_some())
    }

    /// `incr`/`decr`: 64-bit unsigned, incr wraps, decr stops at 0.
    pub fn arith(&self, key: &[u8], incr: bool, delta: u64) -> Result<(Arith, u64)> {
        let _g = self.stripe(key);
        let Some(mut item) = self.live(key)? else {
            return Ok((Arith::NotFound, 0));
        };
        let n = std::str::from_utf8(&item.data)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok());
        let Some(n) = n else {
            return Ok((Arith::NonNumeric, 0));
        };
        let v = if incr {
            n.wrapping_add(delta)
        } else {
            n.saturating_sub(delta)
        };
        item.data = v.to_string().into_bytes();
        item.cas = self.next_unique();
        self.put(key, &item)?;
        Ok((Arith::Value(v), item.cas))
    }

    /// `flush_all [delay]`: every item stored before now (+ delay) is gone.
    pub fn flush_all(&self, delay: i64) {
        let now = (self.clock)();
        let mut f = locked(&self.flush);
        if delay <= 0 {
            f.at = None;
            f.below = self.uniques.load(Ordering::Relaxed);
        } else {
            f.at = deadline(delay, now);
        }
    }

    /// The flush threshold and pending flush, for warm restart.
    pub fn flush_state(&self) -> (u64, Option<u64>) {
        let f = locked(&self.flush);
        (f.below, f.at)
    }

    pub fn set_flush_state(&self, below: u64, at: Option<u64>) {
        let mut f = locked(&self.flush);
        f.below = below;
        f.at = at;
    }

    /// Seconds until the item expires, -1 if never (meta `t`).
    pub fn ttl(&self, item: &Item) -> i64 {
        if item.exptime == 0 {
            -1
        } else {
            item.exptime.saturating_sub((self.clock)()) as i64
        }
    }
}

#[cfg(test)]
mod tests;
