//! `lachesis-dingos-replay`: the declared-IO planner against a naive scrub under a foreground
//! replay of a trace, in simulated time (`bench/apps/dingos.sh`).
//!
//! The dataset is every 64 KiB extent the trace touches (reads or writes), laid out densely in
//! one sparse file; a scrub declares all of it with the deadline `--window` × the trace's
//! duration after the start, paced to the deadline. Both runs use the real [`Planner`] and
//! dispatcher reads (`pread` of the file); the planner run is also told of the trace's reads
//! (what the switch's read hook does), the naive run is not (an imperative scrub reads
//! everything). Prints one JSON object per run: bytes declared, read by the dispatcher (the
//! maintenance bytes read from the device), covered by the foreground, when it was done and
//! whether that was by the deadline, and the dispatcher's cumulative bytes over time.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lachesis_declared::coverage::BLOCK;
use lachesis_declared::dispatcher::run_work;
use lachesis_declared::message::{DeclaredIo, JobState};
use lachesis_declared::{Mount, Planner};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

/// Quanta the window is simulated in.
const QUANTA: usize = 20_000;
/// Points of the cumulative series printed.
const SERIES: usize = 100;

struct Request {
    t: f64,
    read: bool,
    off: u64,
    len: u64,
}

fn usage() -> ExitCode {
    eprintln!("usage: lachesis-dingos-replay TRACE [--window F] [--budget-factor K] [--name NAME]");
    eprintln!("  TRACE: a cloudPhysics CSV (version,time,op,size,lbn) or an ARC .lis.zst");
    ExitCode::from(2)
}

fn load(path: &Path) -> Result<Vec<Request>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path.to_string_lossy();
    let mut out = Vec::new();
    if name.ends_with(".zst") {
        // ARC: `start nblocks ignore request`, 512 B blocks, no times: one request per ms.
        let r = BufReader::new(zstd::Decoder::new(file).map_err(|e| e.to_string())?);
        for (i, line) in r.lines().enumerate() {
            let line = line.map_err(|e| e.to_string())?;
            let f: Vec<u64> = line
                .split_whitespace()
                .take(2)
                .filter_map(|x| x.parse().ok())
                .collect();
            if f.len() == 2 {
                out.push(Request {
                    t: i as f64 / 1000.0,
                    read: true,
                    off: f[0] * 512,
                    len: f[1] * 512,
                });
            }
        }
    } else {
        let r = BufReader::new(file);
        let mut t0 = None;
        for line in r.lines().skip(1) {
            let line = line.map_err(|e| e.to_string())?;
            let f: Vec<&str> = line.split(',').collect();
            if f.len() < 5 {
                continue;
            }
            let (Ok(t), Ok(size), Ok(lbn)) = (
                f[1].parse::<f64>(),
                f[3].parse::<u64>(),
                f[4].parse::<u64>(),
            ) else {
                continue;
            };
            let t0 = *t0.get_or_insert(t);
            out.push(Request {
                t: t - t0,
                read: matches!(f[2], "28" | "88"),
                off: lbn * 512,
                len: size,
            });
        }
    }
    if out.is_empty() {
        return Err(format!("{}: no requests", path.display()));
    }
    Ok(out)
}

/// Each touched extent's place in the dense dataset.
fn layout(reqs: &[Request]) -> HashMap<u64, u64> {
    let mut extents: Vec<u64> = reqs
        .iter()
        .flat_map(|r| (r.off / BLOCK)..=((r.off + r.len.max(1) - 1) / BLOCK))
        .collect();
    extents.sort_unstable();
    extents.dedup();
    extents
        .into_iter()
        .enumerate()
        .map(|(i, e)| (e, i as u64))
        .collect()
}

struct Run {
    name: &'static str,
    declared: u64,
    dispatched: u64,
    foreground: u64,
    done_at: Option<f64>,
    series: Vec<(f64, u64)>,
}

fn run(
    name: &'static str,
    dir: &Path,
    reqs: &[Request],
    places: &HashMap<u64, u64>,
    window: f64,
    budget: u64,
    planner_on: bool,
) -> Result<Run, String> {
    let start = OffsetDateTime::now_utc();
    let deadline = start + Duration::seconds_f64(window);
    let p = Planner::new(
        vec![Mount {
            backing: dir.to_path_buf(),
            mountpoint: PathBuf::from("/nonexistent-mount"),
        }],
        budget,
    );
    let msg: DeclaredIo = serde_json::from_value(serde_json::json!({
        "schema": "lachesis.declared-io/v1", "host_id": "bench", "version": 1,
        "jobs": [{"id": "scrub", "tenant": "bench", "files": [{"path": "/dataset"}],
                  "deadline": deadline.format(&Rfc3339).map_err(|e| e.to_string())?}],
    }))
    .map_err(|e| e.to_string())?;
    p.apply(&msg, start);
    let zeros = vec![0u8; BLOCK as usize];
    let dt = window / QUANTA as f64;
    let mut next = 0;
    let mut series = Vec::new();
    let mut done_at = None;
    // Past the deadline too (a missed scrub goes on), up to twice the window.
    for q in 1..=(2 * QUANTA) {
        let t = q as f64 * dt;
        while planner_on && next < reqs.len() && reqs[next].t <= t {
            let r = &reqs[next];
            next += 1;
            if !r.read {
                continue;
            }
            let mut off = r.off;
            while off < r.off + r.len {
                let ext = off / BLOCK;
                let end = ((ext + 1) * BLOCK).min(r.off + r.len);
                let dense = places[&ext] * BLOCK + off % BLOCK;
                p.observe(0, "/dataset", dense, &zeros[..(end - off) as usize]);
                off = end;
            }
        }
        for w in p.plan(dt, start + Duration::seconds_f64(t)) {
            run_work(&p, &w);
        }
        let rep = &p.reports()[0];
        if q % (2 * QUANTA / SERIES) == 0 || rep.state == JobState::Done {
            series.push((t / window, rep.dispatched_bytes));
        }
        if rep.state == JobState::Failed {
            return Err(rep.error.clone().unwrap_or_default());
        }
        if rep.state == JobState::Done {
            done_at = Some(t / window);
            break;
        }
    }
    let rep = &p.reports()[0];
    Ok(Run {
        name,
        declared: rep.bytes_declared,
        dispatched: rep.dispatched_bytes,
        foreground: rep.foreground_bytes,
        done_at,
        series,
    })
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(trace) = args.next() else {
        return usage();
    };
    let (mut window_f, mut budget_k, mut label) = (1.0f64, 2.0f64, None);
    while let Some(a) = args.next() {
        let v = args.next();
        match (a.as_str(), v.as_deref().map(str::parse::<f64>)) {
            ("--window", Some(Ok(x))) if x > 0.0 => window_f = x,
            ("--budget-factor", Some(Ok(x))) if x >= 1.0 => budget_k = x,
            ("--name", _) if v.is_some() => label = v,
            _ => return usage(),
        }
    }
    let reqs = match load(Path::new(&trace)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let places = layout(&reqs);
    let dataset = places.len() as u64 * BLOCK;
    let duration = reqs.last().map(|r| r.t).unwrap_or(0.0).max(1.0);
    let window = duration * window_f;
    // The budget: K times the rate that reads the dataset once over the window.
    let budget = ((dataset as f64 / window) * budget_k).ceil() as u64;
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: temporary directory: {e}");
            return ExitCode::from(1);
        }
    };
    let set = std::fs::File::create(dir.path().join("dataset")).and_then(|f| f.set_len(dataset));
    if let Err(e) = set {
        eprintln!("error: dataset file: {e}");
        return ExitCode::from(1);
    }
    let read_bytes: u64 = reqs.iter().filter(|r| r.read).map(|r| r.len).sum();
    for (name, on) in [("planner", true), ("naive", false)] {
        match run(name, dir.path(), &reqs, &places, window, budget, on) {
            Ok(r) => println!(
                "{}",
                serde_json::json!({
                    "trace": label.clone().unwrap_or_else(|| trace.clone()), "run": r.name,
                    "requests": reqs.len(), "foreground_read_bytes": read_bytes,
                    "window_s": window, "window_factor": window_f, "budget_bytes_per_s": budget,
                    "declared_bytes": r.declared, "dispatched_bytes": r.dispatched,
                    "foreground_bytes": r.foreground, "done_at_window": r.done_at,
                    "deadline_met": r.done_at.is_some_and(|d| d <= 1.0),
                    "series": r.series,
                })
            ),
            Err(e) => {
                eprintln!("error: {name}: {e}");
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
