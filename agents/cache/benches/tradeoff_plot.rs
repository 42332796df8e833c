//! Draws miss ratio against device write rate from cachebench JSON reports (one per line, each
//! with a `label`): the set-associative admission sweep as a line, every other run as a point.
//! Called by bench/cache/compare.py:
//!
//!   cargo bench -p lachesis-cache --bench tradeoff_plot -- runs.jsonl out.png "title"

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

struct Run {
    label: String,
    x: f64,
    y: f64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let [input, output, title] = args.as_slice() else {
        eprintln!("usage: tradeoff_plot RUNS.jsonl OUT.png TITLE");
        std::process::exit(2);
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
            x: num("device_bytes_per_request")?,
            y: num("miss_ratio")?,
        });
    }
    plot(Path::new(output), title, &runs)
}

fn plot(path: &Path, title: &str, runs: &[Run]) -> Result<(), Box<dyn std::error::Error>> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "cannot register the font")?;
    let xmax = runs.iter().map(|r| r.x).fold(1.0, f64::max) * 1.1;
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("device bytes written per request")
        .y_desc("miss ratio")
        .label_style(("sans-serif", 15))
        .draw()?;
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
    let colors = [
        RGBColor(220, 50, 47),
        RGBColor(133, 153, 0),
        RGBColor(108, 113, 196),
    ];
    for (i, r) in runs
        .iter()
        .filter(|r| !r.label.starts_with("set-assoc"))
        .enumerate()
    {
        let c = colors[i % colors.len()];
        chart
            .draw_series(std::iter::once(TriangleMarker::new(
                (r.x, r.y),
                8,
                c.filled(),
            )))?
            .label(r.label.clone())
            .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 6, c.filled()));
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
