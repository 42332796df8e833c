//! Cache stage: 4 KiB blocks of a file in a cache [`Engine`] (key = file id + block number),
//! in one of three write modes.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lachesis_cache::Engine;

use super::{Backend, Stage};

pub const BLOCK: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Writes go to `next` and update the cached blocks.
    WriteThrough,
    /// Writes are acknowledged once cached; dirty blocks go to `next` on sync, close or when
    /// more than `max_dirty` bytes are dirty.
    WriteBack,
    /// Writes go to `next` and drop the cached blocks (only reads fill the cache).
    WriteAround,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "write-through" => Ok(Mode::WriteThrough),
            "write-back" => Ok(Mode::WriteBack),
            "write-around" => Ok(Mode::WriteAround),
            m => Err(format!(
                "stage cache: mode {m:?} is not write-through, write-back or write-around"
            )),
        }
    }
}

fn key(file: u64, block: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&file.to_le_bytes());
    k[8..].copy_from_slice(&block.to_le_bytes());
    k
}

struct Inner {
    engine: Box<dyn Engine>,
    /// Write-back blocks not yet in `next`, ordered so write-back is sequential. The engine
    /// may evict at will, so the dirty copy is kept here until it is written back.
    dirty: BTreeMap<(u64, u64), Vec<u8>>,
    /// Highest block ever cached per file, so a truncate can drop every block past the end.
    max_block: std::collections::HashMap<u64, u64>,
    /// Since when each file has had dirty blocks (per file, as the kernel keeps an inode's
    /// dirtied_when): the flusher writes back a file whose oldest dirty data is too old.
    dirtied: std::collections::HashMap<u64, Instant>,
}

impl Inner {
    fn set(&mut self, file: u64, b: u64, data: &[u8]) -> lachesis_cache::Result<bool> {
        let m = self.max_block.entry(file).or_insert(0);
        *m = (*m).max(b);
        self.engine.set(&key(file, b), data)
    }
}

pub struct CacheStage {
    mode: Mode,
    max_dirty_blocks: usize,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
    writebacks: AtomicU64,
}

impl CacheStage {
    pub fn new(engine: Box<dyn Engine>, mode: Mode, max_dirty: u64) -> Self {
        CacheStage {
            mode,
            max_dirty_blocks: (max_dirty / BLOCK).max(1) as usize,
            inner: Mutex::new(Inner {
                engine,
                dirty: BTreeMap::new(),
                max_block: Default::default(),
                dirtied: Default::default(),
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            writebacks: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// (hits, misses) of block reads.
    pub fn hit_counts(&self) -> (u64, u64) {
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }

    /// Writes back dirty blocks (of `file`, or all when `None`).
    fn write_back(&self, file: Option<u64>, next: &dyn Backend) -> io::Result<()> {
        let blocks: Vec<((u64, u64), Vec<u8>)> = {
            let mut inner = self.lock();
            let keys: Vec<(u64, u64)> = inner
                .dirty
                .keys()
                .filter(|(f, _)| file.is_none_or(|x| x == *f))
                .copied()
                .collect();
            match file {
                Some(f) => inner.dirtied.remove(&f),
                None => {
                    inner.dirtied.clear();
                    None
                }
            };
            keys.into_iter()
                .map(|k| (k, inner.dirty.remove(&k).expect("listed")))
                .collect()
        };
        for ((f, b), data) in blocks {
            next.write_at(f, &data, b * BLOCK)?;
            self.writebacks.fetch_add(1, Relaxed);
        }
        Ok(())
    }

    fn engine_err(e: lachesis_cache::Error) -> io::Error {
        io::Error::other(e)
    }
}

impl Stage for CacheStage {
    fn read(&self, file: u64, buf: &mut [u8], off: u64, next: &dyn Backend) -> io::Result<usize> {
        let end = off + buf.len() as u64;
        let mut block = vec![0u8; BLOCK as usize];
        let mut b = off / BLOCK;
        while b * BLOCK < end {
            let bstart = b * BLOCK;
            let cached = {
                let mut inner = self.lock();
                match inner.dirty.get(&(file, b)) {
                    Some(d) => Some(d.clone()),
                    None => inner.engine.get(&key(file, b)).map_err(Self::engine_err)?,
                }
            };
            let avail = match cached {
                Some(d) if d.len() == BLOCK as usize => {
                    self.hits.fetch_add(1, Relaxed);
                    block.copy_from_slice(&d);
                    BLOCK as usize
                }
                _ => {
                    self.misses.fetch_add(1, Relaxed);
                    let n = next.read_at(file, &mut block, bstart)?;
                    // Only whole blocks are cached: a short tail block would go stale when the
                    // file grows past it.
                    if n == BLOCK as usize {
                        self.lock().set(file, b, &block).map_err(Self::engine_err)?;
                    }
                    n
                }
            };
            let from = off.max(bstart);
            let to = end.min(bstart + avail as u64);
            if to > from {
                buf[(from - off) as usize..(to - off) as usize]
                    .copy_from_slice(&block[(from - bstart) as usize..(to - bstart) as usize]);
            }
            if avail < BLOCK as usize {
                return Ok(to.saturating_sub(off) as usize);
            }
            b += 1;
        }
        Ok(buf.len())
    }

    fn write(&self, file: u64, data: &[u8], off: u64, next: &dyn Backend) -> io::Result<()> {
        let end = off + data.len() as u64;
        if self.mode != Mode::WriteBack {
            next.write_at(file, data, off)?;
        }
        let mut over_limit = false;
        let mut partial = Vec::new();
        {
            let mut inner = self.lock();
            let mut b = off / BLOCK;
            while b * BLOCK < end {
                let bstart = b * BLOCK;
                let k = key(file, b);
                let whole = off <= bstart && bstart + BLOCK <= end;
                let slice = || &data[(bstart - off) as usize..(bstart + BLOCK - off) as usize];
                match self.mode {
                    Mode::WriteAround => {
                        inner.engine.delete(&k).map_err(Self::engine_err)?;
                    }
                    Mode::WriteThrough if whole => {
                        inner.set(file, b, slice()).map_err(Self::engine_err)?;
                    }
                    Mode::WriteThrough => {
                        inner.engine.delete(&k).map_err(Self::engine_err)?;
                    }
                    Mode::WriteBack if whole => {
                        inner.dirtied.entry(file).or_insert_with(Instant::now);
                        inner.dirty.insert((file, b), slice().to_vec());
                        inner.set(file, b, slice()).map_err(Self::engine_err)?;
                    }
                    Mode::WriteBack => {
                        // A partial block is written through (after its dirty copy, so the
                        // order of bytes in `next` stays the order of writes).
                        if let Some(d) = inner.dirty.remove(&(file, b)) {
                            partial.push((b, Some(d)));
                        } else {
                            partial.push((b, None));
                        }
                        inner.engine.delete(&k).map_err(Self::engine_err)?;
                    }
                }
                b += 1;
            }
            over_limit = over_limit || inner.dirty.len() > self.max_dirty_blocks;
        }
        for (b, d) in partial {
            if let Some(d) = d {
                next.write_at(file, &d, b * BLOCK)?;
            }
            let from = off.max(b * BLOCK);
            let to = end.min((b + 1) * BLOCK);
            next.write_at(
                file,
                &data[(from - off) as usize..(to - off) as usize],
                from,
            )?;
        }
        if over_limit {
            self.write_back(None, next)?;
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
        let expired = self
            .lock()
            .dirtied
            .get(&file)
            .is_some_and(|t| t.elapsed() >= max_age);
        if expired {
            self.write_back(Some(file), next)?;
        }
        Ok(())
    }

    fn invalidate(&self, file: u64, off: u64, len: u64) {
        let mut inner = self.lock();
        let end = off.saturating_add(len);
        let mut b = off / BLOCK;
        while b.saturating_mul(BLOCK) < end {
            inner.dirty.remove(&(file, b));
            let _ = inner.engine.delete(&key(file, b));
            b += 1;
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

    fn stats(&self) -> serde_json::Value {
        let e = self.lock().engine.stats();
        let (h, m) = self.hit_counts();
        serde_json::json!({
            "kind": "cache",
            "mode": format!("{:?}", self.mode),
            "hits": h,
            "misses": m,
            "hit_ratio": if h + m > 0 { h as f64 / (h + m) as f64 } else { 0.0 },
            "evictions": e.evictions,
            "objects": e.objects,
            "writebacks": self.writebacks.load(Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::mem_engine::MemEngine;
    use crate::stage::testing::MemFiles;
    use std::sync::atomic::Ordering;

    fn stage(mode: Mode, cap: usize) -> CacheStage {
        CacheStage::new(Box::new(MemEngine::new(cap)), mode, 1 << 20)
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

    #[test]
    fn flusher_writes_back_only_files_dirty_for_longer_than_the_age() {
        let mem = MemFiles::default();
        let wb = stage(Mode::WriteBack, 1 << 20);
        wb.write(1, &[7u8; 8192], 0, &mem).unwrap();
        wb.flush_expired(1, Duration::from_secs(60), &mem).unwrap();
        assert_eq!(
            mem.writes.load(Ordering::Relaxed),
            0,
            "young dirty data stays"
        );
        std::thread::sleep(Duration::from_millis(30));
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

    #[test]
    fn flash_engine_through_the_device_layer() {
        let d = tempfile::tempdir().unwrap();
        let spec = crate::stage::StageSpec::parse(&format!(
            "cache:engine=flash,capacity=64MiB,device={}",
            d.path().join("cache.img").display()
        ))
        .unwrap();
        let c = spec.build().unwrap();
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
        // Far more than the capacity: the engine evicts regions and keeps answering.
        let small = crate::stage::StageSpec::parse(&format!(
            "cache:engine=flash,capacity=8MiB,device={}",
            d.path().join("small.img").display()
        ))
        .unwrap()
        .build()
        .unwrap();
        mem.write_at(2, &pattern(24 << 20, 5), 0).unwrap();
        let mut buf = vec![0u8; 128 << 10];
        for i in 0..(24 * 8) {
            small.read(2, &mut buf, i * (128 << 10), &mem).unwrap();
        }
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
