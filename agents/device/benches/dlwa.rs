//! DLWA on the simulated FDP SSD: the model check, the FDP paper's two-stream setup, the
//! overprovisioning × random-share × placement grid, and sensitivity tables. Prints Markdown
//! on stdout, a progress bar on stderr, and optionally a PNG of the grid.
//!
//!   cargo bench -p lachesis-device --bench dlwa -- all --plot ../docs/benchmarks/device-dlwa-grid.png

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use lachesis_device::dlwa as model;
use lachesis_device::nvme::logpage::RuhType;
use lachesis_device::sim::workload::{measure, Mix, Region, Segregation, Stream, TwoStreams};
use lachesis_device::sim::{SimConfig, SimSsd};
use lachesis_device::PlacementHandle;
use plotters::prelude::*;

#[derive(Parser)]
#[command(about = "DLWA of the simulated FDP SSD")]
struct Args {
    #[command(subcommand)]
    what: What,
    /// Reclaim units in the device.
    #[arg(long, default_value_t = 4096, global = true)]
    rus: u32,
    /// Pages (4 KiB) per reclaim unit (4 erase blocks of a quarter of this).
    #[arg(long, default_value_t = 256, global = true)]
    pages_per_ru: u32,
    /// Log laps (two-stream runs) or device capacities (model check) of warm-up.
    #[arg(long, default_value_t = 3, global = true)]
    warmup: u64,
    /// Log laps (two-stream runs) or device capacities (model check) measured. Without
    /// placement, DLWA swings ±15% from lap to lap as GC waves pass, so average several.
    #[arg(long, default_value_t = 6, global = true)]
    laps: u64,
    #[arg(long, default_value_t = 42, global = true)]
    seed: u64,
    /// Write a PNG of the grid here.
    #[arg(long, global = true)]
    plot: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true, global = true)]
    bench: bool,
}

#[derive(Subcommand, Clone, Copy, PartialEq)]
enum What {
    /// Uniform random overwrites against the analytic model.
    Model,
    /// The paper's setup: 4% random stream + 96% log, 10% OP, half the writes each.
    Paper,
    /// OP 7/10/20% × random share 20/50/80% × placement.
    Grid,
    /// How the two-handle result moves with the random stream's space and the RU size.
    Sensitivity,
    /// Everything above.
    All,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Bench {
    args: Args,
    bar: ProgressBar,
}

impl Bench {
    fn ssd(&self, op: f64, handles: Vec<RuhType>, rus: u32, ppr: u32) -> Res<SimSsd> {
        Ok(SimSsd::new(SimConfig {
            pages_per_erase_block: ppr / 4,
            erase_blocks_per_ru: 4,
            rus_per_group: rus,
            overprovisioning: op,
            handles,
            ..Default::default()
        })?)
    }

    fn run(&self, dev: &mut SimSsd, mix: &mut Mix, warm: u64, meas: u64) -> Res<f64> {
        let base = self.bar.position();
        let m = measure(dev, mix, warm, meas, |d| self.bar.set_position(base + d))?;
        self.bar.set_position(base + warm + meas);
        Ok(m.dlwa)
    }

    fn model_row(&self, op: f64) -> Res<(f64, f64)> {
        let mut dev = self.ssd(
            op,
            vec![RuhType::InitiallyIsolated],
            self.args.rus,
            self.args.pages_per_ru,
        )?;
        let n = dev.logical_pages();
        let region = Region { start: 0, pages: n };
        let mut mix = Mix::new(
            vec![(
                1.0,
                Stream::Random {
                    region,
                    handle: PlacementHandle(0),
                },
            )],
            self.args.seed,
        )?;
        let sim = self.run(&mut dev, &mut mix, self.args.warmup * n, self.args.laps * n)?;
        Ok((
            sim,
            model::dlwa_at_overprovisioning(op).ok_or("model undefined")?,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn two_streams(
        &self,
        op: f64,
        space: f64,
        share: f64,
        seg: Segregation,
        kind: RuhType,
        rus: u32,
        ppr: u32,
    ) -> Res<f64> {
        let mut dev = self.ssd(op, vec![kind; 2], rus, ppr)?;
        let mut mix = TwoStreams {
            random_space: space,
            random_writes: share,
            segregation: seg,
        }
        .mix(&dev, self.args.seed)?;
        let lap = self.lap(dev.logical_pages(), space, share);
        self.run(
            &mut dev,
            &mut mix,
            self.args.warmup * lap,
            self.args.laps * lap,
        )
    }

    /// Host pages for the log to wrap once.
    fn lap(&self, n: u64, space: f64, share: f64) -> u64 {
        ((1.0 - space) * n as f64 / (1.0 - share).max(1e-9)) as u64
    }

    fn lap_pages(&self, space: f64, share: f64) -> u64 {
        let ppr = u64::from(self.args.pages_per_ru);
        let n = (u64::from(self.args.rus) * ppr) as f64 / 1.1;
        self.lap(n as u64, space, share) * (self.args.warmup + self.args.laps) + n as u64
    }
}

const OPS: [f64; 3] = [0.07, 0.10, 0.20];
const SHARES: [f64; 3] = [0.2, 0.5, 0.8];
const SEGS: [(Segregation, &str); 3] = [
    (Segregation::OneHandle, "one handle"),
    (Segregation::TwoHandles, "two handles"),
    (Segregation::TwoHandlesLogTrim, "two handles + log trim"),
];

fn main() -> Res<()> {
    let args = Args::parse();
    let what = args.what;
    let n = u64::from(args.rus) * u64::from(args.pages_per_ru);
    // Rough page count for the progress bar.
    let mut total = 0u64;
    if matches!(what, What::Model | What::All) {
        total += 4 * (args.warmup + args.laps + 1) * n;
    }
    let bench = Bench {
        bar: ProgressBar::hidden(),
        args,
    };
    if matches!(what, What::Paper | What::All) {
        total += 3 * bench.lap_pages(0.04, 0.5);
    }
    if matches!(what, What::Grid | What::All) {
        total += 3 * SHARES
            .iter()
            .map(|&s| 3 * bench.lap_pages(0.04, s))
            .sum::<u64>();
    }
    if matches!(what, What::Sensitivity | What::All) {
        total += 8 * bench.lap_pages(0.16, 0.8);
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {percent}% {msg}")?
            .progress_chars("=> "),
    );
    let bench = Bench { bar, ..bench };
    let a = &bench.args;
    let started = Instant::now();
    println!(
        "Simulated device: {} reclaim units × {} pages of 4 KiB ({} MiB RUs), greedy GC, seed {}; after the fill, {} \
         laps of warm-up and {} measured (a lap: the log wraps once; for the model check: one device capacity).\n",
        a.rus,
        a.pages_per_ru,
        a.pages_per_ru / 256,
        a.seed,
        a.warmup,
        a.laps
    );

    if matches!(what, What::Model | What::All) {
        bench.bar.set_message("model check");
        println!(
            "### Uniform random 4 KiB overwrites vs the model (δ = e^(−a(1−δ)), a = 1 + OP)\n"
        );
        println!("| OP | a | model DLWA | simulated DLWA | error |\n|---|---|---|---|---|");
        for op in [0.07, 0.10, 0.20, 0.28] {
            let (sim, want) = bench.model_row(op)?;
            println!(
                "| {:.0}% | {:.2} | {want:.3} | {sim:.3} | {:+.1}% |",
                op * 100.0,
                1.0 + op,
                (sim / want - 1.0) * 100.0
            );
        }
        println!();
    }

    if matches!(what, What::Paper | What::All) {
        bench.bar.set_message("paper setup");
        println!(
            "### The FDP paper's setup: 4% random stream + 96% log, 10% OP, 50% of writes each\n"
        );
        println!("| placement | DLWA | paper (PM9D3, KV cache) |\n|---|---|---|");
        let (rus, ppr) = (a.rus, a.pages_per_ru);
        let one = bench.two_streams(
            0.10,
            0.04,
            0.5,
            Segregation::OneHandle,
            RuhType::InitiallyIsolated,
            rus,
            ppr,
        )?;
        let two = bench.two_streams(
            0.10,
            0.04,
            0.5,
            Segregation::TwoHandles,
            RuhType::InitiallyIsolated,
            rus,
            ppr,
        )?;
        let pi = bench.two_streams(
            0.10,
            0.04,
            0.5,
            Segregation::TwoHandles,
            RuhType::PersistentlyIsolated,
            rus,
            ppr,
        )?;
        println!("| one handle | {one:.3} | 3.5 |");
        println!("| two initially isolated handles | {two:.3} | 1.03 |");
        println!("| two persistently isolated handles | {pi:.3} | – |\n");
    }

    if matches!(what, What::Grid | What::All) {
        println!("### DLWA grid: 4% random-rewrite stream + 96% FIFO log at 100% utilisation\n");
        println!(
            "| OP | random share of writes | one handle | two handles | two handles + log trim |"
        );
        println!("|---|---|---|---|---|");
        let mut grid = Vec::new();
        for op in OPS {
            for share in SHARES {
                let mut row = Vec::new();
                for (seg, name) in SEGS {
                    bench.bar.set_message(format!(
                        "grid OP {:.0}% share {:.0}% {name}",
                        op * 100.0,
                        share * 100.0
                    ));
                    row.push(bench.two_streams(
                        op,
                        0.04,
                        share,
                        seg,
                        RuhType::InitiallyIsolated,
                        a.rus,
                        a.pages_per_ru,
                    )?);
                }
                println!(
                    "| {:.0}% | {:.0}% | {:.3} | {:.3} | {:.3} |",
                    op * 100.0,
                    share * 100.0,
                    row[0],
                    row[1],
                    row[2]
                );
                grid.push((op, share, row));
            }
        }
        println!();
        if let Some(p) = &a.plot {
            plot(p, &grid)?;
            println!("Plot: `{}`\n", p.display());
        }
    }

    if matches!(what, What::Sensitivity | What::All) {
        println!("### Sensitivity at 7% OP, 80% of writes random, two handles\n");
        println!("Random stream's share of the logical space (1 handle vs 2 vs 2 + log trim):\n");
        println!("| random space | one handle | two handles | two handles + log trim | model for the random stream alone |");
        println!("|---|---|---|---|---|");
        for space in [0.04, 0.08, 0.16] {
            bench
                .bar
                .set_message(format!("sensitivity: random space {:.0}%", space * 100.0));
            let r: Vec<f64> = SEGS
                .iter()
                .map(|(seg, _)| {
                    bench.two_streams(
                        0.07,
                        space,
                        0.8,
                        *seg,
                        RuhType::InitiallyIsolated,
                        a.rus,
                        a.pages_per_ru,
                    )
                })
                .collect::<Res<_>>()?;
            // With perfect isolation the random stream owns its space plus all the spare space.
            let alone = model::dlwa((space + 0.07) / space).ok_or("model undefined")?;
            println!(
                "| {:.0}% | {:.3} | {:.3} | {:.3} | {:.3} (→ {:.3} overall) |",
                space * 100.0,
                r[0],
                r[1],
                r[2],
                alone,
                0.8 * alone + 0.2
            );
        }
        println!("\nReclaim unit size at constant capacity (4% random space):\n");
        println!("| reclaim units × pages | two handles | two handles + log trim |\n|---|---|---|");
        let cap = u64::from(a.rus) * u64::from(a.pages_per_ru);
        for rus in [128u32, 512, 4096] {
            let ppr = (cap / u64::from(rus)) as u32;
            bench
                .bar
                .set_message(format!("sensitivity: {rus} reclaim units"));
            let two = bench.two_streams(
                0.07,
                0.04,
                0.8,
                Segregation::TwoHandles,
                RuhType::InitiallyIsolated,
                rus,
                ppr,
            )?;
            let trim = bench.two_streams(
                0.07,
                0.04,
                0.8,
                Segregation::TwoHandlesLogTrim,
                RuhType::InitiallyIsolated,
                rus,
                ppr,
            )?;
            println!("| {rus} × {ppr} | {two:.3} | {trim:.3} |");
        }
        println!();
    }
    bench.bar.finish_and_clear();
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn plot(path: &PathBuf, grid: &[(f64, f64, Vec<f64>)]) -> Res<()> {
    let font =
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_ok();
    let root = BitMapBackend::new(path, (1200, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, OPS.len()));
    let ymax = grid
        .iter()
        .flat_map(|(_, _, r)| r.iter().copied())
        .fold(1.0f64, f64::max)
        * 1.1;
    let colors = [
        RGBColor(220, 50, 47),
        RGBColor(38, 139, 210),
        RGBColor(133, 153, 0),
    ];
    for (k, (panel, op)) in panels.iter().zip(OPS).enumerate() {
        // One legend, on the last panel, whose upper left is empty.
        let legend = font && k + 1 == OPS.len();
        let mut b = ChartBuilder::on(panel);
        b.margin(15).x_label_area_size(40).y_label_area_size(50);
        if font {
            b.caption(format!("OP {:.0}%", op * 100.0), ("sans-serif", 22));
        }
        let mut chart = b.build_cartesian_2d(10f64..90f64, (0.9f64..ymax).log_scale())?;
        let mut mesh = chart.configure_mesh();
        if font {
            mesh.x_desc("random stream's share of writes (%)")
                .y_desc("DLWA (log scale)")
                .label_style(("sans-serif", 14))
                .x_label_formatter(&|v| format!("{v:.0}"))
                .y_label_formatter(&|v| format!("{v:.1}"));
        } else {
            mesh.disable_x_axis().disable_y_axis();
        }
        mesh.draw()?;
        for (i, (_, name)) in SEGS.iter().enumerate() {
            let pts: Vec<(f64, f64)> = grid
                .iter()
                .filter(|(o, _, _)| *o == op)
                .map(|(_, s, r)| (s * 100.0, r[i]))
                .collect();
            let style = ShapeStyle::from(&colors[i]).stroke_width(2);
            let s = chart.draw_series(LineSeries::new(pts.clone(), style))?;
            if legend {
                s.label(*name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colors[i]));
            }
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, colors[i].filled())))?;
        }
        if legend {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()?;
        }
    }
    root.present()?;
    Ok(())
}
