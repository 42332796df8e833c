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
//! The contract: api-schemas/devsim-input.schema.json (parsed and checked in sim/input.rs).
//! Bad input: a message on stderr and exit 2. Progress bar on stderr.

use std::io::Read;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lachesis_device::sim::input::Input;
use lachesis_device::sim::workload::measure;

fn run(input: Input) -> Result<serde_json::Value, String> {
    let mut plan = input.plan()?;
    let n = plan.ssd.logical_pages();
    let (warm, meas) = (plan.warmup_pages, plan.measure_pages);
    let bar = ProgressBar::with_draw_target(Some(warm + meas), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {percent}% devsim")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let m = measure(&mut plan.ssd, &mut plan.mix, warm, meas, |done| {
        bar.set_position(done)
    })
    .map_err(|e| format!("simulation: {e}"))?;
    bar.finish_and_clear();
    Ok(serde_json::json!({
        "dlwa": m.dlwa,
        "host_pages": m.host_pages,
        "media_pages": m.media_pages,
        "logical_pages": n,
        "turn_pages": plan.turn_pages,
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
    let input = match Input::parse(&text) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("lachesis-devsim: {e}");
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
