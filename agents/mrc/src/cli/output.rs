//! JSON and CSV renderings of a run.

use lachesis_mrc::{Curve, PolicyKind, Unit};
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, Serialize)]
pub struct Report {
    pub trace: String,
    pub format: String,
    pub unit: Unit,
    pub references: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_keys: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set: Option<u64>,
    pub curves: Vec<CurveReport>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<WindowReport>,
}

#[derive(Debug, Serialize)]
pub struct CurveReport {
    pub algorithm: String,
    pub label: String,
    pub policy: Option<PolicyKind>,
    pub footprint_bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mae_vs_exact: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mae_vs_full_sim: Option<f64>,
    #[serde(flatten)]
    pub curve: Curve,
}

#[derive(Debug, Serialize)]
pub struct WindowReport {
    pub end_reference: u64,
    pub curves: Vec<CurveReport>,
}

pub fn json(report: &Report) -> String {
    // Serialising plain data to a String cannot fail.
    let mut s = serde_json::to_string_pretty(report).unwrap_or_default();
    s.push('\n');
    s
}

/// `size,<label>...` rows; with windows, a leading `window_end` column and
/// one block of rows per window.
pub fn csv(report: &Report) -> String {
    let mut out = String::new();
    let labels: Vec<String> = report.curves.iter().map(|c| quote(&c.label)).collect();
    let windowed = !report.windows.is_empty();
    if windowed {
        out.push_str("window_end,");
    }
    let _ = writeln!(out, "size,{}", labels.join(","));
    let blocks: Vec<(Option<u64>, &Vec<CurveReport>)> = if windowed {
        report
            .windows
            .iter()
            .map(|w| (Some(w.end_reference), &w.curves))
            .collect()
    } else {
        vec![(None, &report.curves)]
    };
    for (end, curves) in blocks {
        let Some(first) = curves.first() else {
            continue;
        };
        for (i, size) in first.curve.sizes.iter().enumerate() {
            if let Some(end) = end {
                let _ = write!(out, "{end},");
            }
            let _ = write!(out, "{size}");
            for c in curves {
                let _ = write!(
                    out,
                    ",{:.6}",
                    c.curve.miss_ratio.get(i).copied().unwrap_or(f64::NAN)
                );
            }
            out.push('\n');
        }
    }
    out
}

fn quote(s: &str) -> String {
    if s.contains([',', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
