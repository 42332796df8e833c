//! Draws miss ratio against device write rate from cachebench JSON reports (one per line, each
//! with a `label`): the set-associative admission sweep as a line, every other run as a point.
//! Called by bench/cache/compare.py:
//!
//!   cargo bench -p lachesis-cache --bench tradeoff_plot -- runs.jsonl out.png "title"
//!
//! With `--by-engine` after the title (bench/cache/fairywren.py), x is the flash media bytes
//! written per request and every engine (the label up to its first comma) is a line through
//! its runs, one per flash size.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

struct Run {
    label: String,
    x: f64,
    y: f64,
}

/// What is drawn.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Device (host) bytes per request; the set-associative sweep as a line, the rest points.
    Tradeoff,
    /// Media bytes per request; one line per engine.
    ByEngine,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let (input, output, title, mode) = match args.as_slice() {
        [i, o, t] => (i, o, t, Mode::Tradeoff),
        [i, o, t, m] if m == "--by-engine" => (i, o, t, Mode::ByEngine),
        _ => {
            eprintln!("usage: tradeoff_plot RUNS.jsonl OUT.png TITLE [--by-engine]");
            std::process::exit(2);
        }
    };
    let x_key = match mode {
        Mode::Tradeoff => "device_bytes_per_request",
        Mode::ByEngine => "media_bytes_per_request",
    };
    let mut runs = Vec::new();
    for (n, line) in std::fs::read_to_string(input)?.lines().enumerate() {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{input}:{}: {e}", n + 1))?;
        let num = |k: &str| {
            v[k].as_f64()
                .ok_or_else(|| format!("{input}:{}: no number {k}", n + 1))
        };
        runs.push(Run {
            label: v["label"].as_str().unwrap_or("?").to_string(),
            x: num(x_key)?,
            y: num("miss_ratio")?,
        });
    }
    plot(Path::new(output), title, &runs, mode)
}

fn plot(
    path: &Path,
    title: &str,
    runs: &[Run],
    mode: Mode,
) -> Result<(), Box<dyn std::error::Error>> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "cannot register the font")?;
    let xmax = runs.iter().map(|r| r.x).fold(1.0, f64::max) * 1.1;
    let ymax = match mode {
        Mode::Tradeoff => 1.0,
        Mode::ByEngine => (runs.iter().map(|r| r.y).fold(0.0, f64::max) * 1.15).min(1.0),
    };
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc(match mode {
            Mode::Tradeoff => "device bytes written per request",
            Mode::ByEngine => "flash media bytes written per request (host bytes × DLWA)",
        })
        .y_desc("miss ratio")
        .label_style(("sans-serif", 15))
        .draw()?;
    if mode == Mode::ByEngine {
        by_engine(&mut chart, runs)?;
    } else {
        tradeoff(&mut chart, runs)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

const COLORS: [RGBColor; 6] = [
    RGBColor(220, 50, 47),
    RGBColor(133, 153, 0),
    RGBColor(108, 113, 196),
    RGBColor(38, 139, 210),
    RGBColor(203, 75, 22),
    RGBColor(42, 161, 152),
];

fn by_engine(chart: &mut Chart, runs: &[Run]) -> Result<(), Box<dyn std::error::Error>> {
    // Label "engine, N MiB": a line per engine through its flash sizes, in size order.
    let mut lines: std::collections::BTreeMap<&str, Vec<(f64, f64, f64)>> = Default::default();
    for r in runs {
        let (engine, size) = r.label.split_once(',').unwrap_or((&r.label, ""));
        let mib = size
            .trim()
            .trim_end_matches("MiB")
            .trim()
            .parse()
            .unwrap_or(r.x);
        lines.entry(engine).or_default().push((mib, r.x, r.y));
    }
    for (i, (engine, mut sized)) in lines.into_iter().enumerate() {
        sized.sort_by(|a, b| a.0.total_cmp(&b.0));
        let pts: Vec<(f64, f64)> = sized.iter().map(|p| (p.1, p.2)).collect();
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(engine)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    Ok(())
}

fn tradeoff(chart: &mut Chart, runs: &[Run]) -> Result<(), Box<dyn std::error::Error>> {
    let mut sweep: Vec<(f64, f64)> = runs
        .iter()
        .filter(|r| r.label.starts_with("set-assoc"))
        .map(|r| (r.x, r.y))
        .collect();
    sweep.sort_by(|a, b| a.0.total_cmp(&b.0));
    let blue = RGBColor(38, 139, 210);
    chart
        .draw_series(LineSeries::new(sweep.clone(), blue.stroke_width(2)))?
        .label("set-associative, admission 0.1-1")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], blue.stroke_width(2)));
    chart.draw_series(sweep.iter().map(|&p| Circle::new(p, 4, blue.filled())))?;
    for (i, r) in runs
        .iter()
        .filter(|r| !r.label.starts_with("set-assoc"))
        .enumerate()
    {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(std::iter::once(TriangleMarker::new(
                (r.x, r.y),
                8,
                c.filled(),
            )))?
            .label(r.label.clone())
            .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 6, c.filled()));
    }
    Ok(())
}
