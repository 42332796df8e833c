//! Command line of lachesis-cachebench.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// The large-object log alone.
    Loc,
    /// The set-associative cache (CacheLib BigHash) alone.
    SetAssoc,
    /// Kangaroo (KLog + KSet).
    Kangaroo,
    /// FairyWREN (FwLog + hot/cold FwSets on erase units it reclaims itself, one per reclaim
    /// unit); its three streams get handles 0, 1, 2 (all 0 with --handles shared).
    Fairywren,
    /// The log used for small objects too: a log-structured cache with a full DRAM index
    /// (Kangaroo's "LS" baseline).
    LogOnly,
    /// A whole cache: DRAM in front, a small-object engine (--small-engine) on
    /// --small-fraction of the flash for objects under 2 KiB, the log for larger ones.
    Hybrid,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SmallEngine {
    SetAssoc,
    Kangaroo,
    /// FairyWREN's small-object cache; its span is aligned to reclaim units (its erase units).
    Fairywren,
}

/// FairyWREN: how FwSets' garbage collection picks the erase unit to reclaim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FwVictims {
    /// §4.4: the oldest unit with a dead page, hot and cold units in one queue.
    FifoPlus,
    /// The unit with the fewest live pages.
    Greedy,
    /// Sprite LFS's (1 - u) * age / (1 + u): old cold units before young hot ones.
    CostBenefit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Handles {
    /// Every part of the engine writes with placement handle 0: a conventional (LBAD) SSD,
    /// whose garbage collection mixes every stream.
    Shared,
    /// Each part gets its own handle: KLog 0 / KSet 1; FwLog 0 / hot 1 / cold 2; in a hybrid
    /// the log 0 and the small engine's parts 1, 2 (and 3).
    Separate,
}

/// Replays a trace or a synthetic workload through a real flash cache engine on the simulated
/// FDP SSD and reports miss ratio, write amplification (application and device level), device
/// write rate, DRAM per object and throughput.
#[derive(Clone, Debug, Parser)]
#[command(name = "lachesis-cachebench", version)]
pub struct Args {
    #[arg(long, value_enum, default_value = "set-assoc")]
    pub engine: EngineKind,

    /// Replay this trace (formats of lachesis-mrc) instead of the synthetic workload. Keys come
    /// from the trace; sizes too unless --sizes is given.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Trace format (oracle, cloudphysics, arc, msr, lines); guessed from the name if absent.
    #[arg(long)]
    pub format: Option<String>,
    /// Stop after this many requests of the trace (0 = all).
    #[arg(long, default_value_t = 0)]
    pub limit: u64,

    /// Synthetic: distinct objects.
    #[arg(long, default_value_t = 1_000_000)]
    pub objects: u64,
    /// Synthetic: requests.
    #[arg(long, default_value_t = 4_000_000)]
    pub requests: u64,
    /// Synthetic: Zipf exponent of key popularity.
    #[arg(long, default_value_t = 0.9)]
    pub zipf: f64,
    /// Object sizes: meta, twitter, wide or fixed:N (default: meta for synthetic, the trace's own
    /// sizes for a trace).
    #[arg(long)]
    pub sizes: Option<String>,
    /// Synthetic: share of requests that are deletes.
    #[arg(long, default_value_t = 0.0)]
    pub delete_ratio: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Flash the cache uses (MiB).
    #[arg(long, default_value_t = 256)]
    pub flash_mib: u64,
    /// Share of the device's logical capacity the cache occupies (1.0 = 100% utilisation).
    #[arg(long, default_value_t = 1.0)]
    pub utilization: f64,
    /// Device overprovisioning.
    #[arg(long, default_value_t = 0.07)]
    pub op: f64,
    /// Device reclaim unit (KiB); the log's regions are one reclaim unit.
    #[arg(long, default_value_t = 1024)]
    pub ru_kib: u64,
    #[arg(long, value_enum, default_value = "separate")]
    pub handles: Handles,
    /// The device ignores the engines' deallocations (a cache on a conventional SSD without
    /// TRIM): what they trim stays valid for the device's garbage collection until rewritten.
    #[arg(long)]
    pub no_discard: bool,
    /// The device is the one `--flash-mib`, `--op` and `--ru-kib` give a conventional SSD, but
    /// the cache spans all its reclaim units except those the simulated device keeps for
    /// itself (an open unit per handle, one for its garbage collection, its reserve, one
    /// spare): a WREN device exposing its over-provisioning to the cache, as in FairyWREN
    /// §6.1 (FairyWREN on ZNS uses 383 of 400 GB, Kangaroo on LBAD 376). Needs
    /// `--utilization 1` and separate handles.
    #[arg(long)]
    pub wren_span: bool,

    /// Hybrid: DRAM cache in front (MiB).
    #[arg(long, default_value_t = 0)]
    pub dram_mib: u64,
    /// Hybrid: the small-object engine.
    #[arg(long, value_enum, default_value = "set-assoc")]
    pub small_engine: SmallEngine,
    /// Hybrid: share of flash for the small-object engine.
    #[arg(long, default_value_t = 0.1)]
    pub small_fraction: f64,
    /// Kangaroo and FairyWREN (alone or as a hybrid's small engine): share of their flash for
    /// the log (KLog, FwLog).
    #[arg(long, default_value_t = 0.05)]
    pub log_fraction: f64,
    /// Kangaroo and FairyWREN: log objects of one set needed to write the set when the log
    /// makes room (threshold admission).
    #[arg(long, default_value_t = 2)]
    pub threshold: u32,
    /// FairyWREN: 4 KiB pages of each set's cold subset (the hot one is one page).
    #[arg(long, default_value_t = 1)]
    pub cold_pages: u32,
    /// FairyWREN: share of FwSets' erase units not holding live sets (its over-provisioning,
    /// Table 4: 5%), so garbage collection finds victims with dead subsets.
    #[arg(long, default_value_t = 0.05)]
    pub fwsets_op: f64,
    /// FairyWREN: FwSets' victim choice in garbage collection.
    #[arg(long, value_enum, default_value = "cost-benefit")]
    pub fwsets_victims: FwVictims,
    /// FairyWREN: every n-th update of a set re-splits its hot and cold subsets.
    #[arg(long, default_value_t = 5)]
    pub cold_every: u8,
    /// Probability that a missed object is inserted (all engines; matches write budgets).
    #[arg(long, default_value_t = 1.0)]
    pub admit: f64,
    /// Admission by reuse: a missed object is set only if missed before while its trace is in
    /// a table of this many 1-byte key fingerprints (0: off; see `admission.rs`). With
    /// --admit, both must agree. Its DRAM is reported as `admission_dram_bytes`.
    #[arg(long, default_value_t = 0)]
    pub admit_reuse: usize,
    /// Share of requests (from the start) not measured, at least: the warm-up goes on until
    /// every device address the cache uses was written and every log evicts.
    #[arg(long, default_value_t = 0.25)]
    pub warmup: f64,
    /// Print the figures even when the run did not reach steady state (marked so, for smoke
    /// tests); without it such a run prints no figure and exits 3.
    #[arg(long)]
    pub allow_transient: bool,

    /// Instead of the workload: set new keys (0, 1, 2..., sizes by --sizes) until the engine
    /// holds this many objects, or until as many sets again as it holds raised that count by
    /// less than 0.1% (the cache is full below the target: give it more --flash-mib). For DRAM
    /// per object at a given object count; the report's `fill` says which. A fill has no
    /// steady state, so it implies --allow-transient. 0: no fill, the workload.
    #[arg(long, default_value_t = 0)]
    pub fill_objects: u64,

    /// Print the report as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

impl Args {
    /// Checks what clap cannot; the message names the flag.
    pub fn check(&self) -> Result<(), String> {
        let frac = |name: &str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(format!("--{name} {v}: must be between {lo} and {hi}"))
            }
        };
        frac("utilization", self.utilization, 0.01, 1.0)?;
        frac("op", self.op, 0.01, 10.0)?;
        frac("admit", self.admit, 0.0, 1.0)?;
        frac("warmup", self.warmup, 0.0, 0.99)?;
        frac("delete-ratio", self.delete_ratio, 0.0, 1.0)?;
        frac("small-fraction", self.small_fraction, 0.0, 0.9)?;
        frac("log-fraction", self.log_fraction, 0.001, 0.5)?;
        frac("fwsets-op", self.fwsets_op, 0.001, 0.49)?;
        if self.threshold == 0 || self.cold_every == 0 || !(1..=15).contains(&self.cold_pages) {
            return Err(
                "--threshold and --cold-every must be at least 1, --cold-pages 1 to 15".into(),
            );
        }
        if self.wren_span && (self.utilization != 1.0 || self.handles != Handles::Separate) {
            return Err("--wren-span needs --utilization 1 and --handles separate".into());
        }
        if self.flash_mib == 0 || self.flash_mib > 16 << 10 {
            return Err(format!("--flash-mib {}: must be 1..=16384", self.flash_mib));
        }
        if self.ru_kib < 4 || !self.ru_kib.is_multiple_of(4) {
            return Err(format!("--ru-kib {}: must be a multiple of 4", self.ru_kib));
        }
        if self.fill_objects > 0 && self.trace.is_some() {
            return Err("--fill-objects sets new keys of its own: not with --trace".into());
        }
        if self.trace.is_none() && self.requests == 0 {
            return Err("--requests must be > 0".into());
        }
        Ok(())
    }
}
