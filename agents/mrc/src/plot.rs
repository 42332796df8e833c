//! PNG plots of miss-ratio curves.
//!
//! Drawn with plotters' bitmap backend and the DejaVu Sans font compiled
//! into the binary (through ab_glyph), so no system font lookup happens: the
//! machines we run on have no fonts installed. Should the font ever fail to
//! load, the plot is drawn without text rather than not at all.

use crate::curve::{Curve, Unit};
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(Debug, thiserror::Error)]
#[error("{}: cannot draw plot: {reason}", path.display())]
pub struct PlotError {
    pub path: PathBuf,
    pub reason: String,
}

/// Register the bundled font once; false if that failed.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_ok()
    })
}

const COLORS: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(220, 50, 47),
    RGBColor(38, 139, 210),
    RGBColor(133, 153, 0),
    RGBColor(211, 54, 130),
    RGBColor(181, 137, 0),
    RGBColor(42, 161, 152),
    RGBColor(108, 113, 196),
];

/// One line of a plot.
pub struct Series<'a> {
    pub label: String,
    pub curve: &'a Curve,
    /// Lines sharing a color belong together (a policy's full and
    /// miniature simulation, SHARDS with and without adjustment).
    pub color: usize,
    /// Dashed: the variant (e.g. the unadjusted or the sampled one).
    pub dashed: bool,
}

/// Draw `series` on one log-x chart into the PNG at `path`.
pub fn plot_curves(path: &Path, title: &str, series: &[Series]) -> Result<(), PlotError> {
    let err = |reason: String| PlotError {
        path: path.to_path_buf(),
        reason,
    };
    let text = font_ready();
    let lo = series
        .iter()
        .flat_map(|s| s.curve.sizes.first().copied())
        .min()
        .unwrap_or(1)
        .max(1);
    let hi = series
        .iter()
        .flat_map(|s| s.curve.sizes.last().copied())
        .max()
        .unwrap_or(2)
        .max(lo + 1);
    let unit = series.first().map_or(Unit::Objects, |s| s.curve.unit);

    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60);
    if text {
        builder.caption(title, ("sans-serif", 24));
    }
    let mut chart = builder
        .build_cartesian_2d((lo as f64..hi as f64).log_scale(), 0f64..1f64)
        .map_err(|e| err(e.to_string()))?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc(match unit {
            Unit::Objects => "cache size (objects)",
            Unit::Bytes => "cache size (bytes)",
        })
        .y_desc("miss ratio")
        .label_style(("sans-serif", 15))
        .x_label_formatter(&|v| human(*v));
    } else {
        mesh.disable_x_axis().disable_y_axis();
    }
    mesh.draw().map_err(|e| err(e.to_string()))?;

    for s in series {
        let color = COLORS[s.color % COLORS.len()];
        let style = ShapeStyle::from(&color).stroke_width(if s.color == 0 { 3 } else { 2 });
        let points: Vec<(f64, f64)> = s
            .curve
            .sizes
            .iter()
            .map(|&x| x as f64)
            .zip(s.curve.miss_ratio.iter().copied())
            .collect();
        let drawn = if s.dashed {
            chart.draw_series(DashedLineSeries::new(points.clone(), 8, 5, style))
        } else {
            chart.draw_series(LineSeries::new(points.clone(), style))
        }
        .map_err(|e| err(e.to_string()))?;
        if text {
            let dashed = s.dashed;
            drawn.label(s.label.as_str()).legend(move |(x, y)| {
                let end = if dashed { x + 10 } else { x + 20 };
                PathElement::new(vec![(x, y), (end, y)], style)
            });
        }
        let marks = points.into_iter().map(|p| {
            Circle::new(
                p,
                3,
                if s.dashed {
                    color.stroke_width(1)
                } else {
                    color.filled()
                },
            )
        });
        chart.draw_series(marks).map_err(|e| err(e.to_string()))?;
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .position(SeriesLabelPosition::LowerLeft)
            .draw()
            .map_err(|e| err(e.to_string()))?;
    }
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// 1500 -> "1.5K", 3_000_000 -> "3M".
fn human(v: f64) -> String {
    let (x, suffix) = if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "K")
    } else {
        (v, "")
    };
    let s = format!("{x:.1}");
    format!("{}{suffix}", s.strip_suffix(".0").unwrap_or(&s))
}
