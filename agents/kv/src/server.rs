//! The TCP side: an accept loop, a task per connection, bounded buffers.
//!
//! A connection buffers at most one command's line ([`Limits::max_line`]) and value (the
//! value's declared length, itself at most `max_item`); a value refused unread is skipped as
//! it arrives. Replies are written as the socket takes them; a connection whose unsent
//! replies pass `output_bound` (a client that sends and never reads) is closed and counted.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

use crate::exec::{self, Conn, Flow};
use crate::protocol::{parse, Limits, Parse};
use crate::service::Service;
use crate::upstream::Upstreams;

/// Longest command line.
pub const MAX_LINE: usize = 64 << 10;
/// Bytes read from a socket at a time.
const READ_CHUNK: usize = 64 << 10;

/// The threads connections run on: each thread runs a single-threaded runtime and keeps every
/// connection it is given, as memcached's worker threads do; connections are dealt out in turn.
///
/// Why not one work-stealing runtime: with one blocking client per connection, every request
/// wakes the connection's task from the IO driver, and the multi-thread scheduler hands it to
/// whichever worker is free and wakes a parked sibling to look for work. Measured with two
/// client threads on two cores (`bench/kv`), that doubled the server's CPU per request against
/// memcached's (docs/benchmarks/kv.md). Pinned, a request costs one wake-up of its own thread.
pub struct Workers {
    handles: Vec<Handle>,
    next: AtomicUsize,
    /// Dropping these ends the threads' runtimes (and the connections on them).
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    /// Starts `n` (at least one) connection threads named `name-0`, `name-1`, ...
    pub fn start(n: usize, name: &str) -> std::io::Result<Arc<Self>> {
        let mut w = Workers {
            handles: Vec::new(),
            next: AtomicUsize::new(0),
            stops: Vec::new(),
            threads: Vec::new(),
        };
        for i in 0..n.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            w.handles.push(rt.handle().clone());
            w.stops.push(stop);
            // On an error `w` is dropped: the threads already started end with their senders.
            w.threads.push(
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || {
                        let _ = rt.block_on(stopped);
                        // A rate-limited request may be waiting in a blocking admission; do not
                        // wait for it.
                        rt.shutdown_background();
                    })?,
            );
        }
        Ok(Arc::new(w))
    }

    /// The number of connection threads.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Always false: there is at least one thread.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The runtime of the thread whose turn it is.
    fn next(&self) -> &Handle {
        &self.handles[self.next.fetch_add(1, Relaxed) % self.handles.len()]
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stops.clear();
        for t in self.threads.drain(..) {
            // A thread runs no code of ours that can panic; its join cannot fail but by abort.
            let _ = t.join();
        }
    }
}

/// One open connection in the counters, for as long as its task lives (also when its runtime
/// drops the task at shutdown).
struct Open<'a>(&'a AtomicU64);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Serves `listen` until `shutdown` turns true (or its sender is dropped), connections on
/// `workers`.
pub async fn serve(
    listen: SocketAddr,
    service: Arc<Service>,
    shutdown: watch::Receiver<bool>,
    workers: Arc<Workers>,
) -> std::io::Result<()> {
    let l = TcpListener::bind(listen).await?;
    serve_listener(l, service, shutdown, workers).await
}

/// [`serve`] on a bound listener (tests bind port 0 and read the port first).
pub async fn serve_listener(
    listener: TcpListener,
    service: Arc<Service>,
    mut shutdown: watch::Receiver<bool>,
    workers: Arc<Workers>,
) -> std::io::Result<()> {
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                // Out of descriptors and the like: this connection is lost, not the listener.
                Err(e) => {
                    tracing::warn!("kv accept: {e}");
                    continue;
                }
            },
            r = shutdown.changed() => {
                if r.is_err() { return Ok(()); }
                continue;
            }
        };
        let c = &service.conns;
        if c.current.load(Relaxed) >= service.config().max_connections as u64 {
            c.rejected.fetch_add(1, Relaxed);
            let _ = stream.try_write(b"SERVER_ERROR Too many open connections\r\n");
            continue;
        }
        c.current.fetch_add(1, Relaxed);
        c.total.fetch_add(1, Relaxed);
        let _ = stream.set_nodelay(true);
        let port = stream.local_addr().map(|a| a.port()).unwrap_or(0);
        let port_tenant = service.routing().ports.get(&port).cloned();
        let svc = service.clone();
        let sd = shutdown.clone();
        // The socket moves to the worker's runtime: registered with this runtime's IO driver,
        // its readiness would be reported here.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                c.current.fetch_sub(1, Relaxed);
                tracing::warn!("kv accept: {e}");
                continue;
            }
        };
        workers.next().spawn(async move {
            let _open = Open(&svc.conns.current);
            match TcpStream::from_std(stream) {
                Ok(stream) => connection(stream, &svc, port_tenant, sd).await,
                Err(e) => tracing::warn!("kv connection: {e}"),
            }
        });
    }
}

/// Reads and drops what the client has sent and the server will not read (a bounded
/// amount), so closing does not answer it with a reset that could destroy the last reply
/// before the client reads it.
fn discard_pending(stream: &TcpStream) {
    let mut buf = [0u8; 16 << 10];
    for _ in 0..64 {
        match stream.try_read(&mut buf) {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

async fn connection(
    stream: TcpStream,
    svc: &Service,
    port_tenant: Option<Arc<str>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let cfg = svc.config();
    let limits = Limits {
        max_item: cfg.max_item,
        max_line: MAX_LINE,
    };
    let stream = Arc::new(stream);
    let mut conn = Conn {
        port_tenant,
        upstreams: Upstreams::new(cfg.max_item),
        output_bound: cfg.output_bound,
        stream: Some(stream.clone()),
        sent: 0,
    };
    let counters = &svc.conns;
    let mut inbuf: Vec<u8> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    // Bytes of a refused value still to skip.
    let mut skip = 0usize;
    // Bytes the command in front needs buffered (its line and value).
    let mut need = MAX_LINE;
    let mut closing = false;
    let mut eof = false;
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let mut pos = 0;
        while !closing {
            if skip > 0 {
                let n = skip.min(inbuf.len() - pos);
                pos += n;
                skip -= n;
                if skip > 0 {
                    break;
                }
            }
            match parse(&inbuf[pos..], &limits) {
                Parse::Incomplete { need: n } => {
                    need = n.unwrap_or(MAX_LINE).max(MAX_LINE);
                    break;
                }
                Parse::Command { cmd, used } => {
                    pos += used;
                    match exec::execute(svc, &mut conn, cmd, &mut out).await {
                        Flow::Continue => {}
                        Flow::Close => closing = true,
                        Flow::Overflow => {
                            counters.closed_output_bound.fetch_add(1, Relaxed);
                            return;
                        }
                    }
                }
                Parse::Error { reply, used, close } => {
                    counters.bad_commands.fetch_add(1, Relaxed);
                    out.extend_from_slice(reply.as_bytes());
                    pos += used;
                    if close {
                        counters.closed_bad_input.fetch_add(1, Relaxed);
                        closing = true;
                    }
                }
                Parse::Swallow {
                    reply,
                    used,
                    skip: s,
                    unlink,
                } => {
                    counters.bad_commands.fetch_add(1, Relaxed);
                    out.extend_from_slice(reply.as_bytes());
                    pos += used;
                    skip = s;
                    if let Some(k) = unlink {
                        exec::unlink(svc, &conn, &k);
                    }
                }
            }
            if conn.over_bound(&out) {
                counters.closed_output_bound.fetch_add(1, Relaxed);
                return;
            }
        }
        inbuf.drain(..pos);
        if skip > 0 {
            need = MAX_LINE;
        }
        // Write what the socket takes now.
        if !conn.write_now(&out) {
            return;
        }
        if conn.sent == out.len() {
            out.clear();
            conn.sent = 0;
            if closing || eof {
                discard_pending(&stream);
                return;
            }
        }
        let want_read = !closing && !eof && inbuf.len() < need;
        let want_write = conn.sent < out.len();
        let interest = match (want_read, want_write) {
            (true, true) => Interest::READABLE | Interest::WRITABLE,
            (true, false) => Interest::READABLE,
            (false, true) => Interest::WRITABLE,
            // Nothing to send and a full buffer cannot happen: the parser takes a whole
            // command out of `need` bytes. Stop rather than spin.
            (false, false) => return,
        };
        let ready = tokio::select! {
            r = stream.ready(interest) => match r { Ok(r) => r, Err(_) => return },
            r = shutdown.changed() => {
                if r.is_err() || *shutdown.borrow() { return; }
                continue;
            }
        };
        if want_read && ready.is_readable() {
            let room = if skip > 0 {
                READ_CHUNK
            } else {
                (need - inbuf.len()).min(READ_CHUNK)
            };
            match stream.try_read(&mut chunk[..room]) {
                Ok(0) => eof = true,
                Ok(n) => {
                    if skip > 0 {
                        let s = n.min(skip);
                        skip -= s;
                        inbuf.extend_from_slice(&chunk[s..n]);
                    } else {
                        inbuf.extend_from_slice(&chunk[..n]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        if ready.is_read_closed() && !ready.is_readable() {
            eof = true;
        }
    }
}
