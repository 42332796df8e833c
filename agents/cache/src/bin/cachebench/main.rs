//! lachesis-cachebench: a trace or synthetic workload through a real cache engine on the
//! simulated FDP SSD. See `args.rs` for the flags, `report.rs` for what is measured.

mod admission;
mod args;
mod engines;
mod fill;
mod report;
mod steady;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use lachesis_cache::workload::{value_for, SizeDist, Zipf};
use lachesis_mrc::trace::{self, Format, Progress};
use lachesis_mrc::Op;

use args::Args;
use report::Report;

/// One request of the replay.
enum Req {
    /// Look-aside read: get, and set on a miss.
    Get(u64, u32),
    Set(u64, u32),
    Delete(u64),
}

enum Source {
    Synthetic {
        zipf: Zipf,
        sizes: SizeDist,
        delete_ratio: f64,
    },
    Trace {
        requests: Vec<trace::Request>,
        sizes: Option<SizeDist>,
    },
}

impl Source {
    fn request(&mut self, i: usize) -> Req {
        match self {
            Source::Synthetic {
                zipf,
                sizes,
                delete_ratio,
            } => {
                let key = zipf.next_key();
                if *delete_ratio > 0.0 && zipf.uniform() < *delete_ratio {
                    Req::Delete(key)
                } else {
                    Req::Get(key, sizes.size_of(key))
                }
            }
            Source::Trace { requests, sizes } => {
                let r = requests[i];
                let size = sizes.map_or(r.size.max(8), |d| d.size_of(r.key));
                match r.op {
                    Op::Write => Req::Set(r.key, size),
                    Op::Read | Op::Other => Req::Get(r.key, size),
                }
            }
        }
    }
}

fn fail_input(msg: String) -> ExitCode {
    eprintln!("lachesis-cachebench: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(msg) = args.check() {
        return fail_input(msg);
    }
    let sizes = match args.sizes.as_deref().map(SizeDist::parse).transpose() {
        Ok(s) => s,
        Err(e) => return fail_input(format!("--sizes: {e}")),
    };
    if args.fill_objects > 0 {
        let sizes = sizes.unwrap_or(SizeDist::META);
        return finish(&args, fill::run(&args, sizes), true);
    }
    let progress = if args.quiet || !std::io::stderr().is_terminal() {
        Progress::Hidden
    } else {
        Progress::Auto
    };
    let (mut source, total, workload) = match &args.trace {
        Some(path) => {
            let format = match args.format.as_deref() {
                Some(f) => match Format::parse(f) {
                    Some(f) => f,
                    None => {
                        return fail_input(format!(
                            "--format {f}: unknown; expected one of {}",
                            Format::NAMES
                        ))
                    }
                },
                None => match Format::detect(path) {
                    Ok(f) => f,
                    Err(e) => return fail_input(e.to_string()),
                },
            };
            let mut requests = match trace::read_all(path, format, progress) {
                Ok(r) => r,
                Err(e) => return fail_input(e.to_string()),
            };
            if args.limit > 0 {
                requests.truncate(args.limit as usize);
            }
            if requests.is_empty() {
                return fail_input(format!("{}: the trace has no requests", path.display()));
            }
            let n = requests.len() as u64;
            let name = format!(
                "trace {} ({})",
                path.display(),
                args.sizes.as_deref().unwrap_or("trace sizes")
            );
            (Source::Trace { requests, sizes }, n, name)
        }
        None => {
            let zipf = match Zipf::new(args.objects, args.zipf, args.seed) {
                Ok(z) => z,
                Err(e) => return fail_input(format!("--objects/--zipf: {e}")),
            };
            let sizes = sizes.unwrap_or(SizeDist::META);
            let name = format!(
                "synthetic: {} objects, zipf {}, sizes {}",
                args.objects,
                args.zipf,
                args.sizes.as_deref().unwrap_or("meta")
            );
            (
                Source::Synthetic {
                    zipf,
                    sizes,
                    delete_ratio: args.delete_ratio,
                },
                args.requests,
                name,
            )
        }
    };
    finish(
        &args,
        run(&args, &mut source, total, workload),
        args.allow_transient,
    )
}

/// Prints the report (or why there is none) and picks the exit code.
fn finish(
    args: &Args,
    result: Result<Report, engines::RunError>,
    allow_transient: bool,
) -> ExitCode {
    match result {
        Ok(report) => {
            if !report.steady_state && !allow_transient {
                eprintln!("{}", report::refusal(&report));
                return ExitCode::from(3);
            }
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("serialisable")
                );
            } else {
                print!("{report}");
            }
            if report.wrong_values > 0 {
                eprintln!(
                    "lachesis-cachebench: {} hits returned another key's data",
                    report.wrong_values
                );
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(engines::RunError::Input(msg)) => fail_input(msg),
        Err(engines::RunError::Engine(e)) => {
            eprintln!("lachesis-cachebench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Counters the driver keeps itself, so every engine is measured the same way.
#[derive(Default, Clone, Copy)]
struct Counts {
    gets: u64,
    misses: u64,
    sets: u64,
    deletes: u64,
    wrong: u64,
    get_time: Duration,
    set_time: Duration,
}

fn run(
    args: &Args,
    source: &mut Source,
    total: u64,
    workload: String,
) -> Result<Report, engines::RunError> {
    let mut bench = engines::build(args)?;
    let bar = if args.quiet || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg} [{bar:40}] {human_pos}/{human_len} ({per_sec}, eta {eta})",
            )
            .expect("valid template"),
        );
        b.set_message(format!("{:?}", args.engine));
        b
    };
    // Warm-up: at least --warmup of the requests, then until the cache is warm (checked every
    // WARM_CHECK requests, by counts); the rest is the window, with a snapshot halfway.
    const WARM_CHECK: u64 = 1024;
    let min_warmup = (total as f64 * args.warmup) as u64;
    let (device_pages, cache_pages) = bench.pages();
    let mut c = Counts::default();
    let mut at_warmup: Option<(u64, Counts, engines::Snapshot)> = None;
    let mut at_mid = None;
    let mut mid = u64::MAX;
    let mut admit_rng = Zipf::new(1, 0.0, args.seed ^ 0xad).expect("valid");
    let mut reuse = (args.admit_reuse > 0).then(|| admission::ReuseFilter::new(args.admit_reuse));
    let start = Instant::now();
    let mut measured_start = start;
    for i in 0..total {
        if at_warmup.is_none() && i >= min_warmup && (i - min_warmup).is_multiple_of(WARM_CHECK) {
            let s = bench.snapshot();
            if args.allow_transient || steady::warmed(&s.point(), cache_pages) {
                at_warmup = Some((i, c, s));
                mid = i + (total - i) / 2;
                measured_start = Instant::now();
            }
        }
        if i == mid {
            at_mid = Some(bench.snapshot());
        }
        match source.request(i as usize) {
            Req::Get(key, size) => {
                c.gets += 1;
                let kb = key.to_le_bytes();
                let t = Instant::now();
                let got = bench.engine.get(&kb)?;
                c.get_time += t.elapsed();
                match got {
                    Some(v) => {
                        if v.len() < 8 || v[..8] != kb {
                            c.wrong += 1;
                        }
                    }
                    None => {
                        c.misses += 1;
                        let reused = reuse.as_mut().is_none_or(|f| f.admit(key));
                        if reused && (args.admit >= 1.0 || admit_rng.uniform() < args.admit) {
                            let v = value_for(key, size);
                            let t = Instant::now();
                            bench.engine.set(&kb, &v)?;
                            c.set_time += t.elapsed();
                            c.sets += 1;
                        }
                    }
                }
            }
            Req::Set(key, size) => {
                let v = value_for(key, size);
                let t = Instant::now();
                bench.engine.set(&key.to_le_bytes(), &v)?;
                c.set_time += t.elapsed();
                c.sets += 1;
            }
            Req::Delete(key) => {
                bench.engine.delete(&key.to_le_bytes())?;
                c.deletes += 1;
            }
        }
        if i % 4096 == 0 {
            bar.set_position(i);
        }
    }
    bar.finish_and_clear();
    let wall = measured_start.elapsed();
    let s1 = bench.snapshot();
    let warm = at_warmup.is_some();
    // Never warm: the window is empty, judged at the end so the verdict names what was missing.
    let (warmup, c0, s0) = at_warmup.unwrap_or((total, c, s1.clone()));
    let sm = at_mid.unwrap_or_else(|| s1.clone());
    let mut judgement = steady::judge(
        &s0.point(),
        &sm.point(),
        &s1.point(),
        device_pages,
        cache_pages,
        engines::PAGE_BYTES,
        &steady::Limits::default(),
    );
    if !warm {
        judgement.failures.insert(
            0,
            format!("the cache was still not warm after all {total} requests"),
        );
    }
    Ok(report::build(
        args,
        workload,
        total,
        total - warmup,
        &c,
        &c0,
        &s0,
        &s1,
        wall,
        &bench,
        judgement,
        reuse.as_ref().map_or(0, |f| f.dram_bytes()),
    ))
}
