//! How engines share one device, and the span of it each one owns.
//!
//! Several engines (the parts of a hybrid cache, several tenants' partitions) write through one
//! device, each to its own byte range and with its own placement handle, so the device is shared
//! behind a lock and every engine names the [`Span`] it owns.

use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use lachesis_device::nvme::logpage::FdpStats;
use lachesis_device::sim::{SimConfig, SimSsd};
use lachesis_device::{BlockDevice, ConcurrentRead, Geometry, PlacementHandle};

use crate::{Error, Result};

/// A device several engines write through.
pub type SharedDevice = Arc<Mutex<dyn BlockDevice + Send>>;

/// Wraps a device for sharing.
pub fn share<D: BlockDevice + Send + 'static>(device: D) -> SharedDevice {
    Arc::new(Mutex::new(device))
}

/// Locks a shared device. A poisoned lock means another engine panicked mid-IO; the device
/// itself is still consistent (every IO is checked before it runs), so carry on.
pub fn lock(device: &SharedDevice) -> MutexGuard<'_, dyn BlockDevice + Send + 'static> {
    device.lock().unwrap_or_else(|p| p.into_inner())
}

/// The byte range `[offset, offset + len)` of a shared device that one engine owns.
#[derive(Clone)]
pub struct Span {
    pub device: SharedDevice,
    pub offset: u64,
    pub len: u64,
}

impl Span {
    /// Checks that the span is block-aligned and inside the device; returns the geometry.
    pub fn check(&self, what: &str) -> Result<Geometry> {
        let geo = lock(&self.device).geometry().clone();
        let bs = u64::from(geo.block_size);
        if self.len == 0 || !self.offset.is_multiple_of(bs) || !self.len.is_multiple_of(bs) {
            return Err(Error::Config(format!(
                "{what}: span [{}, +{}) must be non-empty and a multiple of the {bs}-byte block size",
                self.offset, self.len
            )));
        }
        if self
            .offset
            .checked_add(self.len)
            .is_none_or(|end| end > geo.capacity_bytes)
        {
            return Err(Error::Config(format!(
                "{what}: span [{}, +{}) exceeds the device's {} bytes",
                self.offset, self.len, geo.capacity_bytes
            )));
        }
        Ok(geo)
    }

    pub fn read(&self, rel: u64, buf: &mut [u8]) -> Result<()> {
        Ok(lock(&self.device).read(self.offset + rel, buf)?)
    }

    pub fn write(&self, rel: u64, buf: &[u8], handle: PlacementHandle) -> Result<()> {
        Ok(lock(&self.device).write(self.offset + rel, buf, handle)?)
    }

    pub fn trim(&self, rel: u64, len: u64) -> Result<()> {
        Ok(lock(&self.device).trim(self.offset + rel, len)?)
    }

    /// Reads of the span without the device's lock, if its device can do them.
    pub fn concurrent_reads(&self) -> Option<SpanReads> {
        let reads = lock(&self.device).concurrent_reads()?;
        Some(SpanReads {
            reads,
            offset: self.offset,
        })
    }
}

/// Reads of a [`Span`] that many threads can do at once (no device lock).
#[derive(Clone)]
pub struct SpanReads {
    reads: Arc<dyn ConcurrentRead>,
    offset: u64,
}

impl SpanReads {
    pub fn read(&self, rel: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.reads.read_at(self.offset + rel, buf)?)
    }

    /// Whether both read the same bytes of the same device.
    pub fn same_as(&self, other: &SpanReads) -> bool {
        Arc::ptr_eq(&self.reads, &other.reads) && self.offset == other.offset
    }
}

/// The simulated FDP SSD with the data kept in memory: [`SimSsd`] does the placement, garbage
/// collection and DLWA accounting on metadata, this keeps the bytes so engines read back what
/// they wrote (checksums, keys) without a backing file's system calls.
pub struct DataSim {
    sim: SimSsd,
    /// Shared with [`DataSim::concurrent_reads`]'s readers (the write lock is only taken by
    /// the device's own writes and trims).
    data: Arc<RwLock<Vec<u8>>>,
    page: usize,
    /// Whether deallocations reach the simulator's mapping (see [`DataSim::ignore_deallocate`]).
    deallocate: bool,
    /// Pages ever written (one bit each) and how many: a benchmark is not at steady state
    /// before every address it uses was written at least once.
    ever_written: Vec<u64>,
    pages_ever_written: u64,
}

impl DataSim {
    pub fn new(config: SimConfig) -> Result<DataSim> {
        let sim = SimSsd::new(config)?;
        let cap = usize::try_from(sim.geometry().capacity_bytes)
            .map_err(|_| Error::Config("device too large for memory".into()))?;
        let page = sim.geometry().block_size as usize;
        Ok(DataSim {
            sim,
            data: Arc::new(RwLock::new(vec![0; cap])),
            page,
            deallocate: true,
            ever_written: vec![0; (cap / page).div_ceil(64)],
            pages_ever_written: 0,
        })
    }

    /// A conventional SSD under a cache that never discards: trimmed ranges still read as
    /// zeroes (the engines behave exactly as with deallocation), but the device is not told,
    /// so their pages stay valid for its garbage collection until overwritten.
    pub fn ignore_deallocate(&mut self) {
        self.deallocate = false;
    }

    /// The simulator underneath: FDP statistics, wear, invariants.
    pub fn sim(&self) -> &SimSsd {
        &self.sim
    }

    pub fn fdp_statistics(&self) -> FdpStats {
        self.sim.fdp_statistics()
    }

    /// Pages written at least once anywhere on the device.
    pub fn total_pages_ever_written(&self) -> u64 {
        self.pages_ever_written
    }

    fn mark_written(&mut self, first: u64, count: u64) {
        for p in first..first + count {
            let (word, bit) = ((p / 64) as usize, 1u64 << (p % 64));
            if self.ever_written[word] & bit == 0 {
                self.ever_written[word] |= bit;
                self.pages_ever_written += 1;
            }
        }
    }
}

impl BlockDevice for DataSim {
    fn geometry(&self) -> &Geometry {
        self.sim.geometry()
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
        self.sim.geometry().check_range(offset, buf.len() as u64)?;
        let o = offset as usize;
        buf.copy_from_slice(&read_data(&self.data)[o..o + buf.len()]);
        Ok(())
    }

    fn write(
        &mut self,
        offset: u64,
        buf: &[u8],
        handle: PlacementHandle,
    ) -> lachesis_device::Result<()> {
        self.sim.geometry().check_range(offset, buf.len() as u64)?;
        let ps = self.page as u64;
        self.sim
            .write_pages(offset / ps, buf.len() as u64 / ps, handle)?;
        self.mark_written(offset / ps, buf.len() as u64 / ps);
        let o = offset as usize;
        write_data(&self.data)[o..o + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn trim(&mut self, offset: u64, len: u64) -> lachesis_device::Result<()> {
        if self.deallocate {
            self.sim.trim(offset, len)?;
        } else {
            self.sim.geometry().check_range(offset, len)?;
        }
        // Deallocated blocks read as zeroes, as on the simulator.
        write_data(&self.data)[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }

    fn flush(&mut self) -> lachesis_device::Result<()> {
        Ok(())
    }

    fn concurrent_reads(&self) -> Option<Arc<dyn ConcurrentRead>> {
        Some(Arc::new(DataSimReads {
            geometry: self.sim.geometry().clone(),
            data: self.data.clone(),
        }))
    }
}

/// [`ConcurrentRead`] of a [`DataSim`]: its data, read under a read lock.
struct DataSimReads {
    geometry: Geometry,
    data: Arc<RwLock<Vec<u8>>>,
}

impl ConcurrentRead for DataSimReads {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
        self.geometry.check_range(offset, buf.len() as u64)?;
        let o = offset as usize;
        buf.copy_from_slice(&read_data(&self.data)[o..o + buf.len()]);
        Ok(())
    }
}

fn read_data(data: &RwLock<Vec<u8>>) -> std::sync::RwLockReadGuard<'_, Vec<u8>> {
    data.read().unwrap_or_else(|e| e.into_inner())
}

fn write_data(data: &RwLock<Vec<u8>>) -> std::sync::RwLockWriteGuard<'_, Vec<u8>> {
    data.write().unwrap_or_else(|e| e.into_inner())
}
