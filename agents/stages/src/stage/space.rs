//! Flash space for cache stages: the devices a flash engine may live on, each carved into
//! fixed-size regions that stages take and give back.
//!
//! A [`Devices`] list (name → shared [`BlockDevice`]) is handed to the switch; each device
//! is a [`Pool`] of regions of `region_bytes` (the device's reclaim unit, at least 1 MiB, so
//! an engine region fills and empties whole reclaim units). A stage owns a [`Space`]: the
//! regions it holds, in order, presented to its engine as one contiguous device
//! ([`SliceDevice`], virtual region `i` = the `i`-th region it holds). Growing appends
//! regions taken from the pool, shrinking gives tail regions back (trimmed) once the engine
//! no longer uses them. A pool that has not enough free regions refuses, naming the device.
//!
//! The slice's virtual size is the whole pool, so an engine that resizes in place (the log)
//! is built once over the largest span it could ever use and only the regions it uses are
//! mapped; touching an unmapped region is an error, never another stage's data.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use lachesis_cache::dev::{lock, SharedDevice};
use lachesis_device::{BlockDevice, ConcurrentRead, Geometry, PlacementHandle};

use super::error::StageError;

/// Smallest region when the device has no reclaim unit (or a smaller one).
pub const MIN_REGION: u64 = 1 << 20;
/// Most regions a pool is cut into by default (larger devices get larger regions), so the
/// per-region bookkeeping of a log that may grow over the whole device stays small.
const MAX_REGIONS: u64 = 1 << 16;

/// The devices flash engines may live on, in the order given (the first is the default).
/// Cheap to clone: switches of several mounts share one list and so one allocator.
#[derive(Clone, Default)]
pub struct Devices {
    pools: Vec<Arc<Pool>>,
}

impl Devices {
    /// Pools over `devices` with the default region size (see [`Devices::with_region_bytes`]).
    pub fn new(devices: Vec<(String, SharedDevice)>) -> Result<Devices, StageError> {
        Self::with_region_bytes(devices, 0)
    }

    /// Pools over `devices` with regions of `region_bytes`; 0 picks, per device, its reclaim
    /// unit rounded up to at least [`MIN_REGION`] and to at most 65536 regions per device.
    /// A region must be a multiple of the device's block size and reclaim unit.
    pub fn with_region_bytes(
        devices: Vec<(String, SharedDevice)>,
        region_bytes: u64,
    ) -> Result<Devices, StageError> {
        let mut pools: Vec<Arc<Pool>> = Vec::new();
        for (name, device) in devices {
            if pools.iter().any(|p| p.name == name) {
                return Err(format!("device {name:?} is given twice").into());
            }
            pools.push(Arc::new(Pool::new(name, device, region_bytes)?));
        }
        Ok(Devices { pools })
    }

    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// The pool of device `name`; `None`: the first device.
    pub fn get(&self, name: Option<&str>) -> Result<Arc<Pool>, StageError> {
        match name {
            None => self.pools.first().cloned().ok_or_else(|| {
                StageError::from(
                    "no device for a flash engine: the agent was given none (--device)",
                )
            }),
            Some(n) if self.pools.is_empty() => Err(format!(
                "no device {n:?} for a flash engine: the agent was given none (--device)"
            )
            .into()),
            Some(n) => self
                .pools
                .iter()
                .find(|p| p.name == n)
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "no device {n:?} (devices: {})",
                        self.pools
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                    .into()
                }),
        }
    }

    /// Every pool: name, region size, regions in all and free.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }
}

/// One device cut into regions.
pub struct Pool {
    name: String,
    device: SharedDevice,
    geometry: Geometry,
    region_bytes: u64,
    regions: u32,
    /// Free region numbers; the lowest are taken first.
    free: Mutex<BTreeSet<u32>>,
}

impl Pool {
    fn new(name: String, device: SharedDevice, region_bytes: u64) -> Result<Pool, StageError> {
        let geometry = lock(&device).geometry().clone();
        let bs = u64::from(geometry.block_size);
        let ru = geometry.reclaim_unit_bytes;
        let region = if region_bytes > 0 {
            region_bytes
        } else {
            let mut r = ru
                .max(MIN_REGION)
                .max(geometry.capacity_bytes / MAX_REGIONS);
            // A whole number of reclaim units and of blocks.
            let unit = if ru > 0 { ru } else { bs };
            r = r.div_ceil(unit) * unit;
            r
        };
        if region == 0 || !region.is_multiple_of(bs) || (ru > 0 && !region.is_multiple_of(ru)) {
            return Err(format!(
                "device {name:?}: regions of {region} bytes must be a non-zero multiple of its \
                 {bs}-byte block{}",
                if ru > 0 {
                    format!(" and {ru}-byte reclaim unit")
                } else {
                    String::new()
                }
            )
            .into());
        }
        if region > u64::from(u32::MAX) {
            return Err(format!("device {name:?}: regions of {region} bytes exceed 4 GiB").into());
        }
        let regions = u32::try_from(geometry.capacity_bytes / region).unwrap_or(u32::MAX);
        if regions == 0 {
            return Err(format!(
                "device {name:?}: its {} bytes hold no region of {region} bytes",
                geometry.capacity_bytes
            )
            .into());
        }
        Ok(Pool {
            name,
            device,
            geometry,
            region_bytes: region,
            regions,
            free: Mutex::new((0..regions).collect()),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn region_bytes(&self) -> u64 {
        self.region_bytes
    }

    /// Regions of the device in all.
    pub fn regions(&self) -> u32 {
        self.regions
    }

    pub fn free_regions(&self) -> u32 {
        self.lock_free().len() as u32
    }

    /// The device's geometry (placement handles, block size).
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn lock_free(&self) -> MutexGuard<'_, BTreeSet<u32>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `n` free regions, all or none.
    pub fn reserve(self: &Arc<Self>, n: u32) -> Result<Reservation, StageError> {
        let mut free = self.lock_free();
        if (free.len() as u64) < u64::from(n) {
            return Err(StageError::DeviceFull {
                device: self.name.clone(),
                needed: n,
                region_bytes: self.region_bytes,
                free: free.len() as u32,
                regions: self.regions,
            });
        }
        let regions: Vec<u32> = free.iter().take(n as usize).copied().collect();
        for r in &regions {
            free.remove(r);
        }
        Ok(Reservation {
            pool: self.clone(),
            regions,
        })
    }

    /// Gives regions back, deallocated first (their data is dead).
    fn give_back(&self, regions: &[u32]) {
        for &r in regions {
            let off = u64::from(r) * self.region_bytes;
            if let Err(e) = lock(&self.device).trim(off, self.region_bytes) {
                tracing::warn!(
                    device = self.name,
                    region = r,
                    "trimming a freed region: {e}"
                );
            }
        }
        self.lock_free().extend(regions.iter().copied());
    }
}

/// Regions taken from a pool and not yet handed to a [`Space`]; dropped, they go back.
pub struct Reservation {
    pool: Arc<Pool>,
    regions: Vec<u32>,
}

impl Reservation {
    pub fn len(&self) -> u32 {
        self.regions.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.regions.is_empty() {
            self.pool.give_back(&std::mem::take(&mut self.regions));
        }
    }
}

/// The regions one stage holds, in virtual order; dropped, they go back to the pool.
pub struct Space {
    pool: Arc<Pool>,
    map: Arc<Mutex<Vec<u32>>>,
}

impl Space {
    /// An empty space on `pool`.
    pub fn new(pool: Arc<Pool>) -> Space {
        Space {
            pool,
            map: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    fn lock_map(&self) -> MutexGuard<'_, Vec<u32>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Regions held.
    pub fn regions(&self) -> u32 {
        self.lock_map().len() as u32
    }

    pub fn bytes(&self) -> u64 {
        u64::from(self.regions()) * self.pool.region_bytes
    }

    /// The pool's region numbers held, in virtual order (a warm restart checks that a cache
    /// got the very regions its saved index describes).
    pub fn region_numbers(&self) -> Vec<u32> {
        self.lock_map().clone()
    }

    /// Appends the reserved regions (from this space's pool) after the ones held.
    pub fn grow(&self, mut r: Reservation) {
        assert!(
            Arc::ptr_eq(&r.pool, &self.pool),
            "a reservation of another pool"
        );
        self.lock_map().append(&mut r.regions);
    }

    /// Keeps the first `n` regions and gives the rest back (trimmed). The engine must no
    /// longer use them.
    pub fn shrink_to(&self, n: u32) {
        let tail: Vec<u32> = {
            let mut m = self.lock_map();
            if (n as usize) >= m.len() {
                return;
            }
            m.split_off(n as usize)
        };
        self.pool.give_back(&tail);
    }

    /// The device an engine of this space writes through: virtual offsets over the regions
    /// held, as large as the whole pool.
    pub fn device(&self) -> SharedDevice {
        let mut geometry = self.pool.geometry.clone();
        geometry.capacity_bytes = u64::from(self.pool.regions) * self.pool.region_bytes;
        Arc::new(Mutex::new(SliceDevice {
            pool: self.pool.clone(),
            map: self.map.clone(),
            geometry,
        }))
    }
}

impl Drop for Space {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

/// What an engine sees of its [`Space`]: a contiguous device whose region `i` is the `i`-th
/// region the space holds. IO is split at region boundaries; IO to a region the space does
/// not hold fails.
pub struct SliceDevice {
    pool: Arc<Pool>,
    map: Arc<Mutex<Vec<u32>>>,
    geometry: Geometry,
}

impl SliceDevice {
    /// The physical pieces of `[offset, offset + len)`: (device offset, length).
    fn pieces(&self, offset: u64, len: u64) -> lachesis_device::Result<Vec<(u64, u64)>> {
        self.geometry.check_range(offset, len)?;
        let rb = self.pool.region_bytes;
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        let (mut at, end) = (offset, offset + len);
        while at < end {
            let v = at / rb;
            let within = at % rb;
            let n = (rb - within).min(end - at);
            let phys = map.get(v as usize).ok_or_else(|| {
                lachesis_device::Error::Config(format!(
                    "IO at {at} is in region {v}, past the {} regions this stage holds",
                    map.len()
                ))
            })?;
            out.push((u64::from(*phys) * rb + within, n));
            at += n;
        }
        Ok(out)
    }
}

/// [`ConcurrentRead`] of a [`SliceDevice`]: the pool device's, region by region.
struct SliceReads {
    pool: Arc<dyn ConcurrentRead>,
    slice: SliceDevice,
}

impl ConcurrentRead for SliceReads {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
        let mut done = 0usize;
        for (at, n) in self.slice.pieces(offset, buf.len() as u64)? {
            let n = n as usize;
            self.pool.read_at(at, &mut buf[done..done + n])?;
            done += n;
        }
        Ok(())
    }
}

impl BlockDevice for SliceDevice {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn concurrent_reads(&self) -> Option<Arc<dyn ConcurrentRead>> {
        let pool = lock(&self.pool.device).concurrent_reads()?;
        Some(Arc::new(SliceReads {
            pool,
            slice: SliceDevice {
                pool: self.pool.clone(),
                map: self.map.clone(),
                geometry: self.geometry.clone(),
            },
        }))
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
        let mut done = 0usize;
        for (at, n) in self.pieces(offset, buf.len() as u64)? {
            let n = n as usize;
            lock(&self.pool.device).read(at, &mut buf[done..done + n])?;
            done += n;
        }
        Ok(())
    }

    fn write(
        &mut self,
        offset: u64,
        buf: &[u8],
        handle: PlacementHandle,
    ) -> lachesis_device::Result<()> {
        let mut done = 0usize;
        for (at, n) in self.pieces(offset, buf.len() as u64)? {
            let n = n as usize;
            lock(&self.pool.device).write(at, &buf[done..done + n], handle)?;
            done += n;
        }
        Ok(())
    }

    fn trim(&mut self, offset: u64, len: u64) -> lachesis_device::Result<()> {
        for (at, n) in self.pieces(offset, len)? {
            lock(&self.pool.device).trim(at, n)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> lachesis_device::Result<()> {
        lock(&self.pool.device).flush()
    }
}

/// Test devices: the simulated SSD with its data, a sparse memory device, and a wrapper
/// recording every write (for this crate's tests and its integration tests).
#[doc(hidden)]
pub mod testing {
    use super::*;
    use lachesis_cache::DataSim;
    use lachesis_device::nvme::logpage::RuhType;
    use lachesis_device::sim::SimConfig;

    /// (offset, length, handle) of every write that reached the device.
    pub type Writes = Arc<Mutex<Vec<(u64, u64, u16)>>>;

    /// Records the writes, then passes every IO on.
    pub struct Recording<D> {
        pub inner: D,
        pub writes: Writes,
    }

    impl<D: BlockDevice> BlockDevice for Recording<D> {
        fn geometry(&self) -> &Geometry {
            self.inner.geometry()
        }
        fn read(&mut self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
            self.inner.read(offset, buf)
        }
        fn concurrent_reads(&self) -> Option<Arc<dyn ConcurrentRead>> {
            self.inner.concurrent_reads()
        }
        fn write(
            &mut self,
            offset: u64,
            buf: &[u8],
            handle: PlacementHandle,
        ) -> lachesis_device::Result<()> {
            self.writes
                .lock()
                .unwrap()
                .push((offset, buf.len() as u64, handle.0));
            self.inner.write(offset, buf, handle)
        }
        fn trim(&mut self, offset: u64, len: u64) -> lachesis_device::Result<()> {
            self.inner.trim(offset, len)
        }
        fn flush(&mut self) -> lachesis_device::Result<()> {
            self.inner.flush()
        }
    }

    type Pages = Arc<std::sync::RwLock<std::collections::HashMap<u64, Vec<u8>>>>;

    /// A sparse in-memory device of `capacity` bytes (4 KiB blocks, 8 handles, no reclaim
    /// units): for large caches in tests without the simulator's full-size buffer. It reads
    /// concurrently, as the measuring device does, so engines' lock-free reads are tested.
    pub struct Sparse {
        geometry: Geometry,
        pages: Pages,
    }

    struct SparseReads {
        geometry: Geometry,
        pages: Pages,
    }

    fn read_pages(pages: &Pages, offset: u64, buf: &mut [u8]) {
        let pages = pages.read().unwrap_or_else(|e| e.into_inner());
        for (i, b) in buf.chunks_mut(4096).enumerate() {
            match pages.get(&(offset / 4096 + i as u64)) {
                Some(p) => b.copy_from_slice(p),
                None => b.fill(0),
            }
        }
    }

    impl ConcurrentRead for SparseReads {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
            self.geometry.check_range(offset, buf.len() as u64)?;
            read_pages(&self.pages, offset, buf);
            Ok(())
        }
    }

    impl Sparse {
        pub fn new(capacity: u64) -> Sparse {
            Sparse {
                geometry: Geometry {
                    capacity_bytes: capacity,
                    block_size: 4096,
                    max_io_bytes: 1 << 20,
                    placement_handles: 8,
                    reclaim_unit_bytes: 0,
                    reclaim_groups: 0,
                    placement: lachesis_device::Placement::Fallback,
                },
                pages: Default::default(),
            }
        }
    }

    impl BlockDevice for Sparse {
        fn geometry(&self) -> &Geometry {
            &self.geometry
        }
        fn read(&mut self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
            self.geometry.check_range(offset, buf.len() as u64)?;
            read_pages(&self.pages, offset, buf);
            Ok(())
        }
        fn concurrent_reads(&self) -> Option<Arc<dyn ConcurrentRead>> {
            Some(Arc::new(SparseReads {
                geometry: self.geometry.clone(),
                pages: self.pages.clone(),
            }))
        }
        fn write(
            &mut self,
            offset: u64,
            buf: &[u8],
            handle: PlacementHandle,
        ) -> lachesis_device::Result<()> {
            self.geometry.check_range(offset, buf.len() as u64)?;
            self.geometry.check_handle(handle)?;
            let mut pages = self.pages.write().unwrap_or_else(|e| e.into_inner());
            for (i, b) in buf.chunks(4096).enumerate() {
                pages.insert(offset / 4096 + i as u64, b.to_vec());
            }
            Ok(())
        }
        fn trim(&mut self, offset: u64, len: u64) -> lachesis_device::Result<()> {
            self.geometry.check_range(offset, len)?;
            let mut pages = self.pages.write().unwrap_or_else(|e| e.into_inner());
            for p in offset / 4096..(offset + len) / 4096 {
                pages.remove(&p);
            }
            Ok(())
        }
        fn flush(&mut self) -> lachesis_device::Result<()> {
            Ok(())
        }
    }

    /// A [`Sparse`] device recording its writes.
    pub fn sparse(capacity: u64) -> (SharedDevice, Writes) {
        let writes = Writes::default();
        let dev = Recording {
            inner: Sparse::new(capacity),
            writes: writes.clone(),
        };
        (lachesis_cache::share(dev), writes)
    }

    /// A simulated FDP SSD (data in memory) of about `mib` MiB with 8 placement handles and
    /// 1 MiB reclaim units, recording its writes.
    pub fn sim(mib: u32) -> (SharedDevice, Writes) {
        // Spare units for the 8 handles' open units and the GC reserve.
        let op = (16.0 / f64::from(mib)).max(0.1);
        let cfg = SimConfig {
            pages_per_erase_block: 256,
            erase_blocks_per_ru: 1,
            rus_per_group: (f64::from(mib) * (1.0 + op)).ceil() as u32 + 2,
            overprovisioning: op,
            handles: vec![RuhType::InitiallyIsolated; 8],
            ..SimConfig::default()
        };
        let writes = Writes::default();
        let dev = Recording {
            inner: DataSim::new(cfg).unwrap(),
            writes: writes.clone(),
        };
        (lachesis_cache::share(dev), writes)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::sim;
    use super::*;

    fn pool(mib: u32) -> (Devices, Arc<Pool>) {
        let (dev, _) = sim(mib);
        let d = Devices::new(vec![("flash0".into(), dev)]).unwrap();
        let p = d.get(None).unwrap();
        (d, p)
    }

    #[test]
    fn regions_follow_the_reclaim_unit_and_names_are_checked() {
        let (d, p) = pool(16);
        assert_eq!(p.region_bytes(), 1 << 20);
        assert!(p.regions() >= 16, "{}", p.regions());
        assert_eq!(p.free_regions(), p.regions());
        assert!(Arc::ptr_eq(&d.get(Some("flash0")).unwrap(), &p));
        let e = d.get(Some("nvme9")).err().unwrap().to_string();
        assert!(
            e.contains("no device \"nvme9\"") && e.contains("flash0"),
            "{e}"
        );
        let e = Devices::default().get(None).err().unwrap().to_string();
        assert!(e.contains("--device"), "{e}");
        let (dev, _) = sim(4);
        let e = Devices::with_region_bytes(vec![("x".into(), dev)], 4096)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("reclaim unit"), "{e}");
    }

    #[test]
    fn spaces_grow_shrink_and_a_full_device_refuses() {
        let (_d, p) = pool(16);
        let total = p.regions();
        let a = Space::new(p.clone());
        let b = Space::new(p.clone());
        a.grow(p.reserve(3).unwrap());
        b.grow(p.reserve(2).unwrap());
        assert_eq!((a.regions(), b.regions()), (3, 2));
        assert_eq!(p.free_regions(), total - 5);
        // All or nothing: asking for more than is free takes nothing.
        let e = p.reserve(total).err().unwrap();
        assert!(e.is_device_full(), "{e}");
        assert!(
            e.to_string().starts_with("device \"flash0\" is full"),
            "{e}"
        );
        assert_eq!(p.free_regions(), total - 5);
        // A reservation dropped unused goes back.
        drop(p.reserve(total - 5).unwrap());
        assert_eq!(p.free_regions(), total - 5);
        let rest = p.reserve(total - 5).unwrap();
        assert!(p.reserve(1).is_err());
        drop(rest);
        // Shrinking gives the tail back; dropping the space gives everything back.
        a.shrink_to(1);
        assert_eq!(a.regions(), 1);
        assert_eq!(p.free_regions(), total - 3);
        drop(b);
        assert_eq!(p.free_regions(), total - 1);
        drop(a);
        assert_eq!(p.free_regions(), total);
    }

    #[test]
    fn a_slice_maps_virtual_regions_to_its_own_and_nothing_else() {
        let (_d, p) = pool(16);
        let other = Space::new(p.clone());
        other.grow(p.reserve(1).unwrap());
        let s = Space::new(p.clone());
        s.grow(p.reserve(2).unwrap());
        let rb = p.region_bytes();
        let dev = s.device();
        // A write across the boundary of its two regions lands in both, in order.
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        lock(&dev)
            .write(rb - 4096, &data, PlacementHandle(3))
            .unwrap();
        let mut back = vec![0u8; 8192];
        lock(&dev).read(rb - 4096, &mut back).unwrap();
        assert_eq!(back, data);
        // The other space's region (region 0 of the device) is untouched.
        let mut first = vec![1u8; 4096];
        lock(&p.device).read(rb - 4096, &mut first).unwrap();
        assert_eq!(first, vec![0u8; 4096]);
        // Past the regions held: refused.
        let e = lock(&dev).write(2 * rb, &data[..4096], PlacementHandle(0));
        assert!(e.is_err());
        assert_eq!(
            lock(&dev).geometry().capacity_bytes,
            u64::from(p.regions()) * rb
        );
    }
}
