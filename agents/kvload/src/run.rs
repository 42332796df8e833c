//! The phases of a run (prefill, warm-up, measured), each on every client thread at once,
//! with a progress line per second on stderr, and the server's statistics read around the
//! measured phase on a connection of their own.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::args::Config;
use crate::client::{connect, Client, Counts};
use crate::proto;

/// The server's `stats` and, where it answers, `stats lachesis` (Lachesis's KV front end: per
/// tenant and per device figures; memcached answers `ERROR`, kept as `null`).
#[derive(Debug, Serialize)]
pub struct ServerStats {
    pub stats: BTreeMap<String, String>,
    pub lachesis: Option<BTreeMap<String, String>>,
}

pub fn server_stats(cfg: &Config) -> io::Result<ServerStats> {
    let (mut reader, mut writer) = connect(cfg.server)?;
    writer.write_all(b"stats\r\nstats lachesis\r\n")?;
    let stats = proto::read_stats(&mut reader)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the server does not answer `stats`",
        )
    })?;
    let lachesis = proto::read_stats(&mut reader)?;
    Ok(ServerStats { stats, lachesis })
}

/// What the whole run counted: the phases merged over threads.
pub struct Outcome {
    pub prefill: Option<Counts>,
    pub warmup: Option<Counts>,
    pub measured: Counts,
    pub before: ServerStats,
    pub after: ServerStats,
}

pub fn run(cfg: &Config, quiet: bool) -> io::Result<Outcome> {
    let mut clients = (0..cfg.threads)
        .map(|t| Client::new(cfg, t))
        .collect::<io::Result<Vec<_>>>()?;
    let threads = cfg.threads;
    let keys = cfg.keys;
    let prefill = if cfg.prefill {
        Some(phase(&mut clients, "prefill", quiet, |t, c, done| {
            c.prefill(keys, t, threads, done)
        })?)
    } else {
        None
    };
    let warmup = if cfg.warmup.is_empty() {
        None
    } else {
        Some(phase(&mut clients, "warm-up", quiet, |_, c, done| {
            c.run(cfg.warmup, done)
        })?)
    };
    let before = server_stats(cfg)?;
    let measured = phase(&mut clients, "measured", quiet, |_, c, done| {
        c.run(cfg.measure, done)
    })?;
    let after = server_stats(cfg)?;
    Ok(Outcome {
        prefill,
        warmup,
        measured,
        before,
        after,
    })
}

/// Runs `work` on every client in a thread of its own and merges what they counted.
fn phase<F>(clients: &mut [Client], name: &str, quiet: bool, work: F) -> io::Result<Counts>
where
    F: Fn(usize, &mut Client, &AtomicU64) -> io::Result<Counts> + Sync,
{
    let done = AtomicU64::new(0);
    let (stop, stopped) = mpsc::channel::<()>();
    let results = std::thread::scope(|s| {
        if !quiet {
            let done = &done;
            s.spawn(move || progress(name, done, stopped));
        }
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(t, c)| {
                let (work, done) = (&work, &done);
                s.spawn(move || work(t, c, done))
            })
            .collect();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a client thread panicked")))
            })
            .collect();
        drop(stop);
        results
    });
    let mut all: Option<Counts> = None;
    for r in results {
        let c = r?;
        match &mut all {
            Some(a) => a.merge(&c),
            None => all = Some(c),
        }
    }
    Ok(all.expect("at least one client thread"))
}

/// Prints the phase's requests and rate once a second until `stopped` disconnects.
fn progress(name: &str, done: &AtomicU64, stopped: mpsc::Receiver<()>) {
    let start = Instant::now();
    let mut last = 0;
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_secs(1)) {
        let now = done.load(Ordering::Relaxed);
        eprintln!(
            "kvload: {name} {:.0} s: {now} requests, {}/s",
            start.elapsed().as_secs_f64(),
            now - last
        );
        last = now;
    }
}
