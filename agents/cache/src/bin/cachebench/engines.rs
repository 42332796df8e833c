//! The simulated device and the engine under test, built from the command line.

use std::sync::{Arc, Mutex};

use lachesis_cache::hybrid::SmallFactory;
use lachesis_cache::workload::LARGE_MIN;
use lachesis_cache::{
    DataSim, Engine, EngineStats, Hybrid, HybridConfig, Loc, LocConfig, PartStats, SetAssoc,
    SetAssocConfig, SharedDevice, Span,
};
use lachesis_device::nvme::logpage::{FdpStats, RuhType};
use lachesis_device::sim::SimConfig;
use lachesis_device::PlacementHandle;

use lachesis_cache::fairywren::{FairyWren, FairyWrenConfig, Victims};
use lachesis_cache::kangaroo::{Kangaroo, KangarooConfig};

use crate::args::{Args, EngineKind, FwVictims, Handles, SmallEngine};
use crate::steady::Point;

/// The simulated device's page (its logical block).
pub const PAGE_BYTES: u64 = 4096;

pub enum RunError {
    /// The command line asks for something impossible (exit 2).
    Input(String),
    Engine(lachesis_cache::Error),
}

impl From<lachesis_cache::Error> for RunError {
    fn from(e: lachesis_cache::Error) -> Self {
        match e {
            lachesis_cache::Error::Config(m) => RunError::Input(m),
            lachesis_cache::Error::Device(lachesis_device::Error::Config(m)) => RunError::Input(
                format!("simulated device (--flash-mib, --utilization, --op, --ru-kib): {m}"),
            ),
            e => RunError::Engine(e),
        }
    }
}

/// Engine and device counters at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub stats: EngineStats,
    pub fdp: FdpStats,
    pub parts: Vec<PartStats>,
    pub counters: Vec<(String, u64)>,
    /// Device pages written at least once.
    pub pages_written: u64,
}

impl Snapshot {
    pub fn point(&self) -> Point {
        Point {
            host_bytes: u64::try_from(self.fdp.host_bytes_written).unwrap_or(u64::MAX),
            media_bytes: u64::try_from(self.fdp.media_bytes_written).unwrap_or(u64::MAX),
            pages_written: self.pages_written,
            parts: self.parts.clone(),
        }
    }
}

pub struct Bench {
    pub engine: Box<dyn Engine>,
    pub data: Arc<Mutex<DataSim>>,
    /// Bytes of flash the cache uses, and the device's logical capacity.
    pub flash_bytes: u64,
    pub device_bytes: u64,
}

impl Bench {
    pub fn snapshot(&self) -> Snapshot {
        let data = self.data.lock().unwrap_or_else(|p| p.into_inner());
        Snapshot {
            stats: self.engine.stats(),
            fdp: data.fdp_statistics(),
            parts: self.engine.parts(),
            counters: self.engine.counters(),
            pages_written: data.total_pages_ever_written(),
        }
    }

    /// Logical pages of the device, and of the parts the engine writes in (an engine may
    /// leave the end of its span unused: a partial region, set or erase unit).
    pub fn pages(&self) -> (u64, u64) {
        let parts = self.engine.parts();
        let used = if parts.is_empty() {
            self.flash_bytes
        } else {
            parts.iter().map(|p| p.capacity_bytes).sum()
        };
        (self.device_bytes / PAGE_BYTES, used / PAGE_BYTES)
    }
}

/// Builds the device (sized so the cache occupies `--utilization` of its logical space) and
/// the engine on it.
pub fn build(args: &Args) -> Result<Bench, RunError> {
    let ru = args.ru_kib * 1024;
    let flash = (args.flash_mib << 20) / ru * ru;
    if flash < 2 * ru {
        return Err(RunError::Input(format!(
            "--flash-mib {} holds fewer than two {} KiB reclaim units",
            args.flash_mib, args.ru_kib
        )));
    }
    let logical = ((flash as f64 / args.utilization).ceil() as u64).div_ceil(ru) * ru;
    let rus = ((logical as f64 * (1.0 + args.op)) / ru as f64).ceil() as u32 + 1;
    let gc_reserve_rus = 2;
    let handles = streams(args);
    // --wren-span: the same reclaim units, all but the device's own (an open unit per handle,
    // one for its GC, its reserve, and one so that its spare exceeds them) in the span.
    let (flash, op) = if args.wren_span {
        let own = handles as u32 + 1 + gc_reserve_rus + 1;
        let span_rus = rus.checked_sub(own).filter(|&n| n >= 2).ok_or_else(|| {
            RunError::Input(format!(
                "--wren-span: {rus} reclaim units, the device keeps {own}"
            ))
        })?;
        let pages = u64::from(span_rus) * (ru / PAGE_BYTES);
        let physical = u64::from(rus) * (ru / PAGE_BYTES);
        // floor(physical / (1 + op)) is then exactly `pages`.
        (
            u64::from(span_rus) * ru,
            physical as f64 / (pages as f64 + 0.5) - 1.0,
        )
    } else {
        (flash, args.op)
    };
    let config = SimConfig {
        page_size: PAGE_BYTES as u32,
        pages_per_erase_block: (ru / 4096) as u32,
        erase_blocks_per_ru: 1,
        rus_per_group: rus,
        reclaim_groups: 1,
        overprovisioning: op,
        handles: vec![RuhType::InitiallyIsolated; handles],
        gc_reserve_rus,
        ..SimConfig::default()
    };
    let mut sim = DataSim::new(config).map_err(RunError::from)?;
    if args.no_discard {
        sim.ignore_deallocate();
    }
    let data = Arc::new(Mutex::new(sim));
    let device_bytes = {
        use lachesis_device::BlockDevice;
        data.lock().unwrap().geometry().capacity_bytes
    };
    let dev: SharedDevice = data.clone();
    let span = Span {
        device: dev,
        offset: 0,
        len: flash,
    };
    let handle = |n: u16| match args.handles {
        Handles::Shared => PlacementHandle(0),
        Handles::Separate => PlacementHandle(n),
    };
    let second = handle(1);
    let engine: Box<dyn Engine> = match args.engine {
        EngineKind::Loc | EngineKind::LogOnly => {
            Box::new(Loc::new(LocConfig::new(span, PlacementHandle(0)))?)
        }
        EngineKind::SetAssoc => Box::new(SetAssoc::new(SetAssocConfig::new(
            span,
            PlacementHandle(0),
        ))?),
        EngineKind::Kangaroo => Box::new(kangaroo(span, PlacementHandle(0), second, args)?),
        EngineKind::Fairywren => Box::new(FairyWren::new(fairywren(
            span,
            [PlacementHandle(0), second, handle(2)],
            args,
        ))?),
        EngineKind::Hybrid => {
            let small = small_factory(args, [second, handle(2), handle(3)]);
            Box::new(Hybrid::new(HybridConfig {
                span: span.clone(),
                flash_bytes: flash,
                dram_bytes: (args.dram_mib << 20) as usize,
                small_fraction: args.small_fraction,
                // Each FairyWREN erase unit is one reclaim unit.
                small_align: if args.small_engine == SmallEngine::Fairywren {
                    ru
                } else {
                    0
                },
                small_threshold: LARGE_MIN as usize,
                shards: 16,
                loc: LocConfig::new(span, PlacementHandle(0)),
                small,
            })?)
        }
    };
    Ok(Bench {
        engine,
        data,
        flash_bytes: flash,
        device_bytes,
    })
}

/// Streams the engine writes at once, so handles the device has: Kangaroo 2 (KLog, KSet),
/// FairyWREN 3 (FwLog, hot and cold subsets), a hybrid the log's and its small engine's.
fn streams(args: &Args) -> usize {
    match (args.engine, args.small_engine) {
        (EngineKind::Fairywren, _) => 3,
        (EngineKind::Hybrid, SmallEngine::Fairywren) => 4,
        (EngineKind::Hybrid, SmallEngine::Kangaroo) => 3,
        _ => 2,
    }
}

/// FairyWREN with Table 4's defaults but the log share, threshold and subsets of the command
/// line; handles FwLog, hot, cold.
fn fairywren(span: Span, [log, hot, cold]: [PlacementHandle; 3], args: &Args) -> FairyWrenConfig {
    let mut config = FairyWrenConfig::new(span, log, hot, cold);
    config.log_fraction = args.log_fraction;
    config.threshold = args.threshold;
    config.cold_every = args.cold_every;
    config.cold_pages = args.cold_pages;
    config.op = args.fwsets_op;
    config.victims = match args.fwsets_victims {
        FwVictims::FifoPlus => Victims::FifoPlus,
        FwVictims::Greedy => Victims::Greedy,
        FwVictims::CostBenefit => Victims::CostBenefit,
    };
    config
}

/// Kangaroo with Table 3's defaults but the log share and threshold of the command line: KLog
/// on `klog`, KSet on `kset`.
fn kangaroo(
    span: Span,
    klog: PlacementHandle,
    kset: PlacementHandle,
    args: &Args,
) -> lachesis_cache::Result<Kangaroo> {
    let mut config = KangarooConfig::new(span, klog, kset);
    config.log_fraction = args.log_fraction;
    config.threshold = args.threshold;
    Kangaroo::new(config.fit_partitions())
}

/// The hybrid's small-object engine (the log has handle 0), with the log share and threshold
/// of the command line, like the engines alone.
fn small_factory(args: &Args, handles: [PlacementHandle; 3]) -> SmallFactory {
    let kind = args.small_engine;
    let args = args.clone();
    Box::new(move |span: Span| match kind {
        SmallEngine::SetAssoc => {
            Ok(Box::new(SetAssoc::new(SetAssocConfig::new(span, handles[0]))?) as Box<dyn Engine>)
        }
        SmallEngine::Kangaroo => {
            Ok(Box::new(kangaroo(span, handles[0], handles[1], &args)?) as Box<dyn Engine>)
        }
        // The hybrid deallocated the span before building its small engine: nothing to trim.
        SmallEngine::Fairywren => {
            Ok(Box::new(FairyWren::open(fairywren(span, handles, &args))?) as Box<dyn Engine>)
        }
    })
}
