//! Log-structured writer: every write becomes an append to one log file; an index of
//! (file, range) -> log position serves reads of written ranges, the rest come from `next`.
//! The index is rebuilt by replaying the log, so data survives a restart.
//!
//! The log is a local file, or a file on another agent's `lachesis-fs serve` (tail-latency
//! forwarding, sRoute §6.5.1: a slow endpoint's writes are appended to a less loaded one;
//! each append is durable there when acknowledged). A forwarding log, or one told a reclaim
//! rate, *writes back*: [`Stage::dirty_files`] lists the files it holds ranges of and
//! [`Stage::write_back_file`] / [`LogWriter::reclaim_file`] copy them to the rest of the
//! route and drop them from the index, so reads of them go on to the endpoint. While a
//! reclaim rate is set (or once retired) new writes pass through to the endpoint.
//!
//! Record: magic u32, crc32c u32 (of everything after it), file u64, offset u64, len u32, data.
//! A *drop* record (magic [`DROP`], no data) says `[offset, offset + len)` of the file left the
//! log (copied back by a reclaim, or replaced by a write that passed through), so a replay
//! after a restart holds exactly what the log held before it and never brings an older copy
//! back over a newer write. A forwarding log that holds nothing any more is cut to nothing, so
//! a later forwarding into the same log starts empty.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Backend, Stage, StageStats};
use crate::rangemap::RangeMap;
use crate::remote::Client;

/// Where the log's bytes are.
enum LogFile {
    Local(File),
    /// `path` on the agent `client` talks to.
    Remote {
        client: Arc<Client>,
        path: String,
    },
}

impl LogFile {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let n = match self {
            LogFile::Local(f) => return f.read_exact_at(buf, off),
            LogFile::Remote { client, path } => client.read(path, buf, off)?,
        };
        if n < buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "log ends early",
            ));
        }
        Ok(())
    }

    fn write_all_at(&self, data: &[u8], off: u64) -> io::Result<()> {
        match self {
            LogFile::Local(f) => f.write_all_at(data, off),
            LogFile::Remote { client, path } => client.write(path, data, off),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        match self {
            LogFile::Local(f) => f.sync_data(),
            // Every remote append was durable when acknowledged.
            LogFile::Remote { .. } => Ok(()),
        }
    }

    fn len(&self) -> io::Result<u64> {
        match self {
            LogFile::Local(f) => Ok(f.metadata()?.len()),
            LogFile::Remote { client, path } => client.getattr(path),
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        match self {
            LogFile::Local(f) => f.set_len(len),
            LogFile::Remote { client, path } => client.truncate(path, len),
        }
    }
}

const MAGIC: u32 = 0x4c41_4c47; // "LALG"
const DROP: u32 = 0x4c41_4c44; // "LALD"
const HEADER: usize = 4 + 4 + 8 + 8 + 4;

/// Where a written extent's bytes start in the log, and the file offset they belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extent {
    log_off: u64,
    file_off: u64,
}

struct Inner {
    tail: u64,
    index: HashMap<u64, RangeMap<Extent>>,
}

impl Inner {
    fn drop_range(&mut self, file: u64, start: u64, end: u64) {
        if let Some(m) = self.index.get_mut(&file) {
            m.remove(start, end);
            if m.is_empty() {
                self.index.remove(&file);
            }
        }
    }
}

pub struct LogWriter {
    log: LogFile,
    inner: Mutex<Inner>,
    appends: AtomicU64,
    bytes_written: AtomicU64,
    /// A forwarding log: it writes back what it holds (see the module's doc).
    writes_back: bool,
    /// Bytes per second the background reclaim copies back; 0: none.
    reclaim_rate: AtomicU64,
    /// Retired from the switch's stages: writes pass through, one last write-back empties it.
    retired: AtomicBool,
    /// Held while a range is copied back and by pass-through writes, so an older copy never
    /// lands over a newer write of the same range.
    copy: Mutex<()>,
    reclaimed_bytes: AtomicU64,
}

/// Log records are read back at most this much at once (a reclaim step, a read of the log).
const COPY_CHUNK: u64 = 1 << 20;

impl LogWriter {
    /// Opens (or creates) `dir/stage.log` and replays it.
    pub fn open(dir: &Path) -> io::Result<Self> {
        crate::private::create_dir(dir)?;
        let log = crate::private::open(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &dir.join("stage.log"),
        )?;
        Self::replay(LogFile::Local(log), false)
    }

    /// Opens (or starts) the log `dir/stage.log` on the agent `client` talks to and replays
    /// it: a forwarding log.
    pub fn open_remote(client: Arc<Client>, dir: &str) -> io::Result<Self> {
        let path = format!("{}/stage.log", dir.trim_matches('/'));
        Self::replay(LogFile::Remote { client, path }, true)
    }

    fn replay(log: LogFile, writes_back: bool) -> io::Result<Self> {
        let mut inner = Inner {
            tail: 0,
            index: HashMap::new(),
        };
        let len = log.len()?;
        let mut hdr = [0u8; HEADER];
        // Replay until the end or the first torn/corrupt record (a crash mid-append).
        while inner.tail + HEADER as u64 <= len {
            log.read_exact_at(&mut hdr, inner.tail)?;
            let (magic, crc, file, off, n) = decode(&hdr);
            if magic == DROP {
                if crc32c::crc32c(&hdr[8..]) != crc {
                    break;
                }
                inner.drop_range(file, off, off.saturating_add(n as u64));
                inner.tail += HEADER as u64;
                continue;
            }
            if magic != MAGIC || inner.tail + (HEADER + n) as u64 > len {
                break;
            }
            let mut data = vec![0u8; n];
            log.read_exact_at(&mut data, inner.tail + HEADER as u64)?;
            if crc32c::crc32c_append(crc32c::crc32c(&hdr[8..]), &data) != crc {
                break;
            }
            let log_off = inner.tail + HEADER as u64;
            inner.index.entry(file).or_default().insert(
                off,
                off + n as u64,
                Extent {
                    log_off,
                    file_off: off,
                },
            );
            inner.tail = log_off + n as u64;
        }
        // Cut a torn tail so new appends follow the last good record.
        log.set_len(inner.tail)?;
        Ok(LogWriter {
            log,
            inner: Mutex::new(inner),
            appends: Default::default(),
            bytes_written: Default::default(),
            writes_back,
            reclaim_rate: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            copy: Mutex::new(()),
            reclaimed_bytes: Default::default(),
        })
    }

    /// Bytes of file data the log holds (not yet written back).
    pub fn held_bytes(&self) -> u64 {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .index
            .values()
            .flat_map(|m| m.iter().map(|(s, e, _)| e - s))
            .sum()
    }

    fn passes_through(&self) -> bool {
        self.retired.load(Ordering::Relaxed) || self.reclaim_rate.load(Ordering::Relaxed) > 0
    }

    /// Copies up to `limit` bytes of what the log holds of `file` to `next`, oldest offsets
    /// first, and drops them from the index (each piece only if no newer write replaced it
    /// meanwhile); returns the bytes copied.
    pub fn reclaim_file(&self, file: u64, next: &dyn Backend, limit: u64) -> io::Result<u64> {
        let mut done = 0u64;
        while done < limit {
            let _copy = self.copy.lock().unwrap_or_else(|e| e.into_inner());
            let piece = {
                let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                inner.index.get(&file).and_then(|m| {
                    m.iter().next().map(|(s, e, x)| {
                        let e = e.min(s + COPY_CHUNK).min(s.saturating_add(limit - done));
                        (s, e, *x)
                    })
                })
            };
            let Some((s, e, x)) = piece else { break };
            let mut buf = vec![0u8; (e - s) as usize];
            self.log
                .read_exact_at(&mut buf, x.log_off + (s - x.file_off))?;
            next.write_at(file, &buf, s)?;
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let still = inner
                .index
                .get(&file)
                .is_some_and(|m| m.covers_range(s, e, |y| *y == x));
            if still {
                self.drop_locked(&mut inner, file, s, e)?;
            }
            done += e - s;
            self.reclaimed_bytes.fetch_add(e - s, Ordering::Relaxed);
        }
        Ok(done)
    }

    /// Takes `[start, end)` of `file` out of the index and says so in the log (a drop record
    /// per piece it held there); a forwarding log left holding nothing is cut to nothing
    /// instead. Called with the index locked, so the log's order is the index's.
    fn drop_locked(&self, inner: &mut Inner, file: u64, start: u64, end: u64) -> io::Result<()> {
        let held: Vec<(u64, u64)> = inner
            .index
            .get(&file)
            .map(|m| {
                m.segments(start, end)
                    .into_iter()
                    .filter_map(|(s, e, x)| x.map(|_| (s, e)))
                    .collect()
            })
            .unwrap_or_default();
        if held.is_empty() {
            return Ok(());
        }
        inner.drop_range(file, start, end);
        if inner.index.is_empty() && self.writes_back {
            self.log.set_len(0)?;
            inner.tail = 0;
            return Ok(());
        }
        for (s, e) in held {
            // Each piece is (part of) one record's data: its length fits the record's u32.
            let mut rec = [0u8; HEADER];
            rec[..4].copy_from_slice(&DROP.to_le_bytes());
            rec[8..16].copy_from_slice(&file.to_le_bytes());
            rec[16..24].copy_from_slice(&s.to_le_bytes());
            rec[24..28].copy_from_slice(&((e - s) as u32).to_le_bytes());
            let crc = crc32c::crc32c(&rec[8..]);
            rec[4..8].copy_from_slice(&crc.to_le_bytes());
            self.log.write_all_at(&rec, inner.tail)?;
            inner.tail += HEADER as u64;
        }
        Ok(())
    }

    /// Bytes of log in use.
    pub fn log_len(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).tail
    }
}

fn decode(h: &[u8; HEADER]) -> (u32, u32, u64, u64, usize) {
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
    (
        u32_at(0),
        u32_at(4),
        u64_at(8),
        u64_at(16),
        u32_at(24) as usize,
    )
}

impl Stage for LogWriter {
    fn read(&self, file: u64, buf: &mut [u8], off: u64, next: &dyn Backend) -> io::Result<usize> {
        let end = off + buf.len() as u64;
        let segs = {
            let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            match inner.index.get(&file) {
                Some(m) if !m.is_empty() => m.segments(off, end),
                _ => return next.read_at(file, buf, off),
            }
        };
        let mut got = 0usize;
        for (s, e, ext) in segs {
            let piece = &mut buf[(s - off) as usize..(e - off) as usize];
            let n = match ext {
                Some((_, x)) => {
                    self.log
                        .read_exact_at(piece, x.log_off + (s - x.file_off))?;
                    piece.len()
                }
                None => next.read_at(file, piece, s)?,
            };
            got = (s - off) as usize + n;
            if n < piece.len() {
                // End of the file below, unless the log holds later bytes (the switch keeps
                // the backing size up to date, so this is a real end).
                break;
            }
        }
        Ok(got)
    }

    fn write(&self, file: u64, data: &[u8], off: u64, next: &dyn Backend) -> io::Result<()> {
        if self.passes_through() {
            let _copy = self.copy.lock().unwrap_or_else(|e| e.into_inner());
            next.write_at(file, data, off)?;
            self.invalidate(file, off, data.len() as u64);
            return Ok(());
        }
        let mut rec = Vec::with_capacity(HEADER + data.len());
        rec.extend_from_slice(&MAGIC.to_le_bytes());
        rec.extend_from_slice(&[0; 4]);
        rec.extend_from_slice(&file.to_le_bytes());
        rec.extend_from_slice(&off.to_le_bytes());
        rec.extend_from_slice(&(data.len() as u32).to_le_bytes());
        rec.extend_from_slice(data);
        let crc = crc32c::crc32c(&rec[8..]);
        rec[4..8].copy_from_slice(&crc.to_le_bytes());
        // The lock orders appends and index updates the same way.
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let at = inner.tail;
        self.log.write_all_at(&rec, at)?;
        inner.tail = at + rec.len() as u64;
        inner.index.entry(file).or_default().insert(
            off,
            off + data.len() as u64,
            Extent {
                log_off: at + HEADER as u64,
                file_off: off,
            },
        );
        self.appends.fetch_add(1, Ordering::Relaxed);
        self.bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn dirty_files(&self) -> Vec<u64> {
        if !self.writes_back && self.reclaim_rate.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut files: Vec<u64> = inner.index.keys().copied().collect();
        files.sort_unstable();
        files
    }

    fn write_back_file(&self, file: u64, next: &dyn Backend) -> io::Result<()> {
        if self.writes_back || self.reclaim_rate.load(Ordering::Relaxed) > 0 {
            self.reclaim_file(file, next, u64::MAX)?;
        }
        Ok(())
    }

    fn retire(&self) {
        if self.writes_back {
            self.retired.store(true, Ordering::Relaxed);
        }
    }

    fn set_reclaim(&self, bytes_per_s: Option<u64>) {
        self.reclaim_rate
            .store(bytes_per_s.unwrap_or(0), Ordering::Relaxed);
    }

    fn reclaim_rate(&self) -> Option<u64> {
        Some(self.reclaim_rate.load(Ordering::Relaxed)).filter(|r| *r > 0)
    }

    fn reclaim_step(&self, file: u64, next: &dyn Backend, limit: u64) -> io::Result<u64> {
        self.reclaim_file(file, next, limit)
    }

    fn sync(&self, file: u64, next: &dyn Backend) -> io::Result<()> {
        self.log.sync_data()?;
        next.sync(file)
    }

    fn holds_data(&self) -> bool {
        true
    }

    fn keeps_data(&self) -> bool {
        !self.writes_back
    }

    fn invalidate(&self, file: u64, off: u64, len: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = self.drop_locked(&mut inner, file, off, off.saturating_add(len)) {
            // The index no longer holds the range; a replay of this log could bring it back.
            tracing::warn!(file, "log stage: recording a dropped range: {e}");
        }
    }

    fn truncate(&self, file: u64, size: u64) {
        self.invalidate(file, size, u64::MAX - size);
    }

    fn counters(&self) -> StageStats {
        StageStats {
            kind: "log".into(),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            dirty_bytes: self.held_bytes(),
            reclaimed_bytes: self.reclaimed_bytes.load(Ordering::Relaxed),
            ..StageStats::default()
        }
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "log",
            "appends": self.appends.load(Ordering::Relaxed),
            "log_bytes": self.log_len(),
            "remote": matches!(self.log, LogFile::Remote { .. }),
            "held_bytes": self.held_bytes(),
            "reclaimed_bytes": self.reclaimed_bytes.load(Ordering::Relaxed),
            "reclaim_bytes_per_s": self.reclaim_rate.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::testing::MemFiles;

    #[test]
    fn writes_become_appends_and_reads_overlay_them() {
        let dir = tempfile::tempdir().unwrap();
        let mem = MemFiles::default();
        mem.write_at(1, &[b'o'; 100], 0).unwrap();
        let w0 = mem.writes.load(std::sync::atomic::Ordering::Relaxed);
        let lw = LogWriter::open(dir.path()).unwrap();
        lw.write(1, b"XYZ", 10, &mem).unwrap();
        lw.write(1, b"ab", 11, &mem).unwrap();
        // Nothing reached the file below; the log grew by two records.
        assert_eq!(mem.writes.load(std::sync::atomic::Ordering::Relaxed), w0);
        assert_eq!(lw.log_len(), (2 * HEADER + 5) as u64);
        let mut buf = [0u8; 20];
        assert_eq!(lw.read(1, &mut buf, 5, &mem).unwrap(), 20);
        assert_eq!(&buf, b"oooooXaboooooooooooo");
    }

    #[test]
    fn replay_recovers_and_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mem = MemFiles::default();
        mem.write_at(7, &[0u8; 64], 0).unwrap();
        {
            let lw = LogWriter::open(dir.path()).unwrap();
            lw.write(7, b"first", 0, &mem).unwrap();
            lw.write(7, b"second", 20, &mem).unwrap();
        }
        // Tear the last record: its crc no longer matches.
        let path = dir.path().join("stage.log");
        let len = std::fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 2).unwrap();
        let lw = LogWriter::open(dir.path()).unwrap();
        let mut buf = [0u8; 26];
        lw.read(7, &mut buf, 0, &mem).unwrap();
        assert_eq!(&buf[..5], b"first");
        assert_eq!(&buf[20..26], &[0u8; 6]);
        assert_eq!(lw.log_len(), (HEADER + 5) as u64);
        lw.write(7, b"again", 20, &mem).unwrap();
        drop(lw);
        let lw = LogWriter::open(dir.path()).unwrap();
        lw.read(7, &mut buf, 0, &mem).unwrap();
        assert_eq!(&buf[20..25], b"again");
    }

    #[test]
    fn what_left_the_log_stays_out_of_it_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mem = MemFiles::default();
        mem.write_at(3, &[0u8; 300], 0).unwrap();
        let lw = LogWriter::open(dir.path()).unwrap();
        lw.write(3, &[1u8; 100], 0, &mem).unwrap();
        lw.write(3, &[2u8; 100], 100, &mem).unwrap();
        lw.write(3, &[3u8; 100], 200, &mem).unwrap();
        // A reclaim copies back 50 bytes; a write passing through replaces 150..250.
        lw.set_reclaim(Some(1));
        assert_eq!(lw.reclaim_file(3, &mem, 50).unwrap(), 50);
        lw.write(3, &[9u8; 100], 150, &mem).unwrap();
        let held = lw.held_bytes();
        assert_eq!(held, 300 - 50 - 100);
        drop(lw);
        // Restarted: the log holds what it held, and the newer write is not covered by an
        // older copy.
        let lw = LogWriter::open(dir.path()).unwrap();
        assert_eq!(lw.held_bytes(), held);
        let mut buf = [0u8; 300];
        assert_eq!(lw.read(3, &mut buf, 0, &mem).unwrap(), 300);
        let mut want = [1u8; 300];
        want[100..150].fill(2);
        want[150..250].fill(9);
        want[250..].fill(3);
        assert_eq!(buf, want);
        // The rest reclaimed after the restart: the file below holds everything.
        lw.set_reclaim(Some(1));
        assert_eq!(lw.reclaim_file(3, &mem, u64::MAX).unwrap(), held);
        assert_eq!(lw.held_bytes(), 0);
        let mut below = [0u8; 300];
        mem.read_at(3, &mut below, 0).unwrap();
        assert_eq!(below, want);
        drop(lw);
        assert_eq!(LogWriter::open(dir.path()).unwrap().held_bytes(), 0);
    }
}
