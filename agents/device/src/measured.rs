//! A device that measures: real data in a file through [`UringDevice`], and the simulated FDP
//! SSD's flash translation layer ([`SimSsd`], metadata only) run beside it on every write and
//! deallocate, so device-level write amplification (DLWA) is measured under real IO.
//!
//! Reads, writes and trims go to the file: data is really stored and read back. Every write
//! also goes to the model with its [`PlacementHandle`] (one reclaim unit handle each), every
//! trim deallocates there, and the model's greedy garbage collection counts what a drive would
//! have relocated. [`MeasuredDevice::stats`] (or a [`MeasuredStatsReader`] taken before the
//! device is shared) reports host and media bytes, DLWA and GC counts, in total and per handle.
//!
//! The model is sized from the device: `capacity / page_size` logical pages, plus
//! `overprovisioning` on top, rounded up to whole reclaim units. It keeps 4 bytes per logical
//! page (logical-to-physical map), 4 per physical page (reverse map) and 2 per logical page
//! (which handle wrote it), so about 10.3 bytes per 4 KiB page at 7% overprovisioning: 21 MiB
//! for an 8 GiB device, 2.6 MiB for 1 GiB ([`MeasuredStats::model_metadata_bytes`]).
//!
//! Only the data survives a restart. The model starts with every page deallocated each time the
//! device is opened (the file's old contents are unknown to it), so every counter in
//! [`MeasuredStats`] is since [`MeasuredStats::opened_unix_ms`], and DLWA stays at 1 until the
//! host has written about a device's worth of data again.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::device::{
    BlockDevice, ConcurrentRead, Error, FdpLogs, FdpMode, Geometry, IoRequest, Placement,
    PlacementHandle, Result,
};
use crate::dlwa::{dlwa_between, measured_dlwa};
use crate::nvme::logpage::{FdpConfigurations, FdpEvent, FdpStats, RuhStatus, RuhType};
use crate::sim::{SimConfig, SimSsd};
use crate::uring::{UringConfig, UringDevice};

/// What a device spec string starts with: `measured:PATH:SIZE[:KEY=VALUE,...]`.
pub const SPEC_PREFIX: &str = "measured:";

/// Reclaim unit size when none is given: 1 MiB (256 pages of 4 KiB). Many small units keep
/// greedy GC close to the analytic model (see `docs/benchmarks/device.md`) and cost little
/// memory (about 40 bytes a unit).
pub const DEFAULT_RECLAIM_UNIT_BYTES: u64 = 1 << 20;

/// Smallest reclaim unit the default shrinks to for small devices, in pages.
const MIN_AUTO_RU_PAGES: u64 = 4;

/// How to open a [`MeasuredDevice`]: the model's shape and the io_uring ring's.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredOptions {
    /// Placement handles a write may name (`0..handles`), one reclaim unit handle each; at most
    /// 256. Default 8, the handle count of the FDP paper's drive.
    pub handles: u16,
    /// Overprovisioning of the model: (physical − logical) / logical. Default 0.07. The model
    /// rounds physical space up to whole reclaim units, so the effective value
    /// ([`MeasuredStats::overprovisioning`]) is slightly larger.
    pub overprovisioning: f64,
    /// Reclaim unit size in bytes (a multiple of `page_size`). `None`:
    /// [`DEFAULT_RECLAIM_UNIT_BYTES`], halved (down to 4 pages) while the device is too small
    /// to leave garbage collection enough spare units at this overprovisioning.
    pub reclaim_unit_bytes: Option<u64>,
    /// Isolation of every handle: initially isolated (GC may mix handles' data, as on the
    /// paper's drive; the default) or persistently isolated.
    pub isolation: RuhType,
    /// Free reclaim units the model keeps back; GC runs when it is down to this many.
    pub gc_reserve_rus: u32,
    /// Logical block size and model page size (bytes, power of two, at least the file's
    /// 4096-byte block). Default 4096.
    pub page_size: u32,
    /// io_uring queue depth (and registered buffers) per ring.
    pub queue_depth: u32,
    /// Registered buffer size; larger IOs are split.
    pub max_io_bytes: u32,
    /// Open the file with O_DIRECT. Default true.
    pub direct: bool,
    /// Single-issuer rings (see [`UringConfig::single_issuer`]). Default false: a device behind
    /// a lock (`lachesis_cache::share`) is used by whichever thread holds the lock, and a
    /// single-issuer ring refuses every thread but the first. Set it when each thread has its
    /// own [`MeasuredDevice::worker`].
    pub single_issuer: bool,
}

impl Default for MeasuredOptions {
    fn default() -> Self {
        MeasuredOptions {
            handles: 8,
            overprovisioning: 0.07,
            reclaim_unit_bytes: None,
            isolation: RuhType::InitiallyIsolated,
            gc_reserve_rus: 2,
            page_size: 4096,
            queue_depth: 32,
            max_io_bytes: 128 * 1024,
            direct: true,
            single_issuer: false,
        }
    }
}

/// Counters of one placement handle since the device was opened. Relocated bytes are charged
/// to the handle whose write put the data there, wherever GC has moved it since.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandleStats {
    /// The placement handle.
    pub handle: u16,
    /// Bytes the host wrote through this handle.
    pub host_bytes_written: u64,
    /// Bytes programmed on media for this handle: host writes plus GC relocations of its data.
    pub media_bytes_written: u64,
    /// Bytes of this handle's data garbage collection relocated.
    pub gc_bytes_relocated: u64,
    /// Bytes of this handle's data the host deallocated (pages that held data).
    pub bytes_deallocated: u64,
    /// Bytes whose current data this handle wrote.
    pub valid_bytes: u64,
    /// media / host bytes; `None` before the handle's first write.
    pub dlwa: Option<f64>,
}

/// What the model measured since the device was opened: a snapshot, cheap to take (one short
/// lock of the model, a copy of a few counters per handle).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredStats {
    /// When the device was opened (milliseconds since the Unix epoch): every counter is since.
    pub opened_unix_ms: u64,
    /// Logical capacity in bytes.
    pub capacity_bytes: u64,
    /// Model page size = logical block size (bytes).
    pub page_size: u32,
    /// Reclaim unit size (bytes).
    pub reclaim_unit_bytes: u64,
    /// Reclaim units in the model (one reclaim group).
    pub reclaim_units: u32,
    /// Effective overprovisioning: (physical − logical) / logical after rounding up to units.
    pub overprovisioning: f64,
    /// Heap the model's metadata takes (bytes).
    pub model_metadata_bytes: u64,
    /// Bytes the host wrote.
    pub host_bytes_written: u64,
    /// Bytes programmed on media: host writes plus GC relocations.
    pub media_bytes_written: u64,
    /// Bytes garbage collection relocated.
    pub gc_bytes_relocated: u64,
    /// Bytes erased: reclaim units erased × unit size.
    pub media_bytes_erased: u64,
    /// media / host bytes written; `None` before the first write.
    pub dlwa: Option<f64>,
    /// Reclaim units garbage collection reclaimed (and erased).
    pub gc_victims: u64,
    /// Of those, units that still held valid data GC had to move (media-reallocated events).
    pub gc_victims_with_data: u64,
    /// Bytes the host deallocated that held data.
    pub bytes_deallocated: u64,
    /// Bytes the host read.
    pub host_bytes_read: u64,
    /// Per placement handle, indexed by handle.
    pub handles: Vec<HandleStats>,
}

impl MeasuredStats {
    /// DLWA between an earlier snapshot of the same device and this one (Δmedia / Δhost), for
    /// a steady-state window; `None` if nothing was written in between.
    pub fn dlwa_since(&self, earlier: &MeasuredStats) -> Option<f64> {
        dlwa_between(
            (
                earlier.host_bytes_written.into(),
                earlier.media_bytes_written.into(),
            ),
            (
                self.host_bytes_written.into(),
                self.media_bytes_written.into(),
            ),
        )
    }
}

/// What every ring of one device shares: the model and the fixed facts about it.
struct Shared {
    model: Mutex<SimSsd>,
    host_bytes_read: AtomicU64,
    opened_unix_ms: u64,
    capacity_bytes: u64,
    page_size: u32,
    overprovisioning: f64,
    options: MeasuredOptions,
    sim_config: SimConfig,
}

impl Shared {
    /// The model. A poisoned lock means a thread panicked between two model calls; each call
    /// leaves the model consistent, so carry on.
    fn model(&self) -> MutexGuard<'_, SimSsd> {
        self.model.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stats(&self) -> MeasuredStats {
        let (s, counters, with_data, metadata, ru_bytes, units) = {
            let m = self.model();
            (
                m.stats(),
                m.handle_counters().map(<[_]>::to_vec).unwrap_or_default(),
                m.media_reallocated_events(),
                m.metadata_bytes(),
                m.geometry().reclaim_unit_bytes,
                m.reclaim_units(),
            )
        };
        let ps = u64::from(self.page_size);
        let host = s.host_pages_written * ps;
        let media = s.media_pages_written() * ps;
        let handles = counters
            .iter()
            .take(usize::from(self.options.handles))
            .enumerate()
            .map(|(h, c)| HandleStats {
                handle: h as u16,
                host_bytes_written: c.host_pages_written * ps,
                media_bytes_written: c.media_pages_written() * ps,
                gc_bytes_relocated: c.gc_pages_written * ps,
                bytes_deallocated: c.pages_deallocated * ps,
                valid_bytes: c.valid_pages * ps,
                dlwa: measured_dlwa(c.media_pages_written().into(), c.host_pages_written.into()),
            })
            .collect();
        MeasuredStats {
            opened_unix_ms: self.opened_unix_ms,
            capacity_bytes: self.capacity_bytes,
            page_size: self.page_size,
            reclaim_unit_bytes: ru_bytes,
            reclaim_units: units,
            overprovisioning: self.overprovisioning,
            model_metadata_bytes: metadata as u64,
            host_bytes_written: host,
            media_bytes_written: media,
            gc_bytes_relocated: s.gc_pages_written * ps,
            media_bytes_erased: s.rus_erased * ru_bytes,
            dlwa: measured_dlwa(media.into(), host.into()),
            gc_victims: s.gc_victims,
            gc_victims_with_data: with_data,
            bytes_deallocated: s.pages_deallocated * ps,
            host_bytes_read: self.host_bytes_read.load(Ordering::Relaxed),
            handles,
        }
    }
}

/// A block device that stores data in a file through io_uring and measures DLWA with the
/// simulated FDP SSD's FTL on every write and trim.
///
/// One instance owns one io_uring (`Send`, not `Sync`): share one behind a lock
/// (`lachesis_cache::share`), or give each thread its own [`MeasuredDevice::worker`]; either way
/// every ring feeds the same model, which a short lock per IO (per batch) keeps consistent.
pub struct MeasuredDevice {
    data: UringDevice,
    shared: Arc<Shared>,
    geometry: Geometry,
}

/// Reads a [`MeasuredDevice`]'s statistics from any thread, without the device: take one
/// ([`MeasuredDevice::stats_reader`]) before handing the device to the engines.
#[derive(Clone)]
pub struct MeasuredStatsReader {
    shared: Arc<Shared>,
}

impl MeasuredStatsReader {
    /// A snapshot of the device's counters; safe while other threads do IO.
    pub fn stats(&self) -> MeasuredStats {
        self.shared.stats()
    }
}

impl fmt::Debug for MeasuredStatsReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MeasuredStatsReader")
            .field("capacity_bytes", &self.shared.capacity_bytes)
            .finish()
    }
}

impl fmt::Debug for MeasuredDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MeasuredDevice")
            .field("path", &self.data.path())
            .field("geometry", &self.geometry)
            .field("options", &self.shared.options)
            .finish()
    }
}

impl MeasuredDevice {
    /// Opens (or creates) `path` with `size_bytes` of logical capacity, rounded down to whole
    /// pages. A missing file is created sparse, a shorter one is extended, a longer one (or a
    /// block device) is used up to `size_bytes`; nothing is truncated, so reopening keeps the
    /// data. The model starts empty: see the module documentation.
    pub fn open(
        path: impl AsRef<Path>,
        size_bytes: u64,
        options: MeasuredOptions,
    ) -> Result<MeasuredDevice> {
        let path = path.as_ref();
        let page = options.page_size;
        if !page.is_power_of_two() || page < 512 {
            return Err(Error::Config(format!(
                "page_size {page} must be a power of two >= 512"
            )));
        }
        let capacity = size_bytes / u64::from(page) * u64::from(page);
        if capacity == 0 {
            return Err(Error::Config(format!(
                "size {size_bytes} holds less than one {page}-byte page"
            )));
        }
        if options.handles == 0 || options.handles > 256 {
            return Err(Error::Config(format!(
                "{} placement handles; need 1..=256",
                options.handles
            )));
        }
        // Size the model before touching the file, so a bad shape creates nothing.
        let sim_config = model_config(capacity / u64::from(page), &options)?;
        let data = UringDevice::open(
            path,
            UringConfig {
                queue_depth: options.queue_depth,
                max_io_bytes: options.max_io_bytes,
                direct: options.direct,
                block_size: Some(page),
                fdp: FdpMode::Off,
                create_size: Some(size_bytes),
                single_issuer: options.single_issuer,
            },
        )?;
        if data.geometry().capacity_bytes < capacity {
            return Err(Error::Config(format!(
                "{} holds {} bytes, fewer than the {capacity} asked for",
                path.display(),
                data.geometry().capacity_bytes
            )));
        }
        let sim = SimSsd::with_handle_accounting(sim_config.clone())?;
        let physical = u64::from(sim.reclaim_units()) * u64::from(sim.pages_per_ru());
        let logical = capacity / u64::from(page);
        let geometry = Geometry {
            capacity_bytes: capacity,
            block_size: page,
            max_io_bytes: data.geometry().max_io_bytes,
            placement_handles: options.handles,
            reclaim_unit_bytes: sim.geometry().reclaim_unit_bytes,
            reclaim_groups: 1,
            placement: Placement::Fdp,
        };
        let opened_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Ok(MeasuredDevice {
            data,
            shared: Arc::new(Shared {
                model: Mutex::new(sim),
                host_bytes_read: AtomicU64::new(0),
                opened_unix_ms,
                capacity_bytes: capacity,
                page_size: page,
                overprovisioning: physical as f64 / logical as f64 - 1.0,
                options,
                sim_config,
            }),
            geometry,
        })
    }

    /// Another ring on the same file feeding the same model, for another thread.
    pub fn worker(&self) -> Result<MeasuredDevice> {
        Ok(MeasuredDevice {
            data: self.data.worker()?,
            shared: Arc::clone(&self.shared),
            geometry: self.geometry.clone(),
        })
    }

    /// A snapshot of what the model measured since the device was opened.
    pub fn stats(&self) -> MeasuredStats {
        self.shared.stats()
    }

    /// A handle for reading [`MeasuredDevice::stats`] from other threads after the device
    /// itself has gone behind a lock or to another thread.
    pub fn stats_reader(&self) -> MeasuredStatsReader {
        MeasuredStatsReader {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The file or block device holding the data.
    pub fn path(&self) -> &Path {
        self.data.path()
    }

    /// The options the device was opened with.
    pub fn options(&self) -> &MeasuredOptions {
        &self.shared.options
    }

    /// The configuration of the model: a [`SimSsd`] built from it and sent the same writes and
    /// trims measures the same.
    pub fn sim_config(&self) -> &SimConfig {
        &self.shared.sim_config
    }

    /// Verifies the model's bookkeeping (maps, valid counts, per-handle counters); for tests.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.shared.model().check_invariants()
    }

    fn check_write(&self, offset: u64, len: u64, handle: PlacementHandle) -> Result<()> {
        self.geometry.check_range(offset, len)?;
        self.geometry.check_handle(handle)
    }
}

/// The model's shape for `pages` logical pages: the smallest whole number of reclaim units that
/// holds them with the overprovisioning asked for.
fn model_config(pages: u64, o: &MeasuredOptions) -> Result<SimConfig> {
    let page = u64::from(o.page_size);
    let candidates: Vec<u64> = match o.reclaim_unit_bytes {
        Some(ru) => vec![ru],
        None => {
            let mut v = vec![];
            let mut ru = DEFAULT_RECLAIM_UNIT_BYTES.max(page);
            while ru / page >= MIN_AUTO_RU_PAGES {
                v.push(ru);
                ru /= 2;
            }
            if v.is_empty() {
                v.push(DEFAULT_RECLAIM_UNIT_BYTES.max(page));
            }
            v
        }
    };
    if !(o.overprovisioning.is_finite() && o.overprovisioning > 0.0) {
        return Err(Error::Config(format!(
            "overprovisioning {} must be > 0",
            o.overprovisioning
        )));
    }
    let mut last = None;
    for ru in candidates {
        if ru == 0 || !ru.is_multiple_of(page) || ru / page > u64::from(u32::MAX) {
            return Err(Error::Config(format!(
                "reclaim unit of {ru} bytes must be a non-zero multiple of the {page}-byte page"
            )));
        }
        let ppr = ru / page;
        let mut units = (pages as f64 * (1.0 + o.overprovisioning) / ppr as f64).ceil() as u64;
        let cfg = loop {
            let units32 = u32::try_from(units).map_err(|_| {
                Error::Config(format!("{units} reclaim units of {ru} bytes are too many"))
            })?;
            let cfg = SimConfig {
                page_size: o.page_size,
                pages_per_erase_block: ppr as u32,
                erase_blocks_per_ru: 1,
                rus_per_group: units32,
                reclaim_groups: 1,
                overprovisioning: o.overprovisioning,
                handles: vec![o.isolation; usize::from(o.handles)],
                gc_reserve_rus: o.gc_reserve_rus,
                max_events: 1024,
                backing_file: None,
            };
            match cfg.layout() {
                // Float rounding may leave a page short: one more unit then.
                Ok(l) if u64::from(l.logical_pages) < pages => units += 1,
                Ok(_) => break Ok(cfg),
                Err(e) => break Err(e),
            }
        };
        match cfg {
            Ok(cfg) => return Ok(cfg),
            Err(e) => last = Some(e),
        }
    }
    let e = last.expect("at least one candidate reclaim unit size");
    Err(Error::Config(format!(
        "no model for {} bytes: {e}",
        pages * page
    )))
}

/// [`ConcurrentRead`] of a [`MeasuredDevice`]: its file's reads, counted as the device's.
struct MeasuredReads {
    data: crate::uring::FileReads,
    shared: Arc<Shared>,
    geometry: Geometry,
}

impl ConcurrentRead for MeasuredReads {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.geometry.check_range(offset, buf.len() as u64)?;
        self.data.read_at(offset, buf)?;
        self.shared
            .host_bytes_read
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl BlockDevice for MeasuredDevice {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn concurrent_reads(&self) -> Option<Arc<dyn ConcurrentRead>> {
        Some(Arc::new(MeasuredReads {
            data: self.data.file_reads(),
            shared: self.shared.clone(),
            geometry: self.geometry.clone(),
        }))
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.geometry.check_range(offset, buf.len() as u64)?;
        self.data.read(offset, buf)?;
        self.shared
            .host_bytes_read
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn write(&mut self, offset: u64, buf: &[u8], handle: PlacementHandle) -> Result<()> {
        let len = buf.len() as u64;
        self.check_write(offset, len, handle)?;
        // The file has no placement: the handle matters to the model only.
        self.data.write(offset, buf, PlacementHandle::DEFAULT)?;
        let ps = u64::from(self.geometry.block_size);
        self.shared
            .model()
            .write_pages(offset / ps, len / ps, handle)
    }

    fn trim(&mut self, offset: u64, len: u64) -> Result<()> {
        self.geometry.check_range(offset, len)?;
        self.data.trim(offset, len)?;
        let ps = u64::from(self.geometry.block_size);
        self.shared.model().deallocate_pages(offset / ps, len / ps)
    }

    fn flush(&mut self) -> Result<()> {
        self.data.flush()
    }

    /// Runs the batch on the file with the ring's queue depth, then tells the model about its
    /// writes under one lock. If the batch fails, the model counts the writes before the
    /// failing request (every one of them was issued and has completed).
    fn submit_batch(&mut self, batch: &mut [IoRequest<'_>]) -> Result<()> {
        for (index, r) in batch.iter().enumerate() {
            let checked = match r {
                IoRequest::Read { offset, buf } => {
                    self.geometry.check_range(*offset, buf.len() as u64)
                }
                IoRequest::Write {
                    offset,
                    buf,
                    handle,
                } => self.check_write(*offset, buf.len() as u64, *handle),
            };
            checked.map_err(|e| Error::Batch {
                index,
                source: Box::new(e),
            })?;
        }
        let result = {
            let mut on_file: Vec<IoRequest<'_>> = batch
                .iter_mut()
                .map(|r| match r {
                    IoRequest::Read { offset, buf } => IoRequest::Read {
                        offset: *offset,
                        buf,
                    },
                    IoRequest::Write { offset, buf, .. } => IoRequest::Write {
                        offset: *offset,
                        buf,
                        handle: PlacementHandle::DEFAULT,
                    },
                })
                .collect();
            self.data.submit_batch(&mut on_file)
        };
        let done = match &result {
            Ok(()) => batch.len(),
            Err(Error::Batch { index, .. }) => *index,
            Err(_) => 0,
        };
        let ps = u64::from(self.geometry.block_size);
        let mut read = 0u64;
        {
            let mut model = self.shared.model();
            for r in &batch[..done] {
                match r {
                    IoRequest::Read { buf, .. } => read += buf.len() as u64,
                    IoRequest::Write {
                        offset,
                        buf,
                        handle,
                    } => model.write_pages(offset / ps, buf.len() as u64 / ps, *handle)?,
                }
            }
        }
        if read > 0 {
            self.shared
                .host_bytes_read
                .fetch_add(read, Ordering::Relaxed);
        }
        result
    }
}

/// The model's FDP introspection, as [`SimSsd`] reports it: what a drive with this placement
/// would say after the same IO since the device was opened.
impl FdpLogs for MeasuredDevice {
    fn fdp_stats(&mut self) -> Result<FdpStats> {
        self.shared.model().fdp_stats()
    }

    fn ruh_status(&mut self) -> Result<Vec<RuhStatus>> {
        self.shared.model().ruh_status()
    }

    fn fdp_events(&mut self) -> Result<Vec<FdpEvent>> {
        self.shared.model().fdp_events()
    }

    fn fdp_configurations(&mut self) -> Result<FdpConfigurations> {
        self.shared.model().fdp_configurations()
    }
}

// ------------------------------------------------------------------------------ spec strings

/// A measured device as a string: `measured:PATH:SIZE[:KEY=VALUE,KEY=VALUE...]`.
///
/// `SIZE` is bytes with an optional unit ([`parse_size`]); `PATH` may contain `:`. Keys (all
/// optional, defaults from [`MeasuredOptions::default`]):
///
/// | key | value | option |
/// |---|---|---|
/// | `handles` | 1..=256 | [`MeasuredOptions::handles`] |
/// | `op` | a fraction (`0.07`) or a percentage (`7%`) | [`MeasuredOptions::overprovisioning`] |
/// | `ru` | a size (`1MiB`) | [`MeasuredOptions::reclaim_unit_bytes`] |
/// | `isolation` | `initial` or `persistent` | [`MeasuredOptions::isolation`] |
/// | `reserve` | reclaim units | [`MeasuredOptions::gc_reserve_rus`] |
/// | `page` | a size (`4KiB`) | [`MeasuredOptions::page_size`] |
/// | `qd` | 1..=4096 | [`MeasuredOptions::queue_depth`] |
/// | `direct` | `true`/`false` | [`MeasuredOptions::direct`] |
///
/// Example: `measured:/var/lib/lachesis/flash0.img:1GiB:handles=4,op=10%`.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredSpec {
    pub path: PathBuf,
    pub size_bytes: u64,
    pub options: MeasuredOptions,
}

impl MeasuredSpec {
    /// Parses `measured:PATH:SIZE[:KEY=VALUE,...]`.
    pub fn parse(s: &str) -> Result<MeasuredSpec> {
        let usage = "expected measured:PATH:SIZE[:KEY=VALUE,...], e.g. \
                     measured:/var/lib/lachesis/flash0.img:1GiB:handles=8,op=7%";
        let bad = |why: String| Error::Config(format!("invalid device spec {s:?}: {why}"));
        let rest = s
            .strip_prefix(SPEC_PREFIX)
            .ok_or_else(|| bad(format!("does not start with {SPEC_PREFIX:?}; {usage}")))?;
        let (mut rest, last) = rest
            .rsplit_once(':')
            .ok_or_else(|| bad(usage.to_string()))?;
        let mut options = MeasuredOptions::default();
        let size = if last.contains('=') {
            for kv in last.split(',') {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| bad(format!("option {kv:?} is not KEY=VALUE")))?;
                set_option(&mut options, k.trim(), v.trim()).map_err(bad)?;
            }
            let (path, size) = rest
                .rsplit_once(':')
                .ok_or_else(|| bad(usage.to_string()))?;
            rest = path;
            size
        } else {
            last
        };
        if rest.is_empty() {
            return Err(bad(format!("empty path; {usage}")));
        }
        let size_bytes = parse_size(size).map_err(|e| bad(e.to_string()))?;
        Ok(MeasuredSpec {
            path: PathBuf::from(rest),
            size_bytes,
            options,
        })
    }

    /// Opens the device the spec names.
    pub fn open(&self) -> Result<MeasuredDevice> {
        MeasuredDevice::open(&self.path, self.size_bytes, self.options.clone())
    }
}

fn set_option(o: &mut MeasuredOptions, key: &str, value: &str) -> std::result::Result<(), String> {
    let num = |v: &str| -> std::result::Result<u64, String> {
        v.parse::<u64>()
            .map_err(|_| format!("{key}={v:?}: expected a whole number"))
    };
    let small = |v: &str| -> std::result::Result<u32, String> {
        u32::try_from(num(v)?).map_err(|_| format!("{key}={v:?}: too large"))
    };
    match key {
        "handles" => {
            o.handles = u16::try_from(num(value)?)
                .ok()
                .filter(|h| (1..=256).contains(h))
                .ok_or_else(|| format!("handles={value:?}: need 1..=256"))?
        }
        "op" => {
            let (digits, scale) = match value.strip_suffix('%') {
                Some(p) => (p, 100.0),
                None => (value, 1.0),
            };
            let f: f64 = digits
                .trim()
                .parse()
                .map_err(|_| format!("op={value:?}: expected a fraction or a percentage"))?;
            if !(f.is_finite() && f > 0.0) {
                return Err(format!("op={value:?}: must be > 0"));
            }
            o.overprovisioning = f / scale;
        }
        "ru" => o.reclaim_unit_bytes = Some(parse_size(value).map_err(|e| e.to_string())?),
        "isolation" => {
            o.isolation = match value {
                "initial" => RuhType::InitiallyIsolated,
                "persistent" => RuhType::PersistentlyIsolated,
                _ => {
                    return Err(format!(
                        "isolation={value:?}: expected initial or persistent"
                    ))
                }
            }
        }
        "reserve" => o.gc_reserve_rus = small(value)?,
        "page" => {
            o.page_size = u32::try_from(parse_size(value).map_err(|e| e.to_string())?)
                .map_err(|_| format!("page={value:?}: too large"))?
        }
        "qd" => o.queue_depth = small(value)?,
        "direct" => {
            o.direct = match value {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" => false,
                _ => return Err(format!("direct={value:?}: expected true or false")),
            }
        }
        _ => {
            return Err(format!(
                "unknown option {key:?} (handles, op, ru, isolation, reserve, page, qd, direct)"
            ))
        }
    }
    Ok(())
}

impl FromStr for MeasuredSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<MeasuredSpec> {
        MeasuredSpec::parse(s)
    }
}

/// The spec string: the path, the size in bytes, and the options that differ from the
/// defaults (or that the string form cannot carry: those are dropped). Parses back to the
/// same spec for every option the string form has.
impl fmt::Display for MeasuredSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{SPEC_PREFIX}{}:{}",
            self.path.display(),
            self.size_bytes
        )?;
        let d = MeasuredOptions::default();
        let o = &self.options;
        let mut opts = Vec::new();
        if o.handles != d.handles {
            opts.push(format!("handles={}", o.handles));
        }
        if o.overprovisioning != d.overprovisioning {
            opts.push(format!("op={}", o.overprovisioning));
        }
        if let Some(ru) = o.reclaim_unit_bytes {
            opts.push(format!("ru={ru}"));
        }
        if o.isolation != d.isolation {
            let v = match o.isolation {
                RuhType::PersistentlyIsolated => "persistent",
                _ => "initial",
            };
            opts.push(format!("isolation={v}"));
        }
        if o.gc_reserve_rus != d.gc_reserve_rus {
            opts.push(format!("reserve={}", o.gc_reserve_rus));
        }
        if o.page_size != d.page_size {
            opts.push(format!("page={}", o.page_size));
        }
        if o.queue_depth != d.queue_depth {
            opts.push(format!("qd={}", o.queue_depth));
        }
        if o.direct != d.direct {
            opts.push(format!("direct={}", o.direct));
        }
        if !opts.is_empty() {
            write!(f, ":{}", opts.join(","))?;
        }
        Ok(())
    }
}

/// Parses a size: a number of bytes, optionally with a unit: `B`, `KiB`, `MiB`, `GiB`, `TiB`
/// (powers of 1024; `K`, `M`, `G`, `T` mean the same) or `KB`, `MB`, `GB`, `TB` (powers of
/// 1000), case-insensitive, as the agent's `--device` sizes. Zero is refused.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let bad = |why: &str| Error::Config(format!("invalid size {s:?}: {why}"));
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(bad(
            "expected a number of bytes with an optional unit, e.g. 1GiB, 512MiB, 4096",
        ));
    }
    let n: u64 = digits.parse().map_err(|_| bad("number too large"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(bad(
                "unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)",
            ))
        }
    };
    let bytes = n.checked_mul(mult).ok_or_else(|| bad("too large"))?;
    if bytes == 0 {
        return Err(bad("must be at least one byte"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_is_sized_from_the_device() {
        // 1 GiB at 7%: 1 MiB units, enough of them to hold the pages plus 7%.
        let o = MeasuredOptions::default();
        let cfg = model_config(1 << 18, &o).unwrap();
        let l = cfg.layout().unwrap();
        assert_eq!(l.pages_per_ru, 256);
        assert!(u64::from(l.logical_pages) >= 1 << 18);
        assert_eq!(l.total_rus, 1096); // ceil(1024 × 1.07)
                                       // 16 MiB: too small for 1 MiB units with 8 handles; the default shrinks the unit.
        let cfg = model_config(4096, &o).unwrap();
        let l = cfg.layout().unwrap();
        assert!(l.pages_per_ru < 256 && l.pages_per_ru >= 4, "{l:?}");
        assert!(u64::from(l.logical_pages) >= 4096);
        // An explicit unit size is kept, or refused.
        let fixed = MeasuredOptions {
            reclaim_unit_bytes: Some(1 << 20),
            ..o.clone()
        };
        assert!(matches!(model_config(4096, &fixed), Err(Error::Config(_))));
        let odd = MeasuredOptions {
            reclaim_unit_bytes: Some(5000),
            ..o
        };
        assert!(matches!(model_config(1 << 18, &odd), Err(Error::Config(_))));
    }

    #[test]
    fn sizes_parse_like_the_agents() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("512m").unwrap(), 512 << 20);
        assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
        for bad in ["", "GiB", "0", "1.5GiB", "1XB", "17179869184GiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
