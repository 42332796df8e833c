//! Command line of lachesis-kvload, and the checks clap cannot make (each message names its flag).

use std::net::{SocketAddr, ToSocketAddrs};

use clap::{Parser, ValueEnum};
use lachesis_cache::workload::SizeDist;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Gets and sets in the ratio of --get-ratio, whatever the gets find.
    Mix,
    /// An application's look-aside cache: get, and set the value on a miss.
    Lookaside,
}

/// Drives a memcached-protocol server (memcached, Lachesis's KV front end) with the text
/// protocol's get and set from N client threads, one blocking connection each, and prints a
/// JSON report: requests per second, p50/p99 latency per command, hits and misses per tenant,
/// and the server's `stats` (and `stats lachesis` where it answers) before and after the
/// measured phase. Progress goes to stderr.
#[derive(Debug, Parser)]
#[command(name = "lachesis-kvload", version)]
pub struct Args {
    /// The server, host:port.
    #[arg(long, default_value = "127.0.0.1:11211")]
    pub server: String,
    /// Client threads, one connection each.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Requests a connection sends before it reads their replies (1: no pipelining).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,

    /// Distinct keys per tenant.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Key popularity: zipf:ALPHA or uniform.
    #[arg(long, default_value = "zipf:0.99")]
    pub dist: String,
    /// Value sizes (a function of the key): N, MIN-MAX (uniform), or meta, twitter, wide
    /// (the small-object distributions of lachesis-cachebench).
    #[arg(long, default_value = "50-300")]
    pub value_size: String,
    #[arg(long, value_enum, default_value = "lookaside")]
    pub mode: Mode,
    /// Mix: the share of requests that are gets.
    #[arg(long, default_value_t = 0.9)]
    pub get_ratio: f64,
    /// A tenant's key prefix; repeat for several tenants in one run (each request picks one
    /// at random). None: keys without a prefix.
    #[arg(long = "tenant", value_name = "PREFIX")]
    pub tenants: Vec<String>,
    /// Seed of the key streams (thread i uses seed + i).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Before anything else, set every key of every tenant once.
    #[arg(long)]
    pub prefill: bool,
    /// Unmeasured warm-up, seconds.
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    /// Unmeasured warm-up, requests per thread (instead of --warmup).
    #[arg(long)]
    pub warmup_requests: Option<u64>,
    /// Measured phase, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Measured phase, requests per thread (instead of --duration).
    #[arg(long)]
    pub requests: Option<u64>,

    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// How keys are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyDist {
    Zipf(f64),
    Uniform,
}

impl KeyDist {
    pub fn parse(s: &str) -> Result<KeyDist, String> {
        if s == "uniform" {
            return Ok(KeyDist::Uniform);
        }
        match s.strip_prefix("zipf:").map(str::parse::<f64>) {
            Some(Ok(a)) if a.is_finite() && a > 0.0 => Ok(KeyDist::Zipf(a)),
            _ => Err(format!(
                "--dist {s:?}: expected zipf:ALPHA (ALPHA > 0) or uniform"
            )),
        }
    }

    /// The exponent handed to `lachesis_cache::workload::Zipf` (0: every key equally likely).
    pub fn alpha(self) -> f64 {
        match self {
            KeyDist::Zipf(a) => a,
            KeyDist::Uniform => 0.0,
        }
    }
}

/// `--value-size`: `N` and `MIN-MAX` are short for cachebench's `fixed:N` and
/// `uniform:MIN-MAX`; the rest is `SizeDist::parse`'s.
pub fn parse_value_size(s: &str) -> Result<SizeDist, String> {
    let spelled = if s.bytes().all(|b| b.is_ascii_digit()) {
        format!("fixed:{s}")
    } else if s.split_once('-').is_some_and(|(a, b)| {
        !a.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
    }) {
        format!("uniform:{s}")
    } else {
        s.to_string()
    };
    SizeDist::parse(&spelled).map_err(|e| format!("--value-size {s:?}: {e}"))
}

/// A key prefix memcached accepts: printable, no spaces or control characters, short enough
/// to leave room for the key id (keys are at most 250 bytes).
pub fn check_prefix(p: &str) -> Result<(), String> {
    if p.is_empty() || p.len() > 200 || !p.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "--tenant {p:?}: a prefix is 1-200 printable ASCII characters without spaces"
        ));
    }
    Ok(())
}

/// What the workers need, checked.
#[derive(Clone, Debug)]
pub struct Config {
    pub server: SocketAddr,
    pub threads: usize,
    pub pipeline: usize,
    pub keys: u64,
    pub dist: KeyDist,
    pub sizes: SizeDist,
    pub mode: Mode,
    pub get_ratio: f64,
    pub prefixes: Vec<String>,
    pub seed: u64,
    pub prefill: bool,
    pub warmup: Phase,
    pub measure: Phase,
}

/// How long a phase lasts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    Seconds(f64),
    Requests(u64),
}

impl Phase {
    pub fn describe(self) -> String {
        match self {
            Phase::Seconds(s) => format!("{s} s"),
            Phase::Requests(n) => format!("{n} requests per thread"),
        }
    }

    pub fn is_empty(self) -> bool {
        matches!(self, Phase::Seconds(s) if s == 0.0) || self == Phase::Requests(0)
    }
}

fn seconds(flag: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() && (0.0..=86_400.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("--{flag} {v}: must be 0-86400 seconds"))
    }
}

impl Args {
    pub fn config(&self) -> Result<Config, String> {
        let server = self
            .server
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("--server {:?}: expected host:port", self.server))?;
        if !(1..=1024).contains(&self.threads) {
            return Err(format!("--threads {}: must be 1-1024", self.threads));
        }
        if !(1..=4096).contains(&self.pipeline) {
            return Err(format!("--pipeline {}: must be 1-4096", self.pipeline));
        }
        // The workload's Zipf keeps a CDF entry per key.
        if !(1..=1 << 28).contains(&self.keys) {
            return Err(format!("--keys {}: must be 1-268435456", self.keys));
        }
        if !(self.get_ratio.is_finite() && (0.0..=1.0).contains(&self.get_ratio)) {
            return Err(format!(
                "--get-ratio {}: must be between 0 and 1",
                self.get_ratio
            ));
        }
        for p in &self.tenants {
            check_prefix(p)?;
        }
        let mut prefixes = self.tenants.clone();
        prefixes.sort();
        prefixes.dedup();
        if prefixes.len() != self.tenants.len() {
            return Err(format!(
                "--tenant: a prefix is given twice in {:?}",
                self.tenants
            ));
        }
        let measure = match self.requests {
            Some(0) => return Err("--requests 0: must be at least 1".into()),
            Some(n) => Phase::Requests(n),
            None if seconds("duration", self.duration)? > 0.0 => Phase::Seconds(self.duration),
            None => return Err("--duration 0: must be more than 0 seconds".into()),
        };
        let warmup = match self.warmup_requests {
            Some(n) => Phase::Requests(n),
            None => Phase::Seconds(seconds("warmup", self.warmup)?),
        };
        Ok(Config {
            server,
            threads: self.threads,
            pipeline: self.pipeline,
            keys: self.keys,
            dist: KeyDist::parse(&self.dist)?,
            sizes: parse_value_size(&self.value_size)?,
            mode: self.mode,
            get_ratio: self.get_ratio,
            prefixes: if self.tenants.is_empty() {
                vec![String::new()]
            } else {
                self.tenants.clone()
            },
            seed: self.seed,
            prefill: self.prefill,
            warmup,
            measure,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Config, String> {
        let argv = ["lachesis-kvload"].iter().chain(extra).copied();
        Args::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .config()
    }

    #[test]
    fn value_sizes() {
        assert_eq!(parse_value_size("100").unwrap(), SizeDist::Fixed(100));
        assert_eq!(
            parse_value_size("50-300").unwrap(),
            SizeDist::Uniform { min: 50, max: 300 }
        );
        assert_eq!(parse_value_size("meta").unwrap(), SizeDist::META);
        for bad in ["300-50", "-5", "4", "big", "50-", "1-2-3"] {
            let e = parse_value_size(bad).unwrap_err();
            assert!(e.starts_with("--value-size"), "{bad}: {e}");
        }
    }

    #[test]
    fn key_distributions() {
        assert_eq!(KeyDist::parse("zipf:0.9").unwrap(), KeyDist::Zipf(0.9));
        assert_eq!(KeyDist::parse("uniform").unwrap().alpha(), 0.0);
        for bad in ["zipf:-1", "zipf:", "zipf:nan", "normal"] {
            assert!(
                KeyDist::parse(bad).unwrap_err().starts_with("--dist"),
                "{bad}"
            );
        }
    }

    #[test]
    fn defaults_and_phases() {
        let c = args(&[]).unwrap();
        assert_eq!(c.prefixes, vec![String::new()]);
        assert_eq!(c.measure, Phase::Seconds(10.0));
        assert!(c.warmup.is_empty());
        assert_eq!(c.mode, Mode::Lookaside);
        let c = args(&[
            "--requests",
            "5",
            "--warmup-requests",
            "3",
            "--tenant",
            "a:",
            "--tenant",
            "b:",
        ])
        .unwrap();
        assert_eq!(
            (c.measure, c.warmup),
            (Phase::Requests(5), Phase::Requests(3))
        );
        assert_eq!(c.prefixes, vec!["a:", "b:"]);
    }

    #[test]
    fn bad_arguments_name_their_flag() {
        for (argv, flag) in [
            (&["--threads", "0"][..], "--threads"),
            (&["--pipeline", "0"], "--pipeline"),
            (&["--keys", "0"], "--keys"),
            (&["--get-ratio", "1.5"], "--get-ratio"),
            (&["--tenant", "a b"], "--tenant"),
            (&["--tenant", "a:", "--tenant", "a:"], "--tenant"),
            (&["--requests", "0"], "--requests"),
            (&["--duration", "0"], "--duration"),
            (&["--warmup=-1"], "--warmup"),
            (&["--server", "nohostport"], "--server"),
            (&["--value-size", "0-0"], "--value-size"),
        ] {
            let e = args(argv).unwrap_err();
            assert!(e.contains(flag), "{argv:?}: {e}");
        }
    }
}
