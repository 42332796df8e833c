//! Warm restart: the persisted form of an engine's DRAM state (its index), as CacheLib's
//! `BlockCache::persist/recover` and `BigHash::persist/recover` do it.
//!
//! The objects are on flash already; what a restart loses is the DRAM that finds them (the
//! log's index and region order, the Bloom filters of the buckets, Kangaroo's KLog index and
//! KSet bits, FairyWREN's FwLog index and buffers and FwSets' subset pages, page owners,
//! filters and hit bits). Each engine writes that state with `save(&self, w)` and a freshly built engine
//! of the same configuration takes it back with `load(&mut self, r)` (each engine also has
//! `restore(config, r) -> Result<Self>`, which is `new` then `load`).
//!
//! A persisted index is one blob:
//!
//! ```text
//! magic "LCHCIDX\n" | version u32 | kind u8 | shape: count u16, (name_len u8, name, value u64)*
//! | body_len u64 | body | crc32c u32 (of everything before it)
//! ```
//!
//! The *shape* is every number that decides where data lies on flash: the device's size and
//! block, the span, the region, bucket or set geometry. A restore whose new engine has another
//! shape is refused naming the field, as is a blob of another kind, another version, a
//! truncated one or one failing its checksum; the caller then starts empty. Policies that do
//! not move data (placement handles, eviction, admission) come from the new configuration.
//!
//! An index describes the device only as it was at the save. Using it after the device
//! changed (the cache ran on and crashed) would find older copies of objects, so it must be
//! used at most once: [`IndexFile`] removes the file when it hands it out, before the engine
//! writes anything, as CacheLib's `Driver::recover` invalidates its metadata after recovery.
//! A crash at any later point leaves no index, and the next start is cold. A cold start on a
//! used device reads as empty: the engines with no DRAM index (set-associative, KSet) ignore
//! any bucket they have not written themselves (`bloom::BucketBlooms`), so no object of an
//! earlier life comes back.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::dev::Span;
use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"LCHCIDX\n";
/// Bumped whenever any engine's body changes.
pub const VERSION: u32 = 1;

/// Which engine a blob belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Loc = 1,
    SetAssoc = 2,
    Kangaroo = 3,
    Hybrid = 4,
    FairyWren = 5,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        [
            Kind::Loc,
            Kind::SetAssoc,
            Kind::Kangaroo,
            Kind::Hybrid,
            Kind::FairyWren,
        ]
        .into_iter()
        .find(|k| *k as u8 == b)
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Loc => "large-object cache",
            Kind::SetAssoc => "set-associative cache",
            Kind::Kangaroo => "Kangaroo",
            Kind::Hybrid => "hybrid cache",
            Kind::FairyWren => "FairyWREN",
        }
    }
}

fn refused(kind: Kind, why: impl std::fmt::Display) -> Error {
    Error::Persist(format!("{} index refused: {why}", kind.name()))
}

/// The numbers that place data on flash; see the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape(pub Vec<(&'static str, u64)>);

impl Shape {
    /// The device and span every engine's shape starts with.
    pub fn of_span(span: &Span) -> Shape {
        let geo = crate::dev::lock(&span.device).geometry().clone();
        Shape(vec![
            ("device capacity bytes", geo.capacity_bytes),
            ("device block size", u64::from(geo.block_size)),
            ("span offset", span.offset),
            ("span length", span.len),
        ])
    }

    pub fn with(mut self, name: &'static str, value: u64) -> Shape {
        self.0.push((name, value));
        self
    }
}

/// Little-endian writer of a blob's body.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Length-prefixed bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    pub fn u16s(&mut self, v: &[u16]) {
        self.u64(v.len() as u64);
        v.iter().for_each(|&x| self.u16(x));
    }
    pub fn u32s(&mut self, v: impl ExactSizeIterator<Item = u32>) {
        self.u64(v.len() as u64);
        v.for_each(|x| self.u32(x));
    }
    pub fn u64s(&mut self, v: &[u64]) {
        self.u64(v.len() as u64);
        v.iter().for_each(|&x| self.u64(x));
    }
}

/// Reader of a body whose checksum has been verified; a short or inconsistent body is an
/// error naming the engine and the field, never a panic.
pub struct Dec<'a> {
    kind: Kind,
    buf: &'a [u8],
    at: usize,
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(self.bad(format!("body ends inside {what}")));
        };
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    pub fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    /// A count of items of `size` bytes each that the rest of the body can hold.
    fn count(&mut self, size: usize, what: &str) -> Result<usize> {
        let n = self.u64(what)?;
        let left = (self.buf.len() - self.at) as u64;
        if n.saturating_mul(size as u64) > left {
            return Err(self.bad(format!("{what}: {n} items do not fit the body")));
        }
        Ok(n as usize)
    }
    pub fn bytes(&mut self, what: &str) -> Result<&'a [u8]> {
        let n = self.count(1, what)?;
        self.take(n, what)
    }
    pub fn u16s(&mut self, what: &str) -> Result<Vec<u16>> {
        let n = self.count(2, what)?;
        (0..n).map(|_| self.u16(what)).collect()
    }
    pub fn u32s(&mut self, what: &str) -> Result<Vec<u32>> {
        let n = self.count(4, what)?;
        (0..n).map(|_| self.u32(what)).collect()
    }
    pub fn u64s(&mut self, what: &str) -> Result<Vec<u64>> {
        let n = self.count(8, what)?;
        (0..n).map(|_| self.u64(what)).collect()
    }
    /// An error saying the saved state is inconsistent (`what` says where).
    pub fn bad(&self, what: impl std::fmt::Display) -> Error {
        refused(self.kind, format!("inconsistent saved state: {what}"))
    }
    /// Checks that the whole body was read.
    pub fn finish(self) -> Result<()> {
        if self.at != self.buf.len() {
            return Err(self.bad(format!("{} bytes left over", self.buf.len() - self.at)));
        }
        Ok(())
    }
}

/// Writes one blob.
pub fn write(w: &mut dyn Write, kind: Kind, shape: &Shape, body: &[u8]) -> Result<()> {
    let mut out = Vec::with_capacity(body.len() + 256);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(kind as u8);
    out.extend_from_slice(&(shape.0.len() as u16).to_le_bytes());
    for (name, value) in &shape.0 {
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&value.to_le_bytes());
    }
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    w.write_all(&out)
        .map_err(|e| Error::Persist(format!("writing the {} index: {e}", kind.name())))
}

/// Reads one blob of `kind` whose shape must equal `shape`; returns its body (the caller
/// decodes it with [`Dec`] via [`decode`]). Reads exactly the blob's bytes, so blobs can
/// follow each other in one stream.
pub fn read(r: &mut dyn Read, kind: Kind, shape: &Shape) -> Result<Vec<u8>> {
    let io = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            refused(kind, "truncated (the file ends before the index does)")
        } else {
            refused(kind, format!("reading it: {e}"))
        }
    };
    let mut all = vec![0u8; 15];
    r.read_exact(&mut all).map_err(io)?;
    if &all[..8] != MAGIC {
        return Err(refused(kind, "not a Lachesis cache index (wrong magic)"));
    }
    let version = u32::from_le_bytes(all[8..12].try_into().unwrap());
    if version != VERSION {
        return Err(refused(
            kind,
            format!("format version {version}, this build reads {VERSION}"),
        ));
    }
    let saved_kind = all[12];
    let fields = u16::from_le_bytes(all[13..15].try_into().unwrap());
    let mut saved = Vec::with_capacity(usize::from(fields));
    for _ in 0..fields {
        let at = all.len();
        all.resize(at + 1, 0);
        r.read_exact(&mut all[at..]).map_err(io)?;
        let n = usize::from(all[at]);
        all.resize(at + 1 + n + 8, 0);
        r.read_exact(&mut all[at + 1..]).map_err(io)?;
        let name = String::from_utf8_lossy(&all[at + 1..at + 1 + n]).into_owned();
        let value = u64::from_le_bytes(all[at + 1 + n..].try_into().unwrap());
        saved.push((name, value));
    }
    let at = all.len();
    all.resize(at + 8, 0);
    r.read_exact(&mut all[at..]).map_err(io)?;
    let body_len = u64::from_le_bytes(all[at..].try_into().unwrap());
    // Read the body in pieces so that a damaged length cannot make us allocate it up front.
    let start = all.len();
    let mut body = Vec::new();
    r.take(body_len).read_to_end(&mut body).map_err(io)?;
    if (body.len() as u64) < body_len {
        return Err(refused(
            kind,
            format!(
                "truncated: {body_len} bytes of state announced, {} present",
                body.len()
            ),
        ));
    }
    all.extend_from_slice(&body);
    drop(body);
    let mut crc = [0u8; 4];
    r.read_exact(&mut crc).map_err(io)?;
    if crc32c::crc32c(&all) != u32::from_le_bytes(crc) {
        return Err(refused(kind, "checksum mismatch (the file is damaged)"));
    }
    match Kind::from_u8(saved_kind) {
        Some(k) if k == kind => {}
        Some(k) => {
            return Err(refused(
                kind,
                format!("the file holds a {} index", k.name()),
            ))
        }
        None => return Err(refused(kind, format!("unknown engine kind {saved_kind}"))),
    }
    for (name, now) in &shape.0 {
        match saved.iter().find(|(n, _)| n == name) {
            Some((_, was)) if was == now => {}
            Some((_, was)) => {
                return Err(refused(
                    kind,
                    format!("{name} was {was} when saved, the new cache has {now}"),
                ))
            }
            None => return Err(refused(kind, format!("the saved index has no {name}"))),
        }
    }
    if let Some((name, _)) = saved
        .iter()
        .find(|(n, _)| !shape.0.iter().any(|(m, _)| m == n))
    {
        return Err(refused(kind, format!("the new cache has no {name}")));
    }
    all.drain(..start);
    Ok(all)
}

/// A decoder over a body [`read`] returned.
pub fn decode(kind: Kind, body: &[u8]) -> Dec<'_> {
    Dec {
        kind,
        buf: body,
        at: 0,
    }
}

/// Saves an engine's state: the body `body` encodes, as one blob of `kind` and `shape`.
pub fn save_engine(
    w: &mut dyn Write,
    kind: Kind,
    shape: &Shape,
    body: impl FnOnce(&mut Enc),
) -> Result<()> {
    let mut e = Enc::default();
    body(&mut e);
    write(w, kind, shape, &e.0)
}

/// Loads a blob [`save_engine`] wrote into a freshly built engine (`stats`: its counters, so
/// one that served requests refuses): `body` decodes the whole body or fails, and the caller
/// takes the decoded state only then.
pub fn load_engine<T>(
    r: &mut dyn Read,
    kind: Kind,
    shape: &Shape,
    stats: &crate::EngineStats,
    body: impl FnOnce(&mut Dec) -> Result<T>,
) -> Result<T> {
    check_fresh(kind, stats)?;
    let bytes = read(r, kind, shape)?;
    let mut d = decode(kind, &bytes);
    let out = body(&mut d)?;
    d.finish()?;
    Ok(out)
}

/// Refuses to load into an engine that has already served requests: its flash may no longer
/// match the saved index, and its own DRAM state would be thrown away.
pub fn check_fresh(kind: Kind, stats: &crate::EngineStats) -> Result<()> {
    if stats.sets + stats.deletes + stats.gets > 0 {
        return Err(refused(
            kind,
            "the engine has served requests already; load into a freshly built one",
        ));
    }
    Ok(())
}

/// Where a cache's index is kept across a restart, used at most once (module documentation).
pub struct IndexFile {
    path: PathBuf,
}

impl IndexFile {
    pub fn new(path: impl Into<PathBuf>) -> IndexFile {
        IndexFile { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the index atomically (a temporary file, synced, renamed over the path, the
    /// directory synced), so a crash during the save leaves either no index or a whole one.
    pub fn save(&self, save: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
        let io = |what: &str, e: std::io::Error| {
            Error::Persist(format!("{what} {}: {e}", self.path.display()))
        };
        let tmp = self.path.with_extension("tmp");
        let file = std::fs::File::create(&tmp).map_err(|e| io("creating", e))?;
        let mut w = std::io::BufWriter::new(file);
        save(&mut w)?;
        let file = w.into_inner().map_err(|e| io("writing", e.into_error()))?;
        file.sync_all().map_err(|e| io("syncing", e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| io("renaming into", e))?;
        self.sync_dir()
    }

    /// The saved index, removed from disk before it is returned (durably), or `None` when there
    /// is none (first start, or the last run did not shut down cleanly).
    pub fn take(&self) -> Result<Option<Vec<u8>>> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::Persist(format!(
                    "reading {}: {e}",
                    self.path.display()
                )))
            }
        };
        std::fs::remove_file(&self.path)
            .map_err(|e| Error::Persist(format!("removing {}: {e}", self.path.display())))?;
        self.sync_dir()?;
        Ok(Some(bytes))
    }

    fn sync_dir(&self) -> Result<()> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::Persist(format!("syncing {}: {e}", dir.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape(vec![("a", 1), ("b", 2)])
    }

    fn blob() -> Vec<u8> {
        let mut out = Vec::new();
        write(&mut out, Kind::Loc, &shape(), b"state").unwrap();
        out
    }

    fn err(r: Result<Vec<u8>>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn round_trip_and_every_refusal_says_why() {
        let b = blob();
        assert_eq!(read(&mut &b[..], Kind::Loc, &shape()).unwrap(), b"state");
        for cut in [0, 5, 20, b.len() - 3] {
            assert!(err(read(&mut &b[..cut], Kind::Loc, &shape())).contains("truncated"));
        }
        let mut bad = b.clone();
        bad[b.len() - 6] ^= 1;
        assert!(err(read(&mut &bad[..], Kind::Loc, &shape())).contains("checksum"));
        assert!(err(read(
            &mut &b"hello world, not an index"[..],
            Kind::Loc,
            &shape()
        ))
        .contains("wrong magic"));
        assert!(err(read(&mut &b[..], Kind::SetAssoc, &shape())).contains("large-object"));
        let other = Shape(vec![("a", 1), ("b", 3)]);
        let e = err(read(&mut &b[..], Kind::Loc, &other));
        assert!(e.contains("b was 2 when saved, the new cache has 3"), "{e}");
        let more = shape().with("c", 0);
        assert!(err(read(&mut &b[..], Kind::Loc, &more)).contains("no c"));
        let mut v2 = b.clone();
        v2[8] = 9;
        assert!(err(read(&mut &v2[..], Kind::Loc, &shape())).contains("version 9"));
    }

    #[test]
    fn decoder_never_reads_past_the_body() {
        let mut e = Enc::default();
        e.u64s(&[1, 2, 3]);
        e.u8(7);
        let mut d = decode(Kind::Loc, &e.0);
        assert_eq!(d.u64s("x").unwrap(), vec![1, 2, 3]);
        assert_eq!(d.u8("y").unwrap(), 7);
        assert!(d
            .u8("z")
            .unwrap_err()
            .to_string()
            .contains("body ends inside z"));
        let huge = u64::MAX.to_le_bytes();
        assert!(decode(Kind::Loc, &huge).u64s("w").is_err());
    }

    #[test]
    fn index_file_is_used_at_most_once() {
        let dir = tempfile::tempdir().unwrap();
        let f = IndexFile::new(dir.path().join("idx"));
        assert!(f.take().unwrap().is_none());
        f.save(|w| write(w, Kind::Loc, &shape(), b"s")).unwrap();
        let got = f.take().unwrap().unwrap();
        assert_eq!(read(&mut &got[..], Kind::Loc, &shape()).unwrap(), b"s");
        assert!(f.take().unwrap().is_none(), "a taken index is gone");
    }
}
