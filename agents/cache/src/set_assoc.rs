//! Set-associative small-object cache: CacheLib's BigHash.
//!
//! A key's hash picks one 4 KiB bucket; the bucket holds its objects oldest first and is
//! rewritten whole on every insert or delete (FIFO within the bucket). A small Bloom filter per
//! bucket in DRAM answers most misses without reading flash. DRAM is only the filters: a few
//! bits per object, at the price of one bucket write per insert.

use std::io::{Read, Write};

use lachesis_device::PlacementHandle;

use crate::bloom::BucketBlooms;
use crate::dev::Span;
use crate::engine::{Engine, EngineStats, PartStats};
use crate::object::{self, key_hash};
use crate::persist::{self, Kind, Shape};
use crate::{Error, Result};

/// Configuration of a [`SetAssoc`].
#[derive(Clone)]
pub struct SetAssocConfig {
    pub span: Span,
    pub handle: PlacementHandle,
    /// Bucket size: a multiple of the device block (4 KiB by default).
    pub bucket_bytes: u32,
    /// Bloom filter bits per bucket (0 = no filters); CacheLib's default is 8 bytes.
    pub bloom_bits: u32,
    pub bloom_hashes: u32,
}

impl SetAssocConfig {
    pub fn new(span: Span, handle: PlacementHandle) -> SetAssocConfig {
        SetAssocConfig {
            span,
            handle,
            bucket_bytes: 4096,
            bloom_bits: 64,
            bloom_hashes: 4,
        }
    }
}

/// Bucket header: object count (u16) and bytes used after the header (u16).
const BUCKET_HEADER: usize = 4;

/// The set-associative cache.
pub struct SetAssoc {
    span: Span,
    handle: PlacementHandle,
    bucket_bytes: usize,
    buckets: u64,
    blooms: BucketBlooms,
    bloom_bits: u32,
    bloom_hashes: u32,
    page: Vec<u8>,
    stats: EngineStats,
}

/// The objects of one bucket, oldest first.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

impl SetAssoc {
    pub fn new(config: SetAssocConfig) -> Result<SetAssoc> {
        let geo = config.span.check("set-associative cache")?;
        let bucket_bytes = config.bucket_bytes as usize;
        if bucket_bytes == 0
            || !bucket_bytes.is_multiple_of(geo.block_size as usize)
            || bucket_bytes > usize::from(u16::MAX)
        {
            return Err(Error::Config(format!(
                "set-associative cache: bucket of {bucket_bytes} bytes must be a multiple of the \
                 {}-byte block and below 64 KiB",
                geo.block_size
            )));
        }
        geo.check_handle(config.handle)?;
        let buckets = config.span.len / bucket_bytes as u64;
        let blooms = BucketBlooms::new(buckets as usize, config.bloom_bits, config.bloom_hashes);
        Ok(SetAssoc {
            span: config.span,
            handle: config.handle,
            bucket_bytes,
            buckets,
            blooms,
            bloom_bits: config.bloom_bits,
            bloom_hashes: config.bloom_hashes,
            page: vec![0; bucket_bytes],
            stats: EngineStats::default(),
        })
    }

    /// A cache built from `config` with the index [`Engine::save`] wrote (see `persist`).
    pub fn restore(config: SetAssocConfig, r: &mut dyn Read) -> Result<SetAssoc> {
        let mut e = SetAssoc::new(config)?;
        Engine::load(&mut e, r)?;
        Ok(e)
    }

    fn shape(&self) -> Shape {
        Shape::of_span(&self.span)
            .with("bucket bytes", self.bucket_bytes as u64)
            .with("buckets", self.buckets)
            .with("Bloom bits per bucket", u64::from(self.bloom_bits))
            .with("Bloom hashes", u64::from(self.bloom_hashes))
    }

    /// Largest object (key + value) a bucket holds.
    pub fn max_object(&self) -> usize {
        self.bucket_bytes - BUCKET_HEADER - object::HEADER
    }

    fn bucket_of(&self, h: u64) -> u64 {
        h % self.buckets
    }

    fn maybe_in(&self, bucket: u64, h: u64) -> bool {
        self.blooms.may_contain(bucket as usize, h)
    }

    /// Reads a bucket into `self.page`; one this cache never wrote reads as empty (`bloom`).
    fn read_bucket(&mut self, bucket: u64) -> Result<()> {
        if !self.blooms.written(bucket as usize) {
            self.page.fill(0);
            return Ok(());
        }
        let off = bucket * self.bucket_bytes as u64;
        self.span.read(off, &mut self.page)
    }

    /// Parses the bucket in `self.page`. Parsing stops at the first object failing its
    /// checksum (its length cannot be trusted); `corrupt` says whether that happened.
    fn parse(&self) -> (Entries, bool) {
        let count = u16::from_le_bytes([self.page[0], self.page[1]]) as usize;
        let used = u16::from_le_bytes([self.page[2], self.page[3]]) as usize;
        let end = (BUCKET_HEADER + used).min(self.page.len());
        let mut at = BUCKET_HEADER;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            match object::decode(&self.page[at..end]) {
                Ok(d) => {
                    out.push((d.key.to_vec(), d.value.to_vec()));
                    at += d.len;
                }
                Err(_) => return (out, true),
            }
        }
        (out, false)
    }

    fn write_bucket(&mut self, bucket: u64, entries: &Entries) -> Result<()> {
        let mut body = Vec::with_capacity(self.bucket_bytes);
        body.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        body.extend_from_slice(&[0, 0]);
        for (k, v) in entries {
            object::encode(k, v, &mut body);
        }
        let used = (body.len() - BUCKET_HEADER) as u16;
        body[2..4].copy_from_slice(&used.to_le_bytes());
        body.resize(self.bucket_bytes, 0);
        self.span
            .write(bucket * self.bucket_bytes as u64, &body, self.handle)?;
        self.stats.flash_bytes_written += self.bucket_bytes as u64;
        self.blooms
            .rebuild(bucket as usize, entries.iter().map(|(k, _)| key_hash(k)));
        Ok(())
    }

    /// Reads and parses a bucket, counting a corrupt one and the objects it lost.
    fn load(&mut self, bucket: u64) -> Result<(Entries, bool)> {
        self.read_bucket(bucket)?;
        let count = u16::from_le_bytes([self.page[0], self.page[1]]) as u64;
        let (entries, corrupt) = self.parse();
        if corrupt {
            self.stats.corrupt_reads += 1;
            self.stats.objects = self
                .stats
                .objects
                .saturating_sub(count - entries.len() as u64);
        }
        Ok((entries, corrupt))
    }
}

impl Engine for SetAssoc {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.stats.gets += 1;
        let h = key_hash(key);
        let bucket = self.bucket_of(h);
        if !self.maybe_in(bucket, h) {
            return Ok(None);
        }
        self.read_bucket(bucket)?;
        let count = u16::from_le_bytes([self.page[0], self.page[1]]) as usize;
        let used = u16::from_le_bytes([self.page[2], self.page[3]]) as usize;
        let end = (BUCKET_HEADER + used).min(self.page.len());
        let mut at = BUCKET_HEADER;
        for _ in 0..count {
            match object::decode(&self.page[at..end]) {
                Ok(d) if d.key == key => {
                    self.stats.hits += 1;
                    return Ok(Some(d.value.to_vec()));
                }
                Ok(d) => at += d.len,
                Err(_) => {
                    self.stats.corrupt_reads += 1;
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.stats.sets += 1;
        let h = key_hash(key);
        let bucket = self.bucket_of(h);
        let fits = key.len() <= object::MAX_KEY
            && object::encoded_len(key, value) <= self.max_object() + object::HEADER;
        if !fits {
            self.stats.rejected_sets += 1;
            // The old value must not outlive a declined set.
            if self.maybe_in(bucket, h) {
                let (mut entries, corrupt) = self.load(bucket)?;
                let before = entries.len();
                entries.retain(|(k, _)| k != key);
                if entries.len() != before || corrupt {
                    self.stats.objects = self
                        .stats
                        .objects
                        .saturating_sub((before - entries.len()) as u64);
                    self.write_bucket(bucket, &entries)?;
                }
            }
            return Ok(false);
        }
        // Read even when the filter says "absent": the new object is appended to the others.
        let (mut entries, _) = self.load(bucket)?;
        let before = entries.len();
        entries.retain(|(k, _)| k != key);
        self.stats.objects = self
            .stats
            .objects
            .saturating_sub((before - entries.len()) as u64);
        entries.push((key.to_vec(), value.to_vec()));
        self.stats.objects += 1;
        let capacity = self.bucket_bytes - BUCKET_HEADER;
        let mut total: usize = entries.iter().map(|(k, v)| object::encoded_len(k, v)).sum();
        let mut evict = 0;
        while total > capacity {
            total -= object::encoded_len(&entries[evict].0, &entries[evict].1);
            evict += 1;
        }
        entries.drain(..evict);
        self.stats.evictions += evict as u64;
        self.stats.objects = self.stats.objects.saturating_sub(evict as u64);
        self.stats.app_bytes_written += (key.len() + value.len()) as u64;
        self.write_bucket(bucket, &entries)?;
        Ok(true)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.stats.deletes += 1;
        let h = key_hash(key);
        let bucket = self.bucket_of(h);
        if !self.maybe_in(bucket, h) {
            return Ok(false);
        }
        let (mut entries, corrupt) = self.load(bucket)?;
        let before = entries.len();
        entries.retain(|(k, _)| k != key);
        let found = entries.len() != before;
        if found || corrupt {
            self.stats.objects = self
                .stats
                .objects
                .saturating_sub((before - entries.len()) as u64);
            self.write_bucket(bucket, &entries)?;
        }
        Ok(found)
    }

    fn stats(&self) -> EngineStats {
        self.stats.clone()
    }

    fn parts(&self) -> Vec<PartStats> {
        vec![PartStats {
            name: "sets".into(),
            capacity_bytes: self.buckets * self.bucket_bytes as u64,
            bytes_written: self.stats.flash_bytes_written,
            log: None,
        }]
    }

    fn dram_bytes(&self) -> usize {
        self.blooms.bytes() + self.page.capacity()
    }

    /// The buckets are on flash; the filters (and which buckets this cache wrote) are saved.
    fn save(&self, w: &mut dyn Write) -> Result<()> {
        persist::save_engine(w, Kind::SetAssoc, &self.shape(), |e| {
            e.u64(self.stats.objects);
            self.blooms.save(e);
        })
    }

    fn load(&mut self, r: &mut dyn Read) -> Result<()> {
        let mut blooms =
            BucketBlooms::new(self.buckets as usize, self.bloom_bits, self.bloom_hashes);
        let objects = persist::load_engine(r, Kind::SetAssoc, &self.shape(), &self.stats, |d| {
            let objects = d.u64("object count")?;
            blooms.load(d)?;
            Ok(objects)
        })?;
        self.blooms = blooms;
        self.stats.objects = objects;
        Ok(())
    }
}
