//! A simulated FDP SSD that measures device-level write amplification.
//!
//! Pages, erase blocks, reclaim units (superblocks), reclaim groups, reclaim unit handles
//! (initially or persistently isolated), overprovisioning, greedy garbage collection,
//! deallocation, the FDP statistics and media-reallocated events. It runs metadata-only for
//! fast trace simulation, or keeps data in a backing file so it can stand in for a drive.

mod config;
mod ftl;
mod gc;
pub mod input;
mod stats;
pub mod workload;

pub use config::SimConfig;
pub use stats::{HandleCounters, SimStats};

use crate::device::{BlockDevice, Error, FdpLogs, Geometry, Placement, PlacementHandle, Result};
use crate::nvme::logpage::{FdpConfig, FdpConfigurations, FdpEvent, FdpStats, RuhStatus};

use ftl::{Ftl, Media};

/// The simulated FDP SSD. Placement handle `h` names reclaim unit handle `h % handles` of
/// reclaim group `h / handles`.
pub struct SimSsd {
    ftl: Ftl,
    geometry: Geometry,
    config: SimConfig,
    zero_page: Vec<u8>,
}

/// Spread of erase counts over reclaim units (wear).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WearSummary {
    pub min: u32,
    pub max: u32,
    pub mean: f64,
}

impl SimSsd {
    /// Builds an empty (fully deallocated) device.
    pub fn new(config: SimConfig) -> Result<SimSsd> {
        SimSsd::build(config, false)
    }

    /// Builds an empty device that also keeps [`HandleCounters`] per placement handle (which
    /// handle wrote each logical page, so relocations are charged to it): two more bytes per
    /// logical page. See [`SimSsd::handle_counters`].
    pub fn with_handle_accounting(config: SimConfig) -> Result<SimSsd> {
        SimSsd::build(config, true)
    }

    fn build(config: SimConfig, handle_accounting: bool) -> Result<SimSsd> {
        let ftl = Ftl::new(&config, handle_accounting)?;
        let l = ftl.layout;
        let handles = l.groups * l.ruhs;
        let geometry = Geometry {
            capacity_bytes: u64::from(l.logical_pages) * u64::from(l.page_size),
            block_size: l.page_size,
            // No transfer limit: the largest whole number of pages a u32 holds.
            max_io_bytes: !(l.page_size - 1),
            placement_handles: u16::try_from(handles)
                .map_err(|_| Error::Config(format!("{handles} placement handles exceed 65535")))?,
            reclaim_unit_bytes: u64::from(l.pages_per_ru) * u64::from(l.page_size),
            reclaim_groups: l.groups as u16,
            placement: Placement::Fdp,
        };
        let zero_page = vec![0; l.page_size as usize];
        Ok(SimSsd {
            ftl,
            geometry,
            config,
            zero_page,
        })
    }

    /// The configuration the device was built from.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Logical pages (blocks) the host can address.
    pub fn logical_pages(&self) -> u64 {
        u64::from(self.ftl.layout.logical_pages)
    }

    /// Pages in one reclaim unit.
    pub fn pages_per_ru(&self) -> u32 {
        self.ftl.layout.pages_per_ru
    }

    /// Page-granular counters.
    pub fn stats(&self) -> SimStats {
        self.ftl.stats
    }

    /// Per-placement-handle counters, indexed by handle, if the device was built
    /// [`SimSsd::with_handle_accounting`].
    pub fn handle_counters(&self) -> Option<&[HandleCounters]> {
        self.ftl.ledger.as_ref().map(|l| l.counters.as_slice())
    }

    /// Bytes of heap the simulator's metadata takes: the logical-to-physical and reverse maps
    /// (4 bytes per logical and per physical page), the unit table and victim index, the
    /// per-handle ledger (2 bytes per logical page) if kept. Excludes a backing file.
    pub fn metadata_bytes(&self) -> usize {
        self.ftl.heap_bytes()
    }

    /// Reclaim units the device has, over all reclaim groups.
    pub fn reclaim_units(&self) -> u32 {
        self.ftl.layout.total_rus
    }

    /// Cumulative FDP statistics (what log page 0x22 would report).
    pub fn fdp_statistics(&self) -> FdpStats {
        self.ftl
            .stats
            .fdp(self.ftl.layout.page_size, self.ftl.layout.pages_per_ru)
    }

    /// Events recorded so far (bounded by [`SimConfig::max_events`], oldest first).
    pub fn events(&self) -> Vec<FdpEvent> {
        self.ftl.events.snapshot()
    }

    /// How many media-reallocated events were ever recorded (not bounded).
    pub fn media_reallocated_events(&self) -> u64 {
        self.ftl.events.media_reallocated_total
    }

    /// Erase-count spread over all reclaim units.
    pub fn wear(&self) -> WearSummary {
        let counts = self.ftl.rus.iter().map(|m| m.erase_count);
        let (mut min, mut max, mut sum) = (u32::MAX, 0u32, 0u64);
        for c in counts {
            min = min.min(c);
            max = max.max(c);
            sum += u64::from(c);
        }
        WearSummary {
            min,
            max,
            mean: sum as f64 / self.ftl.rus.len() as f64,
        }
    }

    fn placement(&mut self, handle: PlacementHandle) -> Result<(u32, u32)> {
        if let Err(e) = self.geometry.check_handle(handle) {
            self.ftl.events.invalid_placement(handle.0);
            return Err(e);
        }
        let ruhs = self.ftl.layout.ruhs;
        Ok((u32::from(handle.0) / ruhs, u32::from(handle.0) % ruhs))
    }

    fn page_range(&self, lpn: u64, count: u64) -> Result<(u32, u32)> {
        let ps = u64::from(self.ftl.layout.page_size);
        if count == 0 {
            return Err(Error::EmptyIo {
                offset: lpn.saturating_mul(ps),
            });
        }
        match lpn.checked_add(count) {
            // Bounded by the logical page count, which fits u32.
            Some(end) if end <= self.logical_pages() => Ok((lpn as u32, end as u32)),
            _ => Err(Error::OutOfRange {
                offset: lpn.saturating_mul(ps),
                len: count.saturating_mul(ps),
                capacity: self.geometry.capacity_bytes,
            }),
        }
    }

    /// Writes `count` pages from logical page `lpn` without data: the fast path for trace
    /// simulation. With a backing file the pages read back as zeroes.
    pub fn write_pages(&mut self, lpn: u64, count: u64, handle: PlacementHandle) -> Result<()> {
        let (first, end) = self.page_range(lpn, count)?;
        let (group, ruh) = self.placement(handle)?;
        let data_backed = matches!(self.ftl.media, Media::File { .. });
        for p in first..end {
            let data = if data_backed {
                Some(self.zero_page.as_slice())
            } else {
                None
            };
            self.ftl.write_page(p, group, ruh, data)?;
        }
        Ok(())
    }

    /// Writes one page without data; the hot path of trace-driven simulation.
    #[inline]
    pub fn write_page(&mut self, lpn: u64, handle: PlacementHandle) -> Result<()> {
        if lpn >= self.logical_pages() || !matches!(self.ftl.media, Media::None) {
            return self.write_pages(lpn, 1, handle);
        }
        let (group, ruh) = self.placement(handle)?;
        self.ftl.write_page(lpn as u32, group, ruh, None)
    }

    /// Deallocates `count` pages from logical page `lpn`.
    pub fn deallocate_pages(&mut self, lpn: u64, count: u64) -> Result<()> {
        let (first, end) = self.page_range(lpn, count)?;
        for p in first..end {
            self.ftl.deallocate_page(p);
        }
        Ok(())
    }

    /// The reclaim unit holding logical page `lpn` now, if it holds data: lets callers check
    /// what garbage collection put together.
    pub fn reclaim_unit_of(&self, lpn: u64) -> Option<u32> {
        let ppn = *self.ftl.l2p.get(usize::try_from(lpn).ok()?)?;
        (ppn != ftl::NIL).then(|| ppn / self.ftl.layout.pages_per_ru)
    }

    /// Verifies the simulator's internal bookkeeping; for tests.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.ftl.check_invariants()
    }
}

impl BlockDevice for SimSsd {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.geometry.check_range(offset, buf.len() as u64)?;
        let ps = self.ftl.layout.page_size as usize;
        let first = offset / ps as u64;
        for (i, chunk) in buf.chunks_mut(ps).enumerate() {
            self.ftl.read_page((first + i as u64) as u32, chunk)?;
        }
        Ok(())
    }

    fn write(&mut self, offset: u64, buf: &[u8], handle: PlacementHandle) -> Result<()> {
        self.geometry.check_range(offset, buf.len() as u64)?;
        let (group, ruh) = self.placement(handle)?;
        let ps = self.ftl.layout.page_size as usize;
        let first = offset / ps as u64;
        let data_backed = matches!(self.ftl.media, Media::File { .. });
        for (i, chunk) in buf.chunks(ps).enumerate() {
            self.ftl.write_page(
                (first + i as u64) as u32,
                group,
                ruh,
                data_backed.then_some(chunk),
            )?;
        }
        Ok(())
    }

    fn trim(&mut self, offset: u64, len: u64) -> Result<()> {
        self.geometry.check_range(offset, len)?;
        let ps = u64::from(self.ftl.layout.page_size);
        self.deallocate_pages(offset / ps, len / ps)
    }

    fn flush(&mut self) -> Result<()> {
        self.ftl.sync()
    }
}

impl FdpLogs for SimSsd {
    fn fdp_stats(&mut self) -> Result<FdpStats> {
        Ok(self.fdp_statistics())
    }

    fn ruh_status(&mut self) -> Result<Vec<RuhStatus>> {
        let l = self.ftl.layout;
        let mut out = Vec::with_capacity((l.groups * l.ruhs) as usize);
        for g in 0..l.groups {
            for r in 0..l.ruhs {
                out.push(RuhStatus {
                    placement_id: l.placement_id(g, r),
                    ruh_id: r as u16,
                    time_remaining_s: 0,
                    available_media_writes: u64::from(self.ftl.available_in_open(g, r)),
                });
            }
        }
        Ok(out)
    }

    fn fdp_events(&mut self) -> Result<Vec<FdpEvent>> {
        Ok(self.events())
    }

    fn fdp_configurations(&mut self) -> Result<FdpConfigurations> {
        let l = self.ftl.layout;
        Ok(FdpConfigurations {
            version: 0,
            configs: vec![FdpConfig {
                rgif: l.rgif as u8,
                volatile_write_cache: false,
                valid: true,
                reclaim_groups: l.groups,
                max_placement_ids: l.groups * l.ruhs,
                namespaces: 1,
                reclaim_unit_bytes: self.geometry.reclaim_unit_bytes,
                ru_time_limit_s: 0,
                ruh_types: self.config.handles.clone(),
            }],
        })
    }
}
