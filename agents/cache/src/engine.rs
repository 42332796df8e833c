//! The interface every flash cache engine implements, so the hybrid cache, the cachebench and
//! the data path can drive a log, a set-associative cache or Kangaroo interchangeably.

/// Counters an engine keeps about itself; cachebench derives miss ratio and ALWA from them,
/// and the KV front end reports them per engine part (hence `Serialize`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    /// Sets the engine declined to store (admission policy, object too large).
    pub rejected_sets: u64,
    pub deletes: u64,
    pub evictions: u64,
    /// Bytes of keys and values the application asked to store.
    pub app_bytes_written: u64,
    /// Bytes the engine wrote to the device (ALWA = flash_bytes_written / app_bytes_written).
    pub flash_bytes_written: u64,
    /// Reads that found data failing its checksum and were answered as misses.
    pub corrupt_reads: u64,
    /// Objects currently indexed.
    pub objects: u64,
}

/// Sums two engines' counters (parts of one cache, or an engine and the ones it replaced).
impl std::ops::AddAssign<&EngineStats> for EngineStats {
    fn add_assign(&mut self, b: &EngineStats) {
        self.gets += b.gets;
        self.hits += b.hits;
        self.sets += b.sets;
        self.rejected_sets += b.rejected_sets;
        self.deletes += b.deletes;
        self.evictions += b.evictions;
        self.app_bytes_written += b.app_bytes_written;
        self.flash_bytes_written += b.flash_bytes_written;
        self.corrupt_reads += b.corrupt_reads;
        self.objects += b.objects;
    }
}

/// One part of an engine (a log, a set store) and what it wrote, so a benchmark can tell
/// whether the engine reached steady state and where its flash writes go.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PartStats {
    /// "log" (the large-object log), "klog"/"kset" (Kangaroo), "fwlog"/"fwsets" (FairyWREN),
    /// "sets" (set-associative); a hybrid prefixes "large."/"small.".
    pub name: String,
    /// Bytes of the device this part uses (writes in, over time).
    pub capacity_bytes: u64,
    /// Bytes this part wrote to the device.
    pub bytes_written: u64,
    /// For a log: how it cycles through its units (`None` for a set store).
    pub log: Option<LogUnits>,
}

/// A log's units (regions, segments, erase units) and how many it wrote and reclaimed: the
/// log wrapped once when it wrote as many units as it has, and evicts once it reclaims them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LogUnits {
    pub units: u64,
    pub units_written: u64,
    /// Units the log emptied to reuse (regions evicted, segments flushed, erase units erased).
    pub units_reclaimed: u64,
}

/// The numeric fields of a counters struct, by name (for [`Engine::counters`]).
pub fn named_counters(stats: &impl serde::Serialize) -> Vec<(String, u64)> {
    match serde_json::to_value(stats) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .filter_map(|(k, v)| v.as_u64().map(|v| (k, v)))
            .collect(),
        _ => Vec::new(),
    }
}

/// What [`Engine::lookup`] found: the answer, or a device read to do without the lock the
/// engine is driven under.
pub enum Lookup {
    /// A miss, or the value (from memory, or read under the lock by an engine that cannot
    /// read otherwise).
    Done(Option<Vec<u8>>),
    /// Do [`PendingRead::read`] with the lock released, then hand its result to
    /// [`Engine::finish`] under the lock again.
    Read(PendingRead),
}

/// A device read an engine planned under its owner's lock, done without it: many threads'
/// hits then reach the device at once. The engine checks at [`Engine::finish`] that the
/// object was not moved, replaced, deleted or its space reused meanwhile; if it was, the
/// bytes read are never used.
pub struct PendingRead {
    pub(crate) reads: crate::dev::SpanReads,
    /// Span-relative, block-aligned start and length of the read; the object is `len`
    /// bytes from `skip` in it.
    pub(crate) at: u64,
    pub(crate) extent: usize,
    pub(crate) skip: usize,
    pub(crate) len: usize,
    pub(crate) stamp: Stamp,
}

/// An engine's record of where an object was and which use of its space that was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) hash: u64,
    pub(crate) region: u32,
    pub(crate) offset: u32,
    pub(crate) len: u32,
    /// The region's generation: bumped whenever its space is evicted or reused.
    pub(crate) generation: u64,
}

/// The most [`PendingRead::read_together`] reads in one device IO.
const MAX_READ_TOGETHER: u64 = 1 << 20;

impl PendingRead {
    /// Reads the object's bytes from the device (no lock taken).
    pub fn read(&self) -> crate::Result<Vec<u8>> {
        let mut tmp = vec![0; self.extent];
        self.reads.read(self.at, &mut tmp)?;
        tmp.drain(..self.skip);
        tmp.truncate(self.len);
        Ok(tmp)
    }

    /// [`PendingRead::read`] of each, in order, with one device IO for objects that lie one
    /// after another on the device: objects written together (a file's adjacent blocks, a
    /// page of two blocks) sit side by side in a log, and one IO costs about what each of
    /// them does alone. Each result is what its own read would have given.
    pub fn read_together(reads: &[&PendingRead]) -> Vec<crate::Result<Vec<u8>>> {
        let mut out = Vec::with_capacity(reads.len());
        let mut i = 0;
        while i < reads.len() {
            let first = reads[i];
            let mut end = first.at + first.extent as u64;
            let mut j = i + 1;
            while let Some(r) = reads.get(j).filter(|r| {
                r.reads.same_as(&first.reads)
                    && (first.at..=end).contains(&r.at)
                    && r.at + r.extent as u64 - first.at <= MAX_READ_TOGETHER
            }) {
                end = end.max(r.at + r.extent as u64);
                j += 1;
            }
            if j == i + 1 {
                out.push(first.read());
            } else {
                let mut tmp = vec![0; (end - first.at) as usize];
                match first.reads.read(first.at, &mut tmp) {
                    Ok(()) => out.extend(reads[i..j].iter().map(|r| {
                        let from = (r.at - first.at) as usize + r.skip;
                        Ok(tmp[from..from + r.len].to_vec())
                    })),
                    // Each on its own, so that each gets its own bytes or error.
                    Err(_) => out.extend(reads[i..j].iter().map(|r| r.read())),
                }
            }
            i = j;
        }
        out
    }
}

/// A key-value cache on a block device. An engine is driven by one thread at a time
/// (`&mut self`); the hybrid cache shards and locks around it.
///
/// Engines share one device: each is built on a [`crate::dev::Span`] (a byte range of a
/// [`crate::dev::SharedDevice`], `Arc<Mutex<dyn BlockDevice + Send>>`) and writes with its own
/// placement handle(s), so a hybrid cache can put a small-object engine and the log side by
/// side (`hybrid::SmallFactory` builds the small engine from a `Span`). Tests and cachebench use
/// [`crate::dev::DataSim`], the simulated FDP SSD with its data in memory.
///
/// Resizing: [`Engine::resize`] changes how much of its span an engine uses while it runs,
/// keeping what still fits. Engines whose layout depends on their size (Kangaroo, the
/// set-associative cache, the hybrid's small-object part) cannot; they answer `Ok(false)` and
/// their owner rebuilds them at the new size (empty).
pub trait Engine: Send {
    /// The value stored under `key`, or `None` on a miss (also when the data fails its checksum).
    fn get(&mut self, key: &[u8]) -> crate::Result<Option<Vec<u8>>>;
    /// Stores `value` under `key`, replacing any older value. Returns `false` when the engine
    /// declined to store it (admission, size); the old value is then gone too, so no reader
    /// sees it after this call.
    fn set(&mut self, key: &[u8], value: &[u8]) -> crate::Result<bool>;
    /// Removes `key`; returns whether it was present.
    fn delete(&mut self, key: &[u8]) -> crate::Result<bool>;
    /// [`Engine::get`] in two steps, so that the owner can release its lock while the device
    /// reads: the value, or a read to do and hand to [`Engine::finish`]. Counted as one get.
    /// The default answers at once with `get`.
    fn lookup(&mut self, key: &[u8]) -> crate::Result<Lookup> {
        Ok(Lookup::Done(self.get(key)?))
    }
    /// Completes a [`Lookup::Read`] of `key` with what the read returned: the value if the
    /// object is still where and as it was read, else what a get finds now (read under the
    /// lock, not counted again). Only engines that plan reads are handed one.
    fn finish(
        &mut self,
        key: &[u8],
        read: PendingRead,
        bytes: crate::Result<Vec<u8>>,
    ) -> crate::Result<Option<Vec<u8>>> {
        let _ = (read, bytes);
        self.get(key)
    }
    fn stats(&self) -> EngineStats;
    /// Bytes of DRAM the engine's index and buffers use, counted from the real structures.
    fn dram_bytes(&self) -> usize;
    /// The engine's parts and what each wrote (empty when the engine does not say).
    fn parts(&self) -> Vec<PartStats> {
        Vec::new()
    }
    /// The engine's own counters (set writes by cause, objects moved, dropped...), by name:
    /// what a benchmark needs to explain its writes. Empty when the engine has none.
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Sizes fixed when the engine was built (sets, units, spare pages...), by name: what a
    /// benchmark reports beside the counters to say which cache it measured. Empty by default.
    fn layout(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Uses `bytes` of its span from now on (the span itself does not change): growing
    /// takes effect at once, shrinking evicts what lies past the new end. Returns `Ok(false)`,
    /// changing nothing, when the engine cannot resize in place (the default); an error when
    /// it can but not to that size.
    /// A device write the engine left to its owner (see `LocConfig::defer_seals`): do
    /// [`crate::RegionWrite::write`] with the owner's lock released, then [`Engine::wrote`]
    /// under it. Engines that write inside `set` have none.
    fn take_write(&mut self) -> Option<crate::RegionWrite> {
        None
    }
    /// After [`crate::RegionWrite::write`]: the written region takes its place.
    fn wrote(&mut self, _w: &crate::RegionWrite) -> crate::Result<()> {
        Ok(())
    }
    /// Completes any write left to the owner (waiting for it, or doing it here): before the
    /// engine is dropped or its space changes.
    fn settle(&mut self) -> crate::Result<()> {
        Ok(())
    }
    fn resize(&mut self, bytes: u64) -> crate::Result<bool> {
        let _ = bytes;
        Ok(false)
    }
    /// Writes the engine's DRAM state for a warm restart (`crate::persist`).
    fn save(&self, w: &mut dyn std::io::Write) -> crate::Result<()> {
        let _ = w;
        Err(crate::Error::Persist(
            "this engine cannot persist its index".into(),
        ))
    }
    /// Takes back a state [`Engine::save`] wrote, into a freshly built engine of the same
    /// shape; an error (wrong shape, damaged or truncated state) leaves the engine empty.
    fn load(&mut self, r: &mut dyn std::io::Read) -> crate::Result<()> {
        let _ = r;
        Err(crate::Error::Persist(
            "this engine cannot restore an index".into(),
        ))
    }
}
