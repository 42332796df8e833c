//! One client thread: a blocking connection and its request stream, run phase by phase. A
//! batch of `pipeline` requests is written at once and their replies read in order; a
//! request's latency runs from the batch's write to its own reply. In look-aside mode the sets
//! that fill a batch's misses go out as the next batch.

use std::io::{self, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lachesis_cache::workload::value_for;

use crate::args::{Config, Mode, Phase};
use crate::proto::{self, GetReply, SetReply};
use crate::requests::{key_name, prefill_keys, Kind, Request, Stream};

/// A reply later than this is a dead server, not a slow one: the run stops with an error.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Gets, hits and sets of one tenant.
#[derive(Clone, Debug, Default)]
pub struct TenantCounts {
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
}

/// What one thread counted in one phase.
#[derive(Clone, Debug)]
pub struct Counts {
    pub tenants: Vec<TenantCounts>,
    /// Latency of gets and sets, nanoseconds.
    pub get_ns: Histogram<u64>,
    pub set_ns: Histogram<u64>,
    /// Draws from the request stream (a look-aside miss's set is not one).
    pub requests: u64,
    pub not_stored: u64,
    /// `SERVER_ERROR` and the like, with the first one's text.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Hits whose value is not the one kvload stores for the key (wrong size or id).
    pub wrong_values: u64,
    pub started: Instant,
    pub ended: Instant,
}

impl Counts {
    pub fn new(tenants: usize) -> Counts {
        let hist = || Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds");
        let now = Instant::now();
        Counts {
            tenants: vec![TenantCounts::default(); tenants],
            get_ns: hist(),
            set_ns: hist(),
            requests: 0,
            not_stored: 0,
            errors: 0,
            first_error: None,
            wrong_values: 0,
            started: now,
            ended: now,
        }
    }

    /// Adds another thread's counts; the phase spans from the first start to the last end.
    pub fn merge(&mut self, o: &Counts) {
        for (a, b) in self.tenants.iter_mut().zip(&o.tenants) {
            a.gets += b.gets;
            a.hits += b.hits;
            a.sets += b.sets;
        }
        // Same bounds on both sides: cannot fail.
        let _ = self.get_ns.add(&o.get_ns);
        let _ = self.set_ns.add(&o.set_ns);
        self.requests += o.requests;
        self.not_stored += o.not_stored;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
        self.wrong_values += o.wrong_values;
        self.started = self.started.min(o.started);
        self.ended = self.ended.max(o.ended);
    }

    fn error(&mut self, line: String) {
        self.errors += 1;
        self.first_error.get_or_insert(line);
    }
}

pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    stream: Stream,
    prefixes: Vec<String>,
    pipeline: usize,
    mode: Mode,
    /// Reused buffers: requests out, a key, a value in.
    out: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

pub fn connect(server: SocketAddr) -> io::Result<(BufReader<TcpStream>, TcpStream)> {
    let s = TcpStream::connect(server)
        .map_err(|e| io::Error::new(e.kind(), format!("connecting to {server}: {e}")))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(REPLY_TIMEOUT))?;
    Ok((BufReader::with_capacity(64 << 10, s.try_clone()?), s))
}

impl Client {
    pub fn new(cfg: &Config, thread: usize) -> io::Result<Client> {
        let stream = Stream::new(cfg, thread).map_err(io::Error::other)?;
        let (reader, writer) = connect(cfg.server)?;
        Ok(Client {
            reader,
            writer,
            stream,
            prefixes: cfg.prefixes.clone(),
            pipeline: cfg.pipeline,
            mode: cfg.mode,
            out: Vec::with_capacity(64 << 10),
            key: Vec::with_capacity(256),
            value: Vec::with_capacity(64 << 10),
        })
    }

    /// Sets this thread's share of every tenant's keys (batches of at least 32).
    pub fn prefill(
        &mut self,
        keys: u64,
        thread: usize,
        threads: usize,
        done: &AtomicU64,
    ) -> io::Result<Counts> {
        let mut c = Counts::new(self.prefixes.len());
        let depth = self.pipeline.max(32);
        let mut batch = Vec::with_capacity(depth);
        for tenant in 0..self.prefixes.len() {
            let mut keys = prefill_keys(keys, thread, threads).peekable();
            while keys.peek().is_some() {
                batch.clear();
                batch.extend(keys.by_ref().take(depth).map(|key| Request {
                    tenant,
                    key,
                    size: self.stream.size_of(key),
                    kind: Kind::Set,
                }));
                self.exchange(&batch, &mut c)?;
                c.requests += batch.len() as u64;
                done.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
        }
        c.ended = Instant::now();
        Ok(c)
    }

    /// Runs requests from the stream until the phase is over.
    pub fn run(&mut self, phase: Phase, done: &AtomicU64) -> io::Result<Counts> {
        let mut c = Counts::new(self.prefixes.len());
        let mut batch = Vec::with_capacity(self.pipeline);
        loop {
            let n = match phase {
                Phase::Requests(total) => (total - c.requests).min(self.pipeline as u64) as usize,
                Phase::Seconds(s) if c.started.elapsed().as_secs_f64() < s => self.pipeline,
                Phase::Seconds(_) => 0,
            };
            if n == 0 {
                break;
            }
            batch.clear();
            batch.extend((0..n).map(|_| self.stream.next_request()));
            let misses = self.exchange(&batch, &mut c)?;
            if self.mode == Mode::Lookaside && !misses.is_empty() {
                self.exchange(&misses, &mut c)?;
            }
            c.requests += n as u64;
            done.fetch_add(n as u64, Ordering::Relaxed);
        }
        c.ended = Instant::now();
        Ok(c)
    }

    /// Sends `batch`, reads its replies, counts them; returns the sets that fill its misses.
    fn exchange(&mut self, batch: &[Request], c: &mut Counts) -> io::Result<Vec<Request>> {
        self.out.clear();
        for r in batch {
            key_name(&self.prefixes[r.tenant], r.key, &mut self.key);
            match r.kind {
                Kind::Get => proto::write_get(&mut self.out, &self.key),
                Kind::Set => proto::write_set(&mut self.out, &self.key, &value_for(r.key, r.size)),
            }
        }
        let t0 = Instant::now();
        self.writer.write_all(&self.out)?;
        let mut misses = Vec::new();
        for r in batch {
            key_name(&self.prefixes[r.tenant], r.key, &mut self.key);
            let t = &mut c.tenants[r.tenant];
            match r.kind {
                Kind::Get => {
                    t.gets += 1;
                    let reply = proto::read_get(&mut self.reader, &self.key, &mut self.value)?;
                    record(&mut c.get_ns, t0);
                    match reply {
                        GetReply::Hit => {
                            c.tenants[r.tenant].hits += 1;
                            if self.value != value_for(r.key, r.size) {
                                c.wrong_values += 1;
                            }
                        }
                        GetReply::Miss => misses.push(Request {
                            kind: Kind::Set,
                            ..*r
                        }),
                        GetReply::Error(e) => c.error(e),
                    }
                }
                Kind::Set => {
                    t.sets += 1;
                    let reply = proto::read_set(&mut self.reader)?;
                    record(&mut c.set_ns, t0);
                    match reply {
                        SetReply::Stored => {}
                        SetReply::NotStored => c.not_stored += 1,
                        SetReply::Error(e) => c.error(e),
                    }
                }
            }
        }
        Ok(misses)
    }
}

fn record(h: &mut Histogram<u64>, since: Instant) {
    h.saturating_record((since.elapsed().as_nanos() as u64).max(1));
}
