//! lachesis-devsim: runs the simulated FDP SSD on a stream mix and prints the measured DLWA.
//! The controller's placement broker calls it to predict a device's DLWA from the streams it
//! placed (the paper's closed form assumes all overprovisioning serves the random streams,
//! which stops holding at low overprovisioning with untrimmed logs; the simulator does not).
//!
//! stdin (JSON):
//!   {"device": {"reclaim_units": 1024, "pages_per_ru": 256, "overprovisioning": 0.1, "handles": 3},
//!    "streams": [{"pattern": "random" | "sequential", "space": 0.02, "writes": 0.25,
//!                 "handle": 0, "trim": false}, ...],
//!    "warmup_turns": 3, "measure_turns": 6, "seed": 42}
//! `space` is the stream's share of the logical space, `writes` its share of host writes (they
//! sum to 1). A turn is the host writes in which the slowest stream rewrites its space once.
//! stdout: {"dlwa": 1.02, "host_pages": ..., "media_pages": ..., "logical_pages": ..., "turn_pages": ...}
//! Bad input: a message on stderr and exit 2. Progress bar on stderr.

use std::io::Read;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lachesis_device::nvme::logpage::RuhType;
use lachesis_device::sim::workload::{measure, Mix, Region, Stream};
use lachesis_device::sim::{SimConfig, SimSsd};
use lachesis_device::PlacementHandle;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    device: Device,
    streams: Vec<StreamSpec>,
    #[serde(default = "default_warmup")]
    warmup_turns: f64,
    #[serde(default = "default_measure")]
    measure_turns: f64,
    #[serde(default)]
    seed: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Device {
    reclaim_units: u32,
    #[serde(default = "default_ppr")]
    pages_per_ru: u32,
    overprovisioning: f64,
    handles: u16,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Pattern {
    Random,
    Sequential,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamSpec {
    pattern: Pattern,
    space: f64,
    writes: f64,
    handle: u16,
    #[serde(default)]
    trim: bool,
}

fn default_warmup() -> f64 {
    3.0
}
fn default_measure() -> f64 {
    6.0
}
fn default_ppr() -> u32 {
    256
}

/// Longest turn, in device capacities: a stream with a tiny write share would otherwise make
/// the run last for ever.
const MAX_TURN_CAPACITIES: f64 = 20.0;

fn run(input: Input) -> Result<serde_json::Value, String> {
    let d = &input.device;
    if d.pages_per_ru < 4 || !d.pages_per_ru.is_multiple_of(4) {
        return Err("device.pages_per_ru must be a positive multiple of 4".into());
    }
    if d.handles == 0 {
        return Err("device.handles must be at least 1".into());
    }
    let warm_ok = input.warmup_turns.is_finite() && input.warmup_turns >= 0.0;
    if !(warm_ok && input.measure_turns.is_finite() && input.measure_turns > 0.0) {
        return Err("warmup_turns must be >= 0 and measure_turns > 0".into());
    }
    let mut ssd = SimSsd::new(SimConfig {
        pages_per_erase_block: d.pages_per_ru / 4,
        erase_blocks_per_ru: 4,
        rus_per_group: d.reclaim_units,
        overprovisioning: d.overprovisioning,
        handles: vec![RuhType::InitiallyIsolated; usize::from(d.handles)],
        ..Default::default()
    })
    .map_err(|e| format!("device: {e}"))?;
    let n = ssd.logical_pages();
    let ppr = u64::from(ssd.pages_per_ru());
    if input.streams.is_empty() {
        return Err("streams: at least one stream is needed".into());
    }
    let mut start = 0u64;
    let mut streams = Vec::new();
    let mut turn = 0f64;
    for (i, s) in input.streams.iter().enumerate() {
        if !(s.space > 0.0 && s.space <= 1.0 && (0.0..=1.0).contains(&s.writes)) {
            return Err(format!(
                "streams[{i}]: space must be in (0, 1] and writes in [0, 1]"
            ));
        }
        if s.handle >= d.handles {
            return Err(format!(
                "streams[{i}].handle {} is not one of the device's {} handles",
                s.handle, d.handles
            ));
        }
        let mut pages = (s.space * n as f64).round() as u64;
        if s.trim {
            pages = pages / ppr * ppr;
        }
        if pages == 0 {
            return Err(format!(
                "streams[{i}]: space {} is less than one reclaim unit",
                s.space
            ));
        }
        if start + pages > n {
            // Rounding may overshoot a 100%-utilised device by a page or two.
            if start + pages - n <= input.streams.len() as u64 && !s.trim {
                pages = n - start;
            } else {
                return Err(format!(
                    "streams[..={i}]: spaces add up to more than the device"
                ));
            }
        }
        let region = Region { start, pages };
        start += pages;
        let handle = PlacementHandle(s.handle);
        let stream = match s.pattern {
            Pattern::Random => Stream::Random { region, handle },
            Pattern::Sequential => Stream::Log {
                region,
                handle,
                trim_pages: s.trim.then_some(ppr),
                cursor: 0,
            },
        };
        if s.writes > 0.0 {
            turn = turn.max(pages as f64 / s.writes);
        }
        streams.push((s.writes, stream));
    }
    let turn = turn.min(MAX_TURN_CAPACITIES * n as f64).max(n as f64 / 4.0) as u64;
    let mut mix = Mix::new(streams, input.seed).map_err(|e| format!("streams: {e}"))?;
    let warm = (input.warmup_turns * turn as f64) as u64;
    let meas = ((input.measure_turns * turn as f64) as u64).max(1);
    let bar = ProgressBar::with_draw_target(Some(warm + meas), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {percent}% devsim")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let m = measure(&mut ssd, &mut mix, warm, meas, |done| {
        bar.set_position(done)
    })
    .map_err(|e| format!("simulation: {e}"))?;
    bar.finish_and_clear();
    Ok(serde_json::json!({
        "dlwa": m.dlwa,
        "host_pages": m.host_pages,
        "media_pages": m.media_pages,
        "logical_pages": n,
        "turn_pages": turn,
    }))
}

fn main() -> ExitCode {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        println!(
            "{}",
            include_str!("lachesis-devsim.rs")
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .map(|l| l.trim_start_matches("//!").trim_start_matches(' '))
                .collect::<Vec<_>>()
                .join("\n")
        );
        return ExitCode::SUCCESS;
    }
    let mut text = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut text) {
        eprintln!("lachesis-devsim: cannot read stdin: {e}");
        return ExitCode::from(2);
    }
    let input: Input = match serde_json::from_str(&text) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("lachesis-devsim: bad input: {e}");
            return ExitCode::from(2);
        }
    };
    match run(input) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lachesis-devsim: {e}");
            ExitCode::from(2)
        }
    }
}
