//! Command-line arguments.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// Miss-ratio curves of a block or object trace: exact LRU, SHARDS
/// (fixed-rate, fixed-size, with or without the SHARDS_adj correction),
/// miniature and full simulation of LRU, FIFO, RRIP and S3-FIFO.
#[derive(Debug, Parser)]
#[command(name = "lachesis-mrc", version)]
pub struct Args {
    /// Trace file (zstd-compressed text traces are read as they are).
    pub trace: PathBuf,

    /// Trace format; `auto` guesses from the name (.bin oracle, .lis arc,
    /// .txt lines, .csv cloudphysics if it has its header, else msr).
    #[arg(short, long, default_value = "auto")]
    pub format: String,

    /// Algorithms to run, side by side (comma-separated).
    #[arg(
        short,
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "exact"
    )]
    pub algorithm: Vec<Algorithm>,

    /// Sampling rate R for shards-fixed-rate and minisim.
    #[arg(long, default_value_t = 0.01)]
    pub rate: f64,

    /// Most keys kept by shards-fixed-size.
    #[arg(long, default_value_t = 8192)]
    pub smax: usize,

    /// Correction for the SHARDS algorithms and minisim: `on` the default
    /// (regression) correction, `shards` the paper's SHARDS_adj, `off` none;
    /// `both` runs on and off side by side, `all` the three.
    #[arg(long, value_enum, default_value = "on")]
    pub adj: OnOff,

    /// Minisim: divide by the sample's rate measured on keys (its distinct
    /// keys over the stream's, from a HyperLogLog sketch) rather than by
    /// --rate. Only with a correction.
    #[arg(long, value_enum, default_value = "on")]
    pub key_rate: OnOffArg,

    /// Minisim: the mean of this many independent samples (hash salts
    /// 0..N), each at --rate; costs N times one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub samples: u32,

    /// Policies for minisim and full-sim (comma-separated: lru, fifo, rrip, s3fifo).
    #[arg(long, value_delimiter = ',', default_value = "lru")]
    pub policy: Vec<String>,

    /// What a cache size counts.
    #[arg(long, value_enum, default_value = "objects")]
    pub unit: UnitArg,

    /// Cache sizes to evaluate (comma-separated, in --unit; K, M, G suffixes
    /// are powers of 1024). Overrides --sizes.
    #[arg(long, value_delimiter = ',')]
    pub cache_sizes: Vec<String>,

    /// Number of cache sizes spread over the working set (needs a first pass
    /// over the trace to measure it).
    #[arg(long, default_value_t = 32)]
    pub sizes: usize,

    /// How --sizes are spread.
    #[arg(long, value_enum, default_value = "log")]
    pub spacing: SpacingArg,

    /// Count only read requests.
    #[arg(long)]
    pub reads_only: bool,

    /// Emit a curve every this many references, decaying what came before.
    #[arg(long)]
    pub window: Option<u64>,

    /// Decay factor applied to past windows (with --window).
    #[arg(long, default_value_t = lachesis_mrc::decay::DEFAULT_DECAY)]
    pub decay: f64,

    /// Output format.
    #[arg(short, long, value_enum, default_value = "json")]
    pub output: OutputFormat,

    /// Write the output here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,

    /// Also draw the curves into this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,

    /// Plot title (default: the trace's file name).
    #[arg(long)]
    pub title: Option<String>,

    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Algorithm {
    Exact,
    ShardsFixedRate,
    ShardsFixedSize,
    Minisim,
    /// Unsampled simulation of --policy at every size.
    #[value(alias = "full-simulation")]
    FullSim,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
    Shards,
    Both,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOffArg {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UnitArg {
    Objects,
    Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpacingArg {
    Log,
    Linear,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Json,
    Csv,
}
