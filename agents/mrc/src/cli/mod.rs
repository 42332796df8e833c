//! The `lachesis-mrc` command: read a trace, run the chosen estimators side
//! by side over one pass, print their curves (and errors against the exact
//! curve or the full simulation), optionally plot them.

mod args;
mod output;

pub use args::Args;
use args::{Algorithm, OnOff, OnOffArg, OutputFormat, SpacingArg, UnitArg};

use ahash::{AHashMap, AHashSet};
use lachesis_mrc::curve::sizes_over;
use lachesis_mrc::estimator::Mean;
use lachesis_mrc::plot::{plot_curves, PlotError, Series};
use lachesis_mrc::trace::{self, Format, Progress, Request};
use lachesis_mrc::{
    Adjustment, Curve, ExactLru, MiniSim, MrcError, MrcEstimator, Op, PolicyKind, ShardsFixedRate,
    ShardsFixedSize, Spacing, TraceError, Unit,
};
use output::{CurveReport, Report, WindowReport};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Mrc(#[from] MrcError),
    #[error(transparent)]
    Plot(#[from] PlotError),
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
}

/// One estimator and what it is.
struct Run {
    algorithm: Algorithm,
    policy: Option<PolicyKind>,
    estimator: Box<dyn MrcEstimator>,
}

pub fn run(args: &Args) -> Result<(), CliError> {
    let format = match args.format.as_str() {
        "auto" => Format::detect(&args.trace)?,
        name => Format::parse(name).ok_or_else(|| {
            CliError::Usage(format!("unknown format {name:?} (auto, {})", Format::NAMES))
        })?,
    };
    let unit = match args.unit {
        UnitArg::Objects => Unit::Objects,
        UnitArg::Bytes => Unit::Bytes,
    };
    let progress = if args.quiet {
        Progress::Hidden
    } else {
        Progress::Auto
    };
    let keep = |r: &Request| !args.reads_only || r.op == Op::Read;

    let (sizes, census) = if args.cache_sizes.is_empty() {
        if args.sizes == 0 {
            return Err(CliError::Usage("--sizes must be at least 1".into()));
        }
        let census = census(args, format, unit, progress, &keep)?;
        let spacing = match args.spacing {
            SpacingArg::Log => Spacing::Log,
            SpacingArg::Linear => Spacing::Linear,
        };
        (
            sizes_over(census.working_set, args.sizes, spacing),
            Some(census),
        )
    } else {
        let mut sizes = args
            .cache_sizes
            .iter()
            .map(|s| parse_size(s))
            .collect::<Result<Vec<_>, _>>()?;
        sizes.sort_unstable();
        sizes.dedup();
        (sizes, None)
    };

    let mut runs = build_runs(args, unit, &sizes)?;
    let mut windows = Vec::new();
    let mut references = 0u64;
    let mut in_window = 0u64;
    for r in trace::open(&args.trace, format, progress)? {
        let r = r?;
        if !keep(&r) {
            continue;
        }
        references += 1;
        for run in runs.iter_mut() {
            run.estimator.record(r.key, r.size, r.op);
        }
        if let Some(w) = args.window {
            in_window += 1;
            if in_window == w {
                windows.push(WindowReport {
                    end_reference: references,
                    curves: reports(&runs),
                });
                runs.iter_mut()
                    .for_each(|run| run.estimator.decay(args.decay));
                in_window = 0;
            }
        }
    }
    if references == 0 {
        return Err(CliError::Usage(format!(
            "{}: no references to measure",
            args.trace.display()
        )));
    }
    if args.window.is_some() && in_window > 0 {
        windows.push(WindowReport {
            end_reference: references,
            curves: reports(&runs),
        });
    }

    let report = Report {
        trace: args.trace.display().to_string(),
        format: format!("{format:?}").to_lowercase(),
        unit,
        references,
        unique_keys: census.as_ref().map(|c| c.unique_keys),
        working_set: census.as_ref().map(|c| c.working_set),
        curves: reports(&runs),
        windows,
    };
    let text = match args.output {
        OutputFormat::Json => output::json(&report),
        OutputFormat::Csv => output::csv(&report),
    };
    match &args.out {
        Some(path) => std::fs::write(path, text).map_err(|source| CliError::Write {
            path: path.clone(),
            source,
        })?,
        None => print!("{text}"),
    }
    if let Some(png) = &args.plot {
        let title = args.title.clone().unwrap_or_else(|| {
            args.trace
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        plot_curves(png, &title, &plot_series(&runs, &report.curves))?;
    }
    Ok(())
}

fn build_runs(args: &Args, unit: Unit, sizes: &[u64]) -> Result<Vec<Run>, CliError> {
    let adjs: &[Adjustment] = match args.adj {
        OnOff::On => &[Adjustment::Regression],
        OnOff::Off => &[Adjustment::None],
        OnOff::Shards => &[Adjustment::Shards],
        OnOff::Both => &[Adjustment::Regression, Adjustment::None],
        OnOff::All => &[Adjustment::Regression, Adjustment::Shards, Adjustment::None],
    };
    let policies = args
        .policy
        .iter()
        .map(|p| p.parse::<PolicyKind>())
        .collect::<Result<Vec<_>, _>>()?;
    let mut runs = Vec::new();
    let mut seen = Vec::new();
    for &algorithm in &args.algorithm {
        if seen.contains(&algorithm) {
            continue;
        }
        seen.push(algorithm);
        let s = sizes.to_vec();
        match algorithm {
            Algorithm::Exact => runs.push(Run {
                algorithm,
                policy: None,
                estimator: Box::new(ExactLru::new(unit, s)?),
            }),
            Algorithm::ShardsFixedRate | Algorithm::ShardsFixedSize => {
                for &adj in adjs {
                    let estimator: Box<dyn MrcEstimator> =
                        if algorithm == Algorithm::ShardsFixedRate {
                            Box::new(
                                ShardsFixedRate::new(unit, s.clone(), args.rate, true)?
                                    .with_adjustment(adj),
                            )
                        } else {
                            Box::new(
                                ShardsFixedSize::new(unit, s.clone(), args.smax, true)?
                                    .with_adjustment(adj),
                            )
                        };
                    runs.push(Run {
                        algorithm,
                        policy: None,
                        estimator,
                    });
                }
            }
            Algorithm::Minisim => {
                for &p in &policies {
                    for &adj in adjs {
                        let sims = (0..args.samples as u64)
                            .map(|salt| {
                                Ok(MiniSim::new(p, unit, s.clone(), args.rate, true)?
                                    .with_adjustment(adj)
                                    .with_key_rate(args.key_rate == OnOffArg::On)
                                    .with_salt(salt))
                            })
                            .collect::<Result<Vec<_>, MrcError>>()?;
                        let estimator: Box<dyn MrcEstimator> = if sims.len() == 1 {
                            Box::new(sims.into_iter().next().expect("one sample"))
                        } else {
                            Box::new(Mean::new(sims))
                        };
                        runs.push(Run {
                            algorithm,
                            policy: Some(p),
                            estimator,
                        });
                    }
                }
            }
            Algorithm::FullSim => {
                for &p in &policies {
                    let estimator = Box::new(MiniSim::full(p, unit, s.clone())?);
                    runs.push(Run {
                        algorithm,
                        policy: Some(p),
                        estimator,
                    });
                }
            }
        }
    }
    Ok(runs)
}

/// Curves with their errors against the references present: exact LRU for
/// the LRU estimators, the full simulation of the same policy for minisim.
fn reports(runs: &[Run]) -> Vec<CurveReport> {
    let curves: Vec<Curve> = runs.iter().map(|r| r.estimator.curve()).collect();
    let exact = runs
        .iter()
        .position(|r| r.algorithm == Algorithm::Exact)
        .map(|i| &curves[i]);
    let full = |p: PolicyKind| {
        runs.iter()
            .position(|r| r.algorithm == Algorithm::FullSim && r.policy == Some(p))
            .map(|i| &curves[i])
    };
    runs.iter()
        .zip(&curves)
        .map(|(run, curve)| {
            let lru_like = run.policy.is_none() || run.policy == Some(PolicyKind::Lru);
            let mae_vs_exact = match (run.algorithm, exact) {
                (Algorithm::Exact, _) | (_, None) => None,
                (_, Some(e)) if lru_like => curve.mae(e).ok(),
                _ => None,
            };
            let mae_vs_full_sim = match (run.algorithm, run.policy) {
                (Algorithm::Minisim, Some(p)) => full(p).and_then(|f| curve.mae(f).ok()),
                _ => None,
            };
            CurveReport {
                algorithm: format!("{:?}", run.algorithm),
                label: run.estimator.label(),
                policy: run.policy,
                footprint_bytes: run.estimator.footprint_bytes(),
                mae_vs_exact,
                mae_vs_full_sim,
                curve: curve.clone(),
            }
        })
        .collect()
}

/// Colors by what a curve estimates: exact black, each SHARDS variant and
/// each policy its own color; the unadjusted SHARDS and the miniature
/// simulation dashed beside their solid counterpart; SHARDS with the
/// paper's SHARDS_adj in a color of its own.
fn plot_series<'a>(runs: &[Run], curves: &'a [CurveReport]) -> Vec<Series<'a>> {
    runs.iter()
        .zip(curves)
        .map(|(run, c)| {
            let adjusted = !c.label.contains("no adj");
            let paper = if c.label.contains("shards adj") { 4 } else { 0 };
            let (color, dashed) = match (run.algorithm, run.policy) {
                (Algorithm::Exact, _) => (0, false),
                (Algorithm::ShardsFixedRate, _) => (1 + paper, !adjusted),
                (Algorithm::ShardsFixedSize, _) => (2 + paper, !adjusted),
                (Algorithm::FullSim, Some(p)) => (3 + p as usize, false),
                (Algorithm::Minisim, Some(p)) => (3 + p as usize, true),
                (_, None) => (7, false),
            };
            Series {
                label: c.label.clone(),
                curve: &c.curve,
                color,
                dashed,
            }
        })
        .collect()
}

struct Census {
    unique_keys: u64,
    working_set: u64,
}

/// First pass: distinct keys and their total weight, to spread the sizes.
fn census(
    args: &Args,
    format: Format,
    unit: Unit,
    progress: Progress,
    keep: &dyn Fn(&Request) -> bool,
) -> Result<Census, CliError> {
    let requests = trace::open(&args.trace, format, progress)?;
    match unit {
        Unit::Objects => {
            let mut keys = AHashSet::new();
            for r in requests {
                let r = r?;
                if keep(&r) {
                    keys.insert(r.key);
                }
            }
            Ok(Census {
                unique_keys: keys.len() as u64,
                working_set: keys.len() as u64,
            })
        }
        Unit::Bytes => {
            let mut keys: AHashMap<u64, u32> = AHashMap::new();
            for r in requests {
                let r = r?;
                if keep(&r) {
                    keys.insert(r.key, r.size);
                }
            }
            let ws = keys.values().map(|&s| s as u64).sum();
            Ok(Census {
                unique_keys: keys.len() as u64,
                working_set: ws,
            })
        }
    }
}

/// "4096", "64K", "1.5G" (powers of 1024).
fn parse_size(s: &str) -> Result<u64, CliError> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(CliError::Usage(format!("bad cache size {s:?}"))),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| CliError::Usage(format!("bad cache size {s:?}")))?;
    let size = (v * mult as f64).round();
    if !(1.0..1.8e19).contains(&size) {
        return Err(CliError::Usage(format!(
            "bad cache size {s:?} (must be at least 1)"
        )));
    }
    Ok(size as u64)
}
