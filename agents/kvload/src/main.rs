//! lachesis-kvload: one memcached-protocol load generator for memcached and Lachesis's KV
//! front end alike. See `args.rs` for the flags, `report.rs` for what it reports.

mod args;
mod client;
mod proto;
mod report;
mod requests;
mod run;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = args::Args::parse();
    let cfg = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lachesis-kvload: {e}");
            return ExitCode::from(2);
        }
    };
    if !args.quiet {
        eprintln!(
            "kvload: {} threads against {}, {} keys x {} tenants, {}; measured phase {}",
            cfg.threads,
            cfg.server,
            cfg.keys,
            cfg.prefixes.len(),
            format!("{:?}", cfg.mode).to_lowercase(),
            cfg.measure.describe()
        );
    }
    match run::run(&cfg, args.quiet) {
        Ok(outcome) => {
            let r = report::build(&cfg, &args.dist, &args.value_size, outcome);
            println!(
                "{}",
                serde_json::to_string_pretty(&r).expect("a report serializes")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lachesis-kvload: {}: {e}", cfg.server);
            ExitCode::FAILURE
        }
    }
}
