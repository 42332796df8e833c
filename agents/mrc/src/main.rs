//! `lachesis-mrc`: miss-ratio curves of a trace. See `--help`.

use clap::Parser;
use std::process::ExitCode;

mod cli;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    match cli::run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lachesis-mrc: {e}");
            ExitCode::from(2)
        }
    }
}
