//! MRC benchmark: speed, memory and accuracy of every estimator on the real
//! traces, side by side with the exact curve measured in the same run.
//!
//! Prints figures; never passes or fails. Run through `bench/mrc/run.sh`.
//! Keys are read into memory first (reading is timed on its own), then each
//! estimator is fed the in-memory references `--reps` times; the table shows
//! medians. Memory is the peak of a counting global allocator during the
//! estimator's construction and run, next to the structures' own count of
//! their bytes.

use lachesis_mrc::curve::{sizes_over, Spacing};
use lachesis_mrc::trace::{self, Format, Progress, Request};
use lachesis_mrc::{
    Adjustment, Curve, ExactLru, MiniSim, MrcEstimator, PolicyKind, ShardsFixedRate,
    ShardsFixedSize, Unit,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

/// Counts live heap bytes and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = LIVE.fetch_add(new - l.size(), Relaxed) + (new - l.size());
                PEAK.fetch_max(now, Relaxed);
            } else {
                LIVE.fetch_sub(l.size() - new, Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

struct Opts {
    reps: usize,
    sim_reps: usize,
    salts: u64,
    traces: Vec<String>,
    no_sim: bool,
}

fn opts() -> Opts {
    let mut o = Opts {
        reps: 5,
        sim_reps: 1,
        salts: 16,
        traces: vec!["cloudphysics".into(), "oltp".into(), "p3".into()],
        no_sim: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut num = |name: &str| {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match a.as_str() {
            "--reps" => o.reps = num("--reps"),
            "--sim-reps" => o.sim_reps = num("--sim-reps"),
            "--salts" => o.salts = num("--salts") as u64,
            "--no-sim" => o.no_sim = true,
            "--traces" => {
                o.traces = it
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(String::from)
                    .collect()
            }
            // cargo bench passes --bench to harness=false targets.
            "--bench" => {}
            other => eprintln!("ignoring argument {other:?}"),
        }
    }
    o
}

struct Row {
    name: String,
    refs_per_s: f64,
    refs_per_cpu_s: f64,
    peak_bytes: usize,
    footprint: usize,
    mae: Option<f64>,
    mae_log: Option<f64>,
    reference: &'static str,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// CPU time of this thread: on a shared machine the wall clock also counts
/// the time other processes held the core.
fn cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

struct Timed<E> {
    wall: f64,
    cpu: f64,
    peak: usize,
    footprint: usize,
    estimator: E,
}

/// Build with `make`, feed every reference, `reps` times; median speeds
/// (wall clock and CPU time), the largest peak, the last estimator.
fn run<E: MrcEstimator>(reqs: &[Request], reps: usize, make: impl Fn() -> E) -> Timed<E> {
    let mut speeds = Vec::new();
    let mut cpu_speeds = Vec::new();
    let mut peak = 0;
    let mut last = None;
    for _ in 0..reps.max(1) {
        drop(last.take());
        let base = LIVE.load(Relaxed);
        PEAK.store(base, Relaxed);
        let start = Instant::now();
        let cpu0 = cpu_secs();
        let mut e = make();
        for r in reqs {
            e.record(r.key, r.size, r.op);
        }
        let cpu = cpu_secs() - cpu0;
        let secs = start.elapsed().as_secs_f64();
        peak = peak.max(PEAK.load(Relaxed) - base);
        speeds.push(reqs.len() as f64 / secs);
        cpu_speeds.push(reqs.len() as f64 / cpu);
        last = Some(e);
    }
    let estimator = last.expect("at least one repetition");
    Timed {
        wall: median(speeds),
        cpu: median(cpu_speeds),
        peak,
        footprint: estimator.footprint_bytes(),
        estimator,
    }
}

fn main() {
    let o = opts();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    println!(
        "# lachesis-mrc benchmark: {} repetitions (simulations {}), medians",
        o.reps, o.sim_reps
    );
    for name in &o.traces {
        let (file, format, rate) = match name.as_str() {
            "cloudphysics" => ("cloudPhysicsIO.oracleGeneral.bin", Format::Oracle, 0.1),
            "oltp" => ("arc/OLTP.lis.zst", Format::Arc, 0.01),
            "p3" => ("arc/P3.lis.zst", Format::Arc, 0.01),
            other => {
                eprintln!("unknown trace {other}");
                continue;
            }
        };
        let start = Instant::now();
        let reqs = match trace::read_all(&dir.join(file), format, Progress::Hidden) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                continue;
            }
        };
        let read_s = start.elapsed().as_secs_f64();
        let mut keys: Vec<u64> = reqs.iter().map(|r| r.key).collect();
        keys.sort_unstable();
        keys.dedup();
        let unique = keys.len() as u64;
        drop(keys);
        let lin = sizes_over(unique, 24, Spacing::Linear);
        let log = sizes_over(unique, 24, Spacing::Log);
        println!();
        println!(
            "## {file}: {} references, {unique} distinct keys; read + decode {:.2} s ({:.1} M refs/s)",
            reqs.len(),
            read_s,
            reqs.len() as f64 / read_s / 1e6
        );
        let mut rows = Vec::new();

        let t = run(&reqs, o.reps, || {
            ExactLru::new(Unit::Objects, lin.clone()).unwrap()
        });
        let (e_lin, e_log) = (t.estimator.curve(), t.estimator.curve_at(&log));
        let exact_cpu = t.cpu;
        rows.push(row("exact LRU (objects)".into(), &t, None, None, ""));
        drop(t);
        let t = run(&reqs, o.reps, || {
            ExactLru::new(Unit::Bytes, lin.clone()).unwrap()
        });
        rows.push(row("exact LRU (bytes)".into(), &t, None, None, ""));
        drop(t);

        let exact = (&e_lin, &e_log);
        for adj in ADJUSTMENTS {
            let fixed_rate = || {
                ShardsFixedRate::new(Unit::Objects, lin.clone(), rate, true)
                    .unwrap()
                    .with_adjustment(adj)
            };
            let name = format!("SHARDS fixed-rate R={rate} {}", tag(adj));
            let t = run(&reqs, o.reps, fixed_rate);
            rows.push(scored_row(name, &t, t.estimator.curve_at(&log), exact));
        }
        for adj in ADJUSTMENTS {
            let fixed_size = || {
                ShardsFixedSize::new(Unit::Objects, lin.clone(), 8192, true)
                    .unwrap()
                    .with_adjustment(adj)
            };
            let name = format!("SHARDS fixed-size Smax=8192 {}", tag(adj));
            let t = run(&reqs, o.reps, fixed_size);
            rows.push(scored_row(name, &t, t.estimator.curve_at(&log), exact));
        }

        // The spread over independent hashes: one salt is one draw of the
        // sample, salt 0 (the default) is just one of them.
        let mut spreads = Vec::new();
        for adj in ADJUSTMENTS {
            let fr = spread(o.salts, &e_lin, |salt| {
                let e = ShardsFixedRate::new(Unit::Objects, lin.clone(), rate, true).unwrap();
                curve_of(&reqs, e.with_adjustment(adj).with_salt(salt))
            });
            spreads.push((format!("SHARDS fixed-rate R={rate} {}", tag(adj)), fr));
        }
        for adj in ADJUSTMENTS {
            let fs = spread(o.salts, &e_lin, |salt| {
                let e = ShardsFixedSize::new(Unit::Objects, lin.clone(), 8192, true).unwrap();
                curve_of(&reqs, e.with_adjustment(adj).with_salt(salt))
            });
            spreads.push((format!("SHARDS fixed-size Smax=8192 {}", tag(adj)), fs));
        }

        let mut sim_rows = Vec::new();
        if !o.no_sim {
            for p in [
                PolicyKind::Lru,
                PolicyKind::Fifo,
                PolicyKind::Rrip,
                PolicyKind::S3Fifo,
            ] {
                let full = run(&reqs, o.sim_reps, || {
                    MiniSim::full(p, Unit::Objects, lin.clone()).unwrap()
                });
                let full_curve: Curve = full.estimator.curve();
                let lru = p == PolicyKind::Lru;
                let m = if lru {
                    full_curve.mae(&e_lin).ok()
                } else {
                    None
                };
                sim_rows.push(row(
                    format!("full simulation {} ({} sizes)", p.name(), lin.len()),
                    &full,
                    m,
                    None,
                    if lru { "exact" } else { "" },
                ));
                drop(full);
                let mini = run(&reqs, o.reps, || {
                    MiniSim::new(p, Unit::Objects, lin.clone(), rate, true).unwrap()
                });
                let other = |adj: Adjustment| {
                    let t = run(&reqs, 1, || {
                        MiniSim::new(p, Unit::Objects, lin.clone(), rate, true)
                            .unwrap()
                            .with_adjustment(adj)
                    });
                    t.estimator.curve().mae(&full_curve).unwrap_or(f64::NAN)
                };
                let (shards_mae, raw_mae) = (other(Adjustment::Shards), other(Adjustment::None));
                let m = mini.estimator.curve().mae(&full_curve).ok();
                sim_rows.push(row(
                    format!(
                        "minisim {} R={rate} adj (SHARDS_adj: {shards_mae:.4}, no adj: {raw_mae:.4})",
                        p.name()
                    ),
                    &mini,
                    m,
                    None,
                    "full sim",
                ));
                for adj in ADJUSTMENTS {
                    let sp = spread(o.salts, &full_curve, |salt| {
                        let mut e = MiniSim::new(p, Unit::Objects, lin.clone(), rate, true)
                            .unwrap()
                            .with_adjustment(adj)
                            .with_salt(salt);
                        reqs.iter().for_each(|r| e.record(r.key, r.size, r.op));
                        e.curve()
                    });
                    spreads.push((format!("minisim {} R={rate} {}", p.name(), tag(adj)), sp));
                }
            }
        }

        println!();
        println!("| algorithm | M refs/s (wall) | M refs/s (CPU) | x exact (CPU) | peak heap | own bytes | MAE (linear 24) | MAE (log 24) | vs |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
        for r in rows.iter().chain(&sim_rows) {
            let f = |m: Option<f64>| m.map_or("".to_string(), |m| format!("{m:.4}"));
            println!(
                "| {} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {} |",
                r.name,
                r.refs_per_s / 1e6,
                r.refs_per_cpu_s / 1e6,
                r.refs_per_cpu_s / exact_cpu,
                human(r.peak_bytes),
                human(r.footprint),
                f(r.mae),
                f(r.mae_log),
                r.reference
            );
        }
        println!();
        println!(
            "MAE over {} hash salts (linear grid; salt 0 is the default hash):",
            o.salts
        );
        println!();
        println!("| estimator | salt 0 | median | worst | mean |");
        println!("|---|---:|---:|---:|---:|");
        for (name, (first, med, worst, mean)) in &spreads {
            println!("| {name} | {first:.4} | {med:.4} | {worst:.4} | {mean:.4} |");
        }
    }
}

/// The corrections side by side: the default (regression) first.
const ADJUSTMENTS: [Adjustment; 3] = [Adjustment::Regression, Adjustment::Shards, Adjustment::None];

fn tag(adj: Adjustment) -> &'static str {
    match adj {
        Adjustment::Regression => "adj",
        Adjustment::Shards => "SHARDS_adj",
        Adjustment::None => "no adj",
    }
}

/// MAE against `base` of the curves `curve(salt)` over `salts` hash salts:
/// (salt 0, median, worst, mean).
fn spread(salts: u64, base: &Curve, curve: impl Fn(u64) -> Curve) -> (f64, f64, f64, f64) {
    let maes: Vec<f64> = (0..salts.max(1))
        .map(|i| {
            curve(i.wrapping_mul(lachesis_mrc::hash::GOLDEN_GAMMA))
                .mae(base)
                .unwrap_or(f64::NAN)
        })
        .collect();
    let mean = maes.iter().sum::<f64>() / maes.len() as f64;
    let worst = maes.iter().cloned().fold(0.0, f64::max);
    (maes[0], median(maes), worst, mean)
}

/// The curve of estimator `e` fed every reference.
fn curve_of(reqs: &[Request], mut e: impl MrcEstimator) -> Curve {
    reqs.iter().for_each(|r| e.record(r.key, r.size, r.op));
    e.curve()
}

/// A timed estimator's row, scored against the exact curves (at the linear
/// sizes, and `at_log` at the log sizes).
fn scored_row<E: MrcEstimator>(
    name: String,
    t: &Timed<E>,
    at_log: Curve,
    exact: (&Curve, &Curve),
) -> Row {
    let mae = t.estimator.curve().mae(exact.0).ok();
    row(name, t, mae, at_log.mae(exact.1).ok(), "exact")
}

fn row<E>(
    name: String,
    t: &Timed<E>,
    mae: Option<f64>,
    mae_log: Option<f64>,
    reference: &'static str,
) -> Row {
    Row {
        name,
        refs_per_s: t.wall,
        refs_per_cpu_s: t.cpu,
        peak_bytes: t.peak,
        footprint: t.footprint,
        mae,
        mae_log,
        reference,
    }
}

fn human(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    } else {
        format!("{:.0} KiB", b as f64 / 1024.0)
    }
}
