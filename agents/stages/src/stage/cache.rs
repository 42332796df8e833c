//! Cache stage: 4 KiB blocks of a file in a cache engine (key = file id + block number), in
//! one of three write modes, built from a [`CacheConfig`] (see `engines.rs` for the engines).
//!
//! Dirty blocks of the write-back mode live in the stage's own map until they are written
//! back, not only in the engine: the engine may evict, resize or be rebuilt at will and no
//! acknowledged write is lost. Every write of dirty bytes to `next` happens under one lock
//! per stage (`wb`), so two write-backs of a block never reach `next` out of order.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lachesis_switch::{CacheConfig, WriteMode};

use super::engines::{BlockEngine, BlockLookup, BlockRead};
use super::error::StageError;
use super::space::{Devices, Reservation};
use super::{Backend, Clock, Stage, StageStats};
use crate::remote::demote::{DemoteTo, Lease};

pub const BLOCK: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Writes go to `next` and update the cached blocks.
    WriteThrough,
    /// Writes are acknowledged once cached; dirty blocks go to `next` on sync, close, when
    /// more than `max_dirty` bytes are dirty (the writing file's blocks at once, the other
    /// files' by the switch right after), when they are older than the flusher's age, and
    /// before the stage shrinks or goes away.
    WriteBack,
    /// Writes go to `next` and drop the cached blocks (only reads fill the cache).
    WriteAround,
}

impl From<WriteMode> for Mode {
    fn from(m: WriteMode) -> Mode {
        match m {
            WriteMode::Through => Mode::WriteThrough,
            WriteMode::Back => Mode::WriteBack,
            WriteMode::Around => Mode::WriteAround,
        }
    }
}

struct Inner {
    engine: BlockEngine,
    /// Write-back blocks not yet in `next`, ordered so write-back is sequential. The engine
    /// may evict at will, so the dirty copy is kept here until it is written back.
    dirty: BTreeMap<(u64, u64), Vec<u8>>,
    /// Highest block ever cached per file, so a truncate can drop every block past the end.
    max_block: HashMap<u64, u64>,
    /// Since when each file has had dirty blocks (per file, as the kernel keeps an inode's
    /// dirtied_when): the flusher writes back a file whose oldest dirty data is too old.
    dirtied: HashMap<u64, Instant>,
    /// The stage was replaced or removed: writes pass through to `next` (dirty copies of
    /// the blocks they touch first), nothing becomes dirty any more.
    retired: bool,
    /// Level-1 demotion (`remote/demote.rs`): blocks the server level lent, by their lease
    /// token, and where each file's blocks go back when the engine evicts them clean.
    leases: HashMap<(u64, u64), u64>,
    demote_to: HashMap<u64, DemoteTo>,
    /// Evicted lent blocks queued for the server level, and those the full queue dropped.
    demoted: u64,
    demotions_dropped: u64,
}

impl Inner {
    /// The dirty blocks of `file` (of every file when `None`), in order. A range, not a
    /// filter: a database's every WAL fsync writes back one file among thousands of dirty
    /// blocks of the others, under the stage's lock.
    fn dirty_of(&self, file: Option<u64>) -> impl Iterator<Item = (&(u64, u64), &Vec<u8>)> {
        let (from, to) = file.map_or((0, u64::MAX), |f| (f, f));
        self.dirty.range((from, 0)..=(to, u64::MAX))
    }

    /// Stores a block; it is no longer the lent one (a lease is recorded after, by `lend`).
    fn set(&mut self, file: u64, b: u64, data: &[u8]) -> lachesis_cache::Result<bool> {
        let m = self.max_block.entry(file).or_insert(0);
        *m = (*m).max(b);
        self.leases.remove(&(file, b));
        let stored = self.engine.set(file, b, data);
        self.demote_evicted();
        stored
    }

    fn delete(&mut self, file: u64, b: u64) -> lachesis_cache::Result<bool> {
        self.leases.remove(&(file, b));
        self.engine.delete(file, b)
    }

    fn lend(&mut self, file: u64, b: u64, lease: Lease) {
        self.leases.insert((file, b), lease.token);
        self.demote_to.insert(file, lease.to);
    }

    /// Offers the evicted blocks that were lent and are clean to the server level; the
    /// others are gone. Never waits (the queue drops what it cannot take).
    fn demote_evicted(&mut self) {
        for (file, b, data) in self.engine.take_evicted() {
            let Some(token) = self.leases.remove(&(file, b)) else {
                continue;
            };
            if self.dirty.contains_key(&(file, b)) {
                continue;
            }
            if let Some(to) = self.demote_to.get(&file) {
                match to.offer(b * BLOCK, token, data) {
                    true => self.demoted += 1,
                    false => self.demotions_dropped += 1,
                }
            }
        }
    }
}

/// Blocks written back in one IO at most (1 MiB).
const MAX_WRITE_BACK_RUN: usize = 256;

/// The first blocks of `blocks` (sorted by file, then block) that are one file's and adjacent,
/// at most [`MAX_WRITE_BACK_RUN`] of them.
fn adjacent_run(blocks: &[((u64, u64), Vec<u8>)]) -> &[((u64, u64), Vec<u8>)] {
    let n = blocks
        .windows(2)
        .take(MAX_WRITE_BACK_RUN - 1)
        .take_while(|w| w[1].0 .0 == w[0].0 .0 && w[1].0 .1 == w[0].0 .1 + 1)
        .count();
    &blocks[..=n]
}

pub struct CacheStage {
    mode: Mode,
    /// Reads misses as level 1 of a two-level cache that demotes its evictions (DRAM
    /// engines: they see what they evict).
    demotes: bool,
    max_dirty_blocks: usize,
    inner: Mutex<Inner>,
    /// Held while dirty bytes go to `next` (write-back, and writes that pass a dirty block
    /// on), never while waiting for `inner`'s holder to need it: `wb` before `inner`.
    wb: Mutex<()>,
    clock: Clock,
    hits: AtomicU64,
    misses: AtomicU64,
    bytes_read_hit: AtomicU64,
    bytes_read_miss: AtomicU64,
    bytes_written: AtomicU64,
    writebacks: AtomicU64,
}

impl CacheStage {
    pub fn new(engine: BlockEngine, mode: Mode, max_dirty: u64) -> Self {
        CacheStage {
            mode,
            demotes: engine.config().engine == lachesis_switch::CacheEngine::Dram,
            max_dirty_blocks: (max_dirty / BLOCK).max(1) as usize,
            inner: Mutex::new(Inner {
                engine,
                dirty: BTreeMap::new(),
                max_block: Default::default(),
                dirtied: Default::default(),
                retired: false,
                leases: HashMap::new(),
                demote_to: HashMap::new(),
                demoted: 0,
                demotions_dropped: 0,
            }),
            wb: Mutex::new(()),
            clock: std::sync::Arc::new(Instant::now),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            bytes_read_hit: AtomicU64::new(0),
            bytes_read_miss: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            writebacks: AtomicU64::new(0),
        }
    }

    /// The stage `config` describes, its flash engine on one of `devices`.
    pub fn from_config(config: &CacheConfig, devices: &Devices) -> Result<Self, StageError> {
        Ok(Self::new(
            BlockEngine::build(config, devices)?,
            config.write_mode.into(),
            config.max_dirty_bytes,
        ))
    }

    /// Reads the time (when a file got dirty, how old its dirty data is) from `clock`.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_wb(&self) -> MutexGuard<'_, ()> {
        self.wb.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// (hits, misses) of block reads.
    pub fn hit_counts(&self) -> (u64, u64) {
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }

    /// Bytes the engine may use now.
    pub fn installed_bytes(&self) -> u64 {
        self.lock().engine.installed()
    }

    /// Bytes of one region of the engine's device (0: DRAM, sized to the byte).
    pub fn region_bytes(&self) -> u64 {
        self.lock().engine.region_bytes()
    }

    /// Takes from the device what a resize to `size` needs beyond what the engine holds, so
    /// a full device refuses before anything changes. `None`: nothing to take.
    pub fn reserve(&self, size: u64) -> Result<Option<Reservation>, StageError> {
        self.lock().engine.reserve(size)
    }

    /// Changes the engine's size (see `engines.rs`: in place or rebuilt). Dirty blocks are
    /// not the engine's and stay; a write-back stage that shrinks writes them back first
    /// (the switch does, it knows the files' routes).
    pub fn resize(&self, size: u64, reserved: Option<Reservation>) -> Result<(), StageError> {
        let mut inner = self.lock();
        inner.engine.resize(size, reserved)?;
        inner.demote_evicted();
        Ok(())
    }

    /// Writes back dirty blocks (of `file`, or all when `None`). A block `next` refuses
    /// stays dirty (unless a newer write replaced it meanwhile).
    ///
    /// A block stays in the dirty map until `next` has it: write-backs take no block locks
    /// (sync, close, the flusher), so a read racing one must still find the dirty copy; taken
    /// out first, a read in between missed, read the old bytes from `next` and cached them.
    /// A block a newer write replaced meanwhile stays dirty, with the newer bytes.
    fn write_back(&self, file: Option<u64>, next: &dyn Backend) -> io::Result<()> {
        let _wb = self.lock_wb();
        let blocks: Vec<((u64, u64), Vec<u8>)> = {
            let mut inner = self.lock();
            match file {
                Some(f) => {
                    inner.dirtied.remove(&f);
                }
                None => inner.dirtied.clear(),
            }
            inner.dirty_of(file).map(|(k, d)| (*k, d.clone())).collect()
        };
        let mut failed = None;
        // Runs of adjacent blocks of one file (in the dirty map's order) go to `next` as one
        // write: a database's pages and a checkpoint's blocks are mostly adjacent, and one
        // large IO below costs far less than its blocks one by one.
        let mut rest = &blocks[..];
        while !rest.is_empty() {
            let run = adjacent_run(rest);
            let ((f, b), _) = run[0];
            let written = match run {
                [(_, data)] => next.write_at(f, data, b * BLOCK),
                _ => next.write_at(
                    f,
                    &run.iter()
                        .flat_map(|(_, d)| d.iter().copied())
                        .collect::<Vec<u8>>(),
                    b * BLOCK,
                ),
            };
            if let Err(e) = written {
                failed = Some(e);
                break;
            }
            let mut inner = self.lock();
            for (key, data) in run {
                if inner.dirty.get(key) == Some(data) {
                    inner.dirty.remove(key);
                }
            }
            drop(inner);
            self.writebacks.fetch_add(run.len() as u64, Relaxed);
            rest = &rest[run.len()..];
        }
        // Files still dirty (a refused block, or newer writes) keep an age for the flusher.
        let now = (self.clock)();
        let mut inner = self.lock();
        let mut still: Vec<u64> = inner.dirty_of(file).map(|((f, _), _)| *f).collect();
        still.dedup();
        for f in still {
            inner.dirtied.entry(f).or_insert(now);
        }
        failed.map_or(Ok(()), Err)
    }

    fn engine_err(e: lachesis_cache::Error) -> io::Error {
        io::Error::other(e)
    }

    /// Server level, exclusive: the block taken out if held (it moves up to the level 1
    /// that asked), counted as a hit of `len` bytes; `None` counts nothing (see `count_miss`).
    pub fn take_block(&self, file: u64, b: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
        let got = {
            let mut inner = self.lock();
            let got = inner.engine.get(file, b).map_err(Self::engine_err)?;
            if got.is_some() {
                inner.delete(file, b).map_err(Self::engine_err)?;
            }
            got
        };
        if got.is_some() {
            self.hits.fetch_add(1, Relaxed);
            self.bytes_read_hit.fetch_add(len, Relaxed);
        }
        Ok(got)
    }

    /// A block read past the stage without filling it (an exclusive server level's miss).
    pub fn count_miss(&self, bytes: u64) {
        self.misses.fetch_add(1, Relaxed);
        self.bytes_read_miss.fetch_add(bytes, Relaxed);
    }

    /// Stores a clean block handed down to the stage (demoted); whether the engine took it.
    pub fn put_block(&self, file: u64, b: u64, data: &[u8]) -> io::Result<bool> {
        let mut inner = self.lock();
        let stored = inner.set(file, b, data).map_err(Self::engine_err)?;
        self.unlock_and_write_region(inner)?;
        Ok(stored)
    }

    /// Lets the stage's lock go, then does the region write the engine left, if a block
    /// filled the log's open region: a region is large (1 MiB and more), and hits, misses and
    /// writes of other blocks need not wait for it. Reads of its blocks meanwhile are served
    /// from its buffer, and nothing reuses its space until the engine has been told.
    fn unlock_and_write_region(&self, mut inner: MutexGuard<'_, Inner>) -> io::Result<()> {
        let Some(w) = inner.engine.take_write() else {
            return Ok(());
        };
        drop(inner);
        w.write();
        self.lock().engine.wrote(&w).map_err(Self::engine_err)
    }

    /// What the stage holds of `count` blocks from `first`: each block's bytes (its dirty
    /// copy, or the engine's), `None` for a miss. Hits on flash are read without the lock,
    /// and the engine then checks that each block is still what was read.
    fn cached_blocks(
        &self,
        file: u64,
        first: u64,
        count: usize,
    ) -> io::Result<Vec<Option<Vec<u8>>>> {
        let mut got = Vec::with_capacity(count);
        let mut pending = Vec::new();
        {
            let mut inner = self.lock();
            for i in 0..count {
                let b = first + i as u64;
                got.push(match inner.dirty.get(&(file, b)) {
                    Some(d) => Some(d.clone()),
                    None => match inner.engine.lookup(file, b).map_err(Self::engine_err)? {
                        BlockLookup::Done(v) => v,
                        BlockLookup::Read(read) => {
                            pending.push((i, read));
                            None
                        }
                    },
                });
            }
        }
        if !pending.is_empty() {
            // Hits (and the misses' writes) of other readers go on meanwhile.
            let reads: Vec<&BlockRead> = pending.iter().map(|(_, read)| read).collect();
            let bytes = BlockRead::read_together(&reads);
            let mut inner = self.lock();
            for ((i, read), bytes) in pending.into_iter().zip(bytes) {
                let b = first + i as u64;
                got[i] = match inner.dirty.get(&(file, b)) {
                    // Written meanwhile (write-back): the newer bytes.
                    Some(d) => Some(d.clone()),
                    None => inner
                        .engine
                        .finish(file, b, read, bytes)
                        .map_err(Self::engine_err)?,
                };
            }
        }
        // Only whole blocks are ever stored; anything else is a miss.
        Ok(got
            .into_iter()
            .map(|d| d.filter(|d| d.len() == BLOCK as usize))
            .collect())
    }

    /// Reads `run` missing blocks from block `first` from `next` and stores the whole ones:
    /// the bytes (`run` blocks' room) and how many of them the file had.
    fn read_misses(
        &self,
        file: u64,
        first: u64,
        run: usize,
        next: &dyn Backend,
    ) -> io::Result<(Vec<u8>, usize)> {
        let mut data = vec![0u8; run * BLOCK as usize];
        if self.demotes {
            // A DRAM engine sees what it evicts, so it can demote what it was lent: each
            // block is read with its own lease.
            let mut valid = 0;
            for (k, block) in data.chunks_mut(BLOCK as usize).enumerate() {
                let b = first + k as u64;
                let (n, lease) = next.read_lent(file, block, b * BLOCK)?;
                valid += n;
                if n < BLOCK as usize {
                    break;
                }
                let mut inner = self.lock();
                let stored = inner.set(file, b, block).map_err(Self::engine_err)?;
                if let Some(lease) = lease.filter(|_| stored) {
                    inner.lend(file, b, lease);
                }
                self.unlock_and_write_region(inner)?;
            }
            return Ok((data, valid));
        }
        let valid = next.read_at(file, &mut data, first * BLOCK)?;
        // Only whole blocks are cached: a short tail block would go stale when the file
        // grows past it.
        let whole = valid / BLOCK as usize;
        if whole > 0 {
            let mut inner = self.lock();
            for (k, block) in data[..whole * BLOCK as usize]
                .chunks(BLOCK as usize)
                .enumerate()
            {
                inner
                    .set(file, first + k as u64, block)
                    .map_err(Self::engine_err)?;
            }
            self.unlock_and_write_region(inner)?;
        }
        Ok((data, valid))
    }

    /// A write to a retired write-back stage: on to `next`, after the dirty copies of the
    /// blocks it covers only in part (the caller holds `wb`).
    fn pass_through(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        file: u64,
        data: &[u8],
        off: u64,
        next: &dyn Backend,
    ) -> io::Result<()> {
        let end = off + data.len() as u64;
        let mut older = Vec::new();
        let mut b = off / BLOCK;
        while b * BLOCK < end {
            if let Some(d) = inner.dirty.remove(&(file, b)) {
                if !(off <= b * BLOCK && (b + 1) * BLOCK <= end) {
                    older.push((b, d));
                }
            }
            inner.delete(file, b).map_err(Self::engine_err)?;
            b += 1;
        }
        drop(inner);
        for (b, d) in older {
            next.write_at(file, &d, b * BLOCK)?;
            self.writebacks.fetch_add(1, Relaxed);
        }
        next.write_at(file, data, off)
    }
}

impl Stage for CacheStage {
    /// A read of several blocks takes the stage's lock twice, not twice per block: what each
    /// block is (dirty, cached, on flash, missing) is found at once, the flash reads run
    /// without the lock, and adjacent missing blocks go to `next` as one read (a database's
    /// 8 KiB page is two blocks; a sequential reader asks for many).
    fn read(&self, file: u64, buf: &mut [u8], off: u64, next: &dyn Backend) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let end = off + buf.len() as u64;
        let first = off / BLOCK;
        let count = ((end - 1) / BLOCK - first + 1) as usize;
        let mut cached = self.cached_blocks(file, first, count)?;
        let mut i = 0;
        while i < count {
            let b0 = (first + i as u64) * BLOCK;
            // A hit, or a run of adjacent misses read together; `valid` bytes from `b0`.
            let (data, valid, run, hit) = match cached[i].take() {
                Some(d) => (d, BLOCK as usize, 1, true),
                None => {
                    let run = cached[i..].iter().take_while(|c| c.is_none()).count();
                    let (data, valid) = self.read_misses(file, first + i as u64, run, next)?;
                    (data, valid, run, false)
                }
            };
            let from = off.max(b0);
            let to = end.min(b0 + valid as u64);
            let got = to.saturating_sub(from);
            if hit {
                self.hits.fetch_add(1, Relaxed);
                self.bytes_read_hit.fetch_add(got, Relaxed);
            } else {
                // The blocks read, and the one the file ended in.
                let touched = run.min(valid / BLOCK as usize + 1);
                self.misses.fetch_add(touched as u64, Relaxed);
                self.bytes_read_miss.fetch_add(got, Relaxed);
            }
            if to > from {
                buf[(from - off) as usize..(to - off) as usize]
                    .copy_from_slice(&data[(from - b0) as usize..(to - b0) as usize]);
            }
            if valid < run * BLOCK as usize {
                return Ok(to.saturating_sub(off) as usize);
            }
            i += run;
        }
        Ok(buf.len())
    }

    fn write(&self, file: u64, data: &[u8], off: u64, next: &dyn Backend) -> io::Result<()> {
        let end = off + data.len() as u64;
        self.bytes_written.fetch_add(data.len() as u64, Relaxed);
        let whole = |b: u64| off <= b * BLOCK && (b + 1) * BLOCK <= end;
        if self.mode != Mode::WriteBack {
            next.write_at(file, data, off)?;
            let mut inner = self.lock();
            let mut b = off / BLOCK;
            while b * BLOCK < end {
                let bstart = b * BLOCK;
                if self.mode == Mode::WriteThrough && whole(b) && !inner.retired {
                    let slice = &data[(bstart - off) as usize..(bstart + BLOCK - off) as usize];
                    inner.set(file, b, slice).map_err(Self::engine_err)?;
                } else {
                    inner.delete(file, b).map_err(Self::engine_err)?;
                }
                b += 1;
            }
            return self.unlock_and_write_region(inner);
        }
        // Write-back. Writes that cover blocks only in part send bytes to `next`: they hold
        // `wb`, and so does a write that finds the stage retired.
        let aligned = off.is_multiple_of(BLOCK) && end.is_multiple_of(BLOCK);
        let mut wb = (!aligned).then(|| self.lock_wb());
        let mut inner = loop {
            let inner = self.lock();
            if inner.retired && wb.is_none() {
                drop(inner);
                wb = Some(self.lock_wb());
                continue;
            }
            break inner;
        };
        if inner.retired {
            return self.pass_through(inner, file, data, off, next);
        }
        let mut partial = Vec::new();
        let mut b = off / BLOCK;
        while b * BLOCK < end {
            let bstart = b * BLOCK;
            if whole(b) {
                let slice = &data[(bstart - off) as usize..(bstart + BLOCK - off) as usize];
                let now = (self.clock)();
                inner.dirtied.entry(file).or_insert(now);
                inner.dirty.insert((file, b), slice.to_vec());
                inner.set(file, b, slice).map_err(Self::engine_err)?;
            } else {
                // A partial block is written through (after its dirty copy, so the order of
                // bytes in `next` stays the order of writes).
                partial.push((b, inner.dirty.remove(&(file, b))));
                inner.delete(file, b).map_err(Self::engine_err)?;
            }
            b += 1;
        }
        let over_limit = inner.dirty.len() > self.max_dirty_blocks;
        self.unlock_and_write_region(inner)?;
        for (b, d) in partial {
            if let Some(d) = d {
                next.write_at(file, &d, b * BLOCK)?;
                self.writebacks.fetch_add(1, Relaxed);
            }
            let from = off.max(b * BLOCK);
            let to = end.min((b + 1) * BLOCK);
            next.write_at(
                file,
                &data[(from - off) as usize..(to - off) as usize],
                from,
            )?;
        }
        drop(wb);
        if over_limit {
            // `next` is this file's route: only this file's blocks can go there (the switch
            // writes back the other files' when the stage stays over its limit).
            self.write_back(Some(file), next)?;
        }
        Ok(())
    }

    fn sync(&self, file: u64, next: &dyn Backend) -> io::Result<()> {
        self.write_back(Some(file), next)?;
        next.sync(file)
    }

    fn holds_data(&self) -> bool {
        self.mode == Mode::WriteBack
    }

    fn flush_expired(&self, file: u64, max_age: Duration, next: &dyn Backend) -> io::Result<()> {
        let now = (self.clock)();
        let expired = self
            .lock()
            .dirtied
            .get(&file)
            .is_some_and(|t| now.saturating_duration_since(*t) >= max_age);
        if expired {
            self.write_back(Some(file), next)?;
        }
        Ok(())
    }

    fn write_back_file(&self, file: u64, next: &dyn Backend) -> io::Result<()> {
        self.write_back(Some(file), next)
    }

    fn over_dirty_limit(&self) -> bool {
        self.lock().dirty.len() > self.max_dirty_blocks
    }

    fn dirty_files(&self) -> Vec<u64> {
        // One step per file, not per block: the map can hold the whole dirty limit.
        let inner = self.lock();
        let mut files = Vec::new();
        let mut from = Some(0);
        while let Some(((f, _), _)) = from.and_then(|f| inner.dirty.range((f, 0)..).next()) {
            files.push(*f);
            from = f.checked_add(1);
        }
        files
    }

    fn retire(&self) {
        self.lock().retired = true;
    }

    fn invalidate(&self, file: u64, off: u64, len: u64) {
        let mut inner = self.lock();
        let end = off.saturating_add(len);
        let mut b = off / BLOCK;
        while b.saturating_mul(BLOCK) < end {
            inner.dirty.remove(&(file, b));
            let _ = inner.delete(file, b);
            b += 1;
        }
    }

    fn forget_clean(&self, file: u64) {
        let mut inner = self.lock();
        let Some(last) = inner.max_block.remove(&file) else {
            return;
        };
        let mut kept = 0;
        for b in 0..=last {
            if inner.dirty.contains_key(&(file, b)) {
                kept = b;
            } else {
                let _ = inner.delete(file, b);
            }
        }
        if inner
            .dirty
            .range((file, 0)..=(file, u64::MAX))
            .next()
            .is_some()
        {
            inner.max_block.insert(file, kept);
        }
    }

    fn truncate(&self, file: u64, size: u64) {
        // The block holding the new end is partial now: drop it with everything after it.
        let first = size / BLOCK;
        let last = {
            let mut inner = self.lock();
            inner.dirty.retain(|(f, b), _| *f != file || *b < first);
            inner.max_block.get(&file).copied().unwrap_or(0)
        };
        if last >= first {
            self.invalidate(file, first * BLOCK, (last - first + 1) * BLOCK);
        }
    }

    fn counters(&self) -> StageStats {
        let inner = self.lock();
        let e = inner.engine.stats();
        StageStats {
            kind: "cache".into(),
            engine: Some(inner.engine.config().engine),
            size_bytes: inner.engine.config().size_bytes,
            installed_bytes: inner.engine.installed(),
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            bytes_read_hit: self.bytes_read_hit.load(Relaxed),
            bytes_read_miss: self.bytes_read_miss.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
            app_bytes_written: e.app_bytes_written,
            flash_bytes_written: e.flash_bytes_written,
            evictions: e.evictions,
            dirty_bytes: inner.dirty.len() as u64 * BLOCK,
            writebacks: self.writebacks.load(Relaxed),
            demoted_blocks: inner.demoted,
            ..StageStats::default()
        }
    }

    fn stats(&self) -> serde_json::Value {
        let (objects, dropped) = {
            let inner = self.lock();
            (inner.engine.stats().objects, inner.demotions_dropped)
        };
        let c = self.counters();
        let (h, m) = (c.hits, c.misses);
        let mut v = serde_json::to_value(&c).unwrap_or_default();
        v["mode"] = format!("{:?}", self.mode).into();
        v["hit_ratio"] = (if h + m > 0 {
            h as f64 / (h + m) as f64
        } else {
            0.0
        })
        .into();
        v["objects"] = objects.into();
        v["demotions_dropped"] = dropped.into();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::testing::MemFiles;
    use lachesis_switch::{CacheEngine, Eviction};
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};

    fn config(engine: CacheEngine, mode: WriteMode, size: u64) -> CacheConfig {
        CacheConfig {
            name: "cache/t".into(),
            owner: None,
            engine,
            size_bytes: size,
            write_mode: mode,
            eviction: Eviction::Lru,
            max_dirty_bytes: 1 << 20,
            device: None,
            placement: vec![],
            next: None,
            serves: None,
            exclusive: false,
        }
    }

    fn stage(mode: Mode, cap: usize) -> CacheStage {
        let wm = match mode {
            Mode::WriteThrough => WriteMode::Through,
            Mode::WriteBack => WriteMode::Back,
            Mode::WriteAround => WriteMode::Around,
        };
        CacheStage::from_config(
            &config(CacheEngine::Dram, wm, cap as u64),
            &Devices::default(),
        )
        .unwrap()
    }

    /// A clock that moves only when the test says.
    fn fake_clock() -> (Clock, Arc<Mutex<Duration>>) {
        let (base, offset) = (Instant::now(), Arc::new(Mutex::new(Duration::ZERO)));
        let o = offset.clone();
        (Arc::new(move || base + *o.lock().unwrap()), offset)
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn reads_hit_after_the_first_miss() {
        let mem = MemFiles::default();
        mem.write_at(1, &pattern(3 * 4096 + 100, 1), 0).unwrap();
        let c = stage(Mode::WriteThrough, 1 << 20);
        let mut a = vec![0u8; 8192];
        c.read(1, &mut a, 100, &mem).unwrap();
        let r0 = mem.reads.load(Ordering::Relaxed);
        let mut b = vec![0u8; 8192];
        c.read(1, &mut b, 100, &mem).unwrap();
        assert_eq!(a, b);
        assert_eq!(&a[..], &mem.content(1)[100..8292]);
        assert_eq!(
            mem.reads.load(Ordering::Relaxed),
            r0,
            "second read was served by the cache"
        );
        // The short tail block is read but never cached.
        let mut t = vec![0u8; 4096];
        assert_eq!(c.read(1, &mut t, 3 * 4096, &mem).unwrap(), 100);
        assert_eq!(c.read(1, &mut t, 3 * 4096, &mem).unwrap(), 100);
    }

    #[test]
    fn adjacent_misses_go_to_next_as_one_read() {
        let (_dir, devices) = uring_devices(64 << 20);
        let flash = CacheStage::from_config(
            &config(CacheEngine::Loc, WriteMode::Through, 32 << 20),
            &devices,
        )
        .unwrap();
        // A DRAM stage reads each missing block with its own lease (it demotes what it was
        // lent), so it reads the runs block by block: 2 + 7 reads, then the tail again.
        for (c, reads, again) in [(flash, 2, 1), (stage(Mode::WriteThrough, 1 << 20), 9, 1)] {
            let mem = MemFiles::default();
            let file = pattern(10 * 4096 + 100, 3);
            mem.write_at(1, &file, 0).unwrap();
            let mut two = vec![0u8; 2 * 4096];
            c.read(1, &mut two, 2 * 4096, &mem).unwrap();
            let r0 = mem.reads.load(Ordering::Relaxed);
            // Blocks 0-1 missing, 2-3 cached, 4 to the end missing (the last one short).
            let mut all = vec![0u8; 11 * 4096];
            let n = c.read(1, &mut all, 100, &mem).unwrap();
            assert_eq!(n, file.len() - 100);
            assert!(all[..n] == file[100..]);
            assert_eq!(mem.reads.load(Ordering::Relaxed) - r0, reads);
            let stats = c.stats();
            assert_eq!(
                (stats["hits"].as_u64(), stats["misses"].as_u64()),
                (Some(2), Some(2 + 2 + 7))
            );
            // Every whole block is cached now; only the short tail goes to `next` again.
            let mut second = vec![0u8; 11 * 4096];
            assert_eq!(c.read(1, &mut second, 100, &mem).unwrap(), n);
            assert!(second == all);
            assert_eq!(mem.reads.load(Ordering::Relaxed) - r0, reads + again);
        }
    }

    #[test]
    fn every_mode_reads_back_what_was_written() {
        for mode in [Mode::WriteThrough, Mode::WriteBack, Mode::WriteAround] {
            let mem = MemFiles::default();
            let c = stage(mode, 64 << 10);
            let mut model = vec![0u8; 64 << 10];
            let mut x: u64 = 12345;
            for i in 0..300u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let off = (x >> 20) % 60_000;
                let len = 1 + (x >> 40) % 5000;
                let len = len.min(model.len() as u64 - off);
                let data = pattern(len as usize, i as u8);
                c.write(1, &data, off, &mem).unwrap();
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
                if i % 7 == 0 {
                    let mut b = vec![0u8; 9000];
                    let ro = (x >> 10) % 50_000;
                    c.read(1, &mut b, ro, &mem).unwrap();
                    assert_eq!(&b[..], &model[ro as usize..ro as usize + 9000], "{mode:?}");
                }
            }
            c.sync(1, &mem).unwrap();
            let content = mem.content(1);
            assert_eq!(&content[..], &model[..content.len()], "{mode:?} after sync");
        }
    }

    #[test]
    fn write_back_defers_and_write_around_does_not_fill() {
        let mem = MemFiles::default();
        let wb = stage(Mode::WriteBack, 1 << 20);
        wb.write(1, &[9u8; 8192], 0, &mem).unwrap();
        assert_eq!(mem.writes.load(Ordering::Relaxed), 0);
        let mut b = [0u8; 8192];
        wb.read(1, &mut b, 0, &mem).unwrap();
        assert_eq!(b, [9u8; 8192]);
        wb.sync(1, &mem).unwrap();
        assert_eq!(mem.content(1), vec![9u8; 8192]);

        let mem = MemFiles::default();
        let wa = stage(Mode::WriteAround, 1 << 20);
        wa.write(1, &[3u8; 4096], 0, &mem).unwrap();
        wa.read(1, &mut [0u8; 4096], 0, &mem).unwrap();
        assert_eq!(wa.hit_counts(), (0, 1));
        wa.read(1, &mut [0u8; 4096], 0, &mem).unwrap();
        assert_eq!(wa.hit_counts(), (1, 1));
    }

    /// Adjacent dirty blocks of a file reach `next` as one write (up to 1 MiB); a gap, another
    /// file or the run's limit starts another. What lands is what was written, in order.
    #[test]
    fn write_back_sends_adjacent_dirty_blocks_as_one_write() {
        let mem = MemFiles::default();
        let mut c = config(CacheEngine::Dram, WriteMode::Back, 8 << 20);
        c.max_dirty_bytes = 4 << 20;
        let wb = CacheStage::from_config(&c, &Devices::default()).unwrap();
        let first = pattern(64 * 4096, 1);
        wb.write(1, &first, 0, &mem).unwrap();
        // A gap of one block, then 300 more: 256 in one write and 44 in another.
        let second = pattern(300 * 4096, 2);
        wb.write(1, &second, 65 * 4096, &mem).unwrap();
        wb.write(2, &pattern(2 * 4096, 3), 0, &mem).unwrap();
        wb.write(u64::MAX, &pattern(4096, 4), 0, &mem).unwrap();
        assert_eq!(mem.writes.load(Ordering::Relaxed), 0);
        assert_eq!(wb.dirty_files(), vec![1, 2, u64::MAX]);
        wb.sync(1, &mem).unwrap();
        assert_eq!(mem.writes.load(Ordering::Relaxed), 3);
        assert_eq!(wb.dirty_files(), vec![2, u64::MAX]);
        let mut want = first.clone();
        want.extend_from_slice(&[0u8; 4096]);
        want.extend_from_slice(&second);
        assert!(mem.content(1) == want);
        assert_eq!(wb.stats()["writebacks"], 364);
        wb.sync(2, &mem).unwrap();
        assert_eq!(mem.writes.load(Ordering::Relaxed), 4);
        assert!(mem.content(2) == pattern(2 * 4096, 3));
        assert_eq!(wb.dirty_files(), vec![u64::MAX]);
    }

    #[test]
    fn flusher_writes_back_only_files_dirty_for_longer_than_the_age() {
        let mem = MemFiles::default();
        let (clock, now) = fake_clock();
        let wb = stage(Mode::WriteBack, 1 << 20).with_clock(clock);
        wb.write(1, &[7u8; 8192], 0, &mem).unwrap();
        wb.flush_expired(1, Duration::from_secs(60), &mem).unwrap();
        assert_eq!(
            mem.writes.load(Ordering::Relaxed),
            0,
            "young dirty data stays"
        );
        *now.lock().unwrap() += Duration::from_millis(30);
        wb.write(2, &[8u8; 4096], 0, &mem).unwrap();
        // File 1's oldest dirty block is 30 ms old, file 2's is new.
        for f in [1, 2] {
            wb.flush_expired(f, Duration::from_millis(20), &mem)
                .unwrap();
        }
        assert_eq!(mem.content(1), vec![7u8; 8192]);
        assert!(mem.content(2).is_empty(), "file 2 is too young to flush");
        assert_eq!(wb.stats()["writebacks"], 2);
        // Written back: nothing left to flush, a later write starts a new age.
        wb.flush_expired(1, Duration::ZERO, &mem).unwrap();
        assert_eq!(wb.stats()["writebacks"], 2);
        wb.write(1, &[9u8; 4096], 0, &mem).unwrap();
        wb.flush_expired(1, Duration::ZERO, &mem).unwrap();
        assert_eq!(&mem.content(1)[..4096], &[9u8; 4096]);
    }

    /// A read racing a write-back (sync, close and the flusher take no block locks) finds the
    /// dirty copy until `next` has it; before, the block left the dirty map first and the read
    /// cached the old bytes `next` still held, for good.
    #[test]
    fn a_read_during_a_write_back_sees_the_dirty_block_and_caches_no_old_bytes() {
        struct ReadsInside<'a> {
            mem: &'a MemFiles,
            stage: &'a CacheStage,
            seen: Mutex<Vec<Vec<u8>>>,
        }
        impl Backend for ReadsInside<'_> {
            fn read_at(&self, file: u64, buf: &mut [u8], off: u64) -> io::Result<usize> {
                self.mem.read_at(file, buf, off)
            }
            fn write_at(&self, file: u64, data: &[u8], off: u64) -> io::Result<()> {
                // Just before the block reaches `next`: a reader of the file.
                let mut b = vec![0u8; 4096];
                self.stage.read(file, &mut b, 0, self.mem).unwrap();
                self.seen.lock().unwrap().push(b);
                self.mem.write_at(file, data, off)
            }
            fn sync(&self, _file: u64) -> io::Result<()> {
                Ok(())
            }
        }
        let mem = MemFiles::default();
        mem.write_at(1, &[1u8; 4096], 0).unwrap();
        // An engine of one region's worth less than what is dirty: the engine has evicted
        // the block, only the dirty map holds it.
        let wb = stage(Mode::WriteBack, 4096);
        wb.write(1, &[2u8; 4096], 0, &mem).unwrap();
        wb.write(1, &[3u8; 4096], 4096, &mem).unwrap();
        let next = ReadsInside {
            mem: &mem,
            stage: &wb,
            seen: Mutex::new(vec![]),
        };
        wb.write_back_file(1, &next).unwrap();
        assert!(next
            .seen
            .lock()
            .unwrap()
            .iter()
            .all(|b| b == &vec![2u8; 4096]));
        let mut b = [0u8; 4096];
        wb.read(1, &mut b, 0, &mem).unwrap();
        assert_eq!(
            b, [2u8; 4096],
            "a read during the write-back cached the old bytes"
        );
    }

    #[test]
    fn invalidate_drops_dirty_and_cached_blocks() {
        let mem = MemFiles::default();
        let wb = stage(Mode::WriteBack, 1 << 20);
        wb.write(1, &[1u8; 4096], 0, &mem).unwrap();
        mem.write_at(1, &[2u8; 4096], 0).unwrap();
        wb.invalidate(1, 0, 4096);
        wb.sync(1, &mem).unwrap();
        let mut b = [0u8; 4096];
        wb.read(1, &mut b, 0, &mem).unwrap();
        assert_eq!(b, [2u8; 4096]);
    }

    /// The agent's devices: io_uring on a sparse file of `size` bytes in a directory that
    /// lives as long as the returned guard.
    fn uring_devices(size: u64) -> (tempfile::TempDir, Devices) {
        use lachesis_device::uring::{UringConfig, UringDevice};
        let dir = tempfile::tempdir().unwrap();
        let dev = UringDevice::open(
            dir.path().join("cache.img"),
            UringConfig {
                create_size: Some(size),
                single_issuer: false,
                ..Default::default()
            },
        )
        .unwrap();
        let devices = Devices::new(vec![("flash0".into(), lachesis_cache::share(dev))]).unwrap();
        (dir, devices)
    }

    #[test]
    fn flash_engine_through_the_device_layer() {
        let (_dir, devices) = uring_devices(128 << 20);
        let c = CacheStage::from_config(
            &config(CacheEngine::Loc, WriteMode::Through, 64 << 20),
            &devices,
        )
        .unwrap();
        let mem = MemFiles::default();
        mem.write_at(1, &pattern(64 << 10, 3), 0).unwrap();
        let mut a = vec![0u8; 64 << 10];
        c.read(1, &mut a, 0, &mem).unwrap();
        let r0 = mem.reads.load(Ordering::Relaxed);
        let mut b = vec![0u8; 64 << 10];
        c.read(1, &mut b, 0, &mem).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, mem.content(1));
        assert_eq!(
            mem.reads.load(Ordering::Relaxed),
            r0,
            "served from the flash engine"
        );
        assert_eq!(c.stats()["hits"], 16);
        assert_eq!(c.installed_bytes(), 64 << 20);
        // Far more than the capacity: the engine evicts regions and keeps answering.
        let small = CacheStage::from_config(
            &config(CacheEngine::Loc, WriteMode::Through, 8 << 20),
            &devices,
        )
        .unwrap();
        mem.write_at(2, &pattern(24 << 20, 5), 0).unwrap();
        let mut buf = vec![0u8; 128 << 10];
        for i in 0..(24 * 8) {
            small.read(2, &mut buf, i * (128 << 10), &mem).unwrap();
        }
        for i in (0..(24 * 8)).rev() {
            small.read(2, &mut buf, i * (128 << 10), &mem).unwrap();
            assert_eq!(
                buf[..],
                mem.content(2)[(i * (128 << 10)) as usize..][..128 << 10]
            );
        }
        assert!(small.counters().evictions > 0);
    }

    /// Hits read the device without the stage's lock: threads rewriting and reading their
    /// own files through one small flash stage (regions evicted and reused all along) each
    /// read back exactly their latest bytes, in every round.
    #[test]
    fn threads_reading_hits_while_others_evict_read_only_their_latest_bytes() {
        let (_dir, devices) = uring_devices(64 << 20);
        for mode in [WriteMode::Through, WriteMode::Back] {
            let c = Arc::new(
                CacheStage::from_config(&config(CacheEngine::Loc, mode, 8 << 20), &devices)
                    .unwrap(),
            );
            let mem = Arc::new(MemFiles::default());
            let threads: Vec<_> = (1..=4u64)
                .map(|file| {
                    let (c, mem) = (c.clone(), mem.clone());
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 256 << 10];
                        for round in 0..24u8 {
                            // 12 places of 256 KiB per file: 12 MiB in all, over 8 MiB of flash.
                            let off = u64::from(round % 12) * (256 << 10);
                            let data = pattern(256 << 10, round.wrapping_mul(7) ^ file as u8);
                            c.write(file, &data, off, &*mem).unwrap();
                            for _ in 0..2 {
                                c.read(file, &mut buf, off, &*mem).unwrap();
                                assert!(buf == data, "file {file} round {round}: stale bytes");
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let (hits, _) = c.hit_counts();
            assert!(hits > 0 && c.counters().evictions > 0, "{mode:?}");
        }
    }

    #[test]
    fn a_retired_write_back_stage_passes_writes_on_and_empties() {
        let mem = MemFiles::default();
        let wb = stage(Mode::WriteBack, 1 << 20);
        wb.write(1, &[1u8; 8192], 0, &mem).unwrap();
        assert_eq!(wb.dirty_files(), vec![1]);
        wb.retire();
        // A write covering block 1 in part: block 1's dirty copy goes first, then the write;
        // block 0 stays dirty until the last write-back.
        wb.write(1, &[2u8; 100], 4096 + 50, &mem).unwrap();
        let mut want = vec![0u8; 8192];
        want[4096..].fill(1);
        want[4096 + 50..4096 + 150].fill(2);
        assert_eq!(mem.content(1)[4096..], want[4096..]);
        assert_eq!(wb.counters().dirty_bytes, 4096);
        wb.write_back_file(1, &mem).unwrap();
        want[..4096].fill(1);
        assert_eq!(mem.content(1), want);
        assert!(wb.dirty_files().is_empty());
        // Later whole-block writes go on at once and leave nothing dirty.
        wb.write(1, &[3u8; 4096], 0, &mem).unwrap();
        assert_eq!(mem.content(1)[..4096], [3u8; 4096]);
        assert!(wb.dirty_files().is_empty());
    }

    #[test]
    fn a_failed_write_back_keeps_the_blocks_dirty() {
        struct Refusing;
        impl Backend for Refusing {
            fn read_at(&self, _: u64, _: &mut [u8], _: u64) -> io::Result<usize> {
                Ok(0)
            }
            fn write_at(&self, _: u64, _: &[u8], _: u64) -> io::Result<()> {
                Err(io::Error::other("disk full"))
            }
            fn sync(&self, _: u64) -> io::Result<()> {
                Ok(())
            }
        }
        let mem = MemFiles::default();
        let wb = stage(Mode::WriteBack, 1 << 20);
        wb.write(1, &[5u8; 3 * 4096], 0, &mem).unwrap();
        assert!(wb.write_back_file(1, &Refusing).is_err());
        assert_eq!(wb.counters().dirty_bytes, 3 * 4096);
        wb.write_back_file(1, &mem).unwrap();
        assert_eq!(mem.content(1), vec![5u8; 3 * 4096]);
    }

    #[test]
    fn counters_count_blocks_and_bytes_of_hits_and_misses() {
        let mem = MemFiles::default();
        mem.write_at(1, &[4u8; 3 * 4096], 0).unwrap();
        let c = stage(Mode::WriteThrough, 1 << 20);
        let mut buf = vec![0u8; 6000];
        c.read(1, &mut buf, 100, &mem).unwrap();
        c.read(1, &mut buf, 100, &mem).unwrap();
        c.write(1, &[1u8; 10], 0, &mem).unwrap();
        let s = c.counters();
        assert_eq!((s.hits, s.misses), (2, 2));
        assert_eq!((s.bytes_read_hit, s.bytes_read_miss), (6000, 6000));
        assert_eq!(
            (s.bytes_written, s.installed_bytes, s.size_bytes),
            (10, 1 << 20, 1 << 20)
        );
        assert_eq!(s.engine, Some(CacheEngine::Dram));
    }

    #[test]
    fn separate_stages_isolate_a_working_set_from_a_scan() {
        // What the e2e test checks on a mount, here on the stage alone.
        let mem = MemFiles::default();
        mem.write_at(1, &vec![1u8; 64 << 10], 0).unwrap();
        mem.write_at(2, &vec![2u8; 4 << 20], 0).unwrap();
        let run = |a: &CacheStage, b: &CacheStage| {
            let mut buf = vec![0u8; 4096];
            let (mut ah, mut am) = (0, 0);
            for round in 0..20u64 {
                let (h0, m0) = a.hit_counts();
                for blk in 0..16u64 {
                    a.read(1, &mut buf, blk * 4096, &mem).unwrap();
                }
                let (h1, m1) = a.hit_counts();
                ah += h1 - h0;
                am += m1 - m0;
                for blk in 0..64u64 {
                    b.read(2, &mut buf, (round * 64 + blk) * 4096, &mem)
                        .unwrap();
                }
            }
            ah as f64 / (ah + am) as f64
        };
        let (a, b) = (
            stage(Mode::WriteThrough, 128 << 10),
            stage(Mode::WriteThrough, 128 << 10),
        );
        let isolated = run(&a, &b);
        let shared = stage(Mode::WriteThrough, 128 << 10);
        let mixed = run(&shared, &shared);
        assert!(isolated > 0.9, "isolated {isolated}");
        assert!(mixed < 0.2, "shared {mixed}");
    }
}
