//! The TCP side: an accept loop, a task per connection, bounded buffers.
//!
//! A connection buffers at most one command's line ([`Limits::max_line`]) and value (the
//! value's declared length, itself at most `max_item`); a value refused unread is skipped as
//! it arrives. Replies are written as the socket takes them; a connection whose unsent
//! replies pass `output_bound` (a client that sends and never reads) is closed and counted.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
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
/// connection it is given, as memcached's worker threads do. A new connection goes to the
/// thread with the fewest open ones (in turn among equals): dealt out blindly in turn,
/// connections that come and go (a `stats` before and after a run) can leave the long-lived
/// ones on one thread, taking turns on one core while the other idles.
///
/// Why not one work-stealing runtime: with one blocking client per connection, every request
/// wakes the connection's task from the IO driver, and the multi-thread scheduler hands it to
/// whichever worker is free and wakes a parked sibling to look for work. Measured with two
/// client threads on two cores (`bench/kv`), that doubled the server's CPU per request against
/// memcached's (docs/benchmarks/kv.md). Pinned, a request costs one wake-up of its own thread.
pub struct Workers {
    handles: Vec<Handle>,
    /// Open connections per thread.
    open: Vec<Arc<AtomicUsize>>,
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
            open: Vec::new(),
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
            w.open.push(Arc::new(AtomicUsize::new(0)));
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

    /// The number of connection threads (at least one).
    fn count(&self) -> usize {
        self.handles.len()
    }

    /// The thread for a new connection: the fewest open connections, starting the search at
    /// the next thread in turn so that equals take turns. Its runtime and its open count, which
    /// the connection holds up until it ends.
    fn pick(&self) -> (&Handle, Arc<AtomicUsize>) {
        let n = self.handles.len();
        let start = self.next.fetch_add(1, Relaxed);
        let i = (0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| self.open[i].load(Relaxed))
            .unwrap_or(0);
        self.open[i].fetch_add(1, Relaxed);
        (&self.handles[i], self.open[i].clone())
    }

    /// Open connections on each thread.
    #[cfg(test)]
    fn open_per_thread(&self) -> Vec<usize> {
        self.open.iter().map(|o| o.load(Relaxed)).collect()
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

/// One open connection in the counters (the service's and its thread's), for as long as its
/// task lives: also when its runtime drops the task at shutdown, or refuses it.
struct Open {
    service: Arc<Service>,
    thread: Arc<AtomicUsize>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.service.conns.current.fetch_sub(1, Relaxed);
        self.thread.fetch_sub(1, Relaxed);
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
    service.conns.threads.store(workers.count() as u64, Relaxed);
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
        let (rt, thread) = workers.pick();
        let open = Open {
            service: service.clone(),
            thread,
        };
        rt.spawn(async move {
            match TcpStream::from_std(stream) {
                Ok(stream) => connection(stream, &open.service, port_tenant, sd).await,
                Err(e) => tracing::warn!("kv connection: {e}"),
            }
            drop(open);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_connection_goes_to_the_thread_with_the_fewest() {
        let w = Workers::start(2, "kv-test").unwrap();
        let (_, a) = w.pick();
        let (_, b) = w.pick();
        assert!(!Arc::ptr_eq(&a, &b), "two connections on one thread");
        assert_eq!(w.open_per_thread(), vec![1, 1]);
        // A short connection comes and goes, then two long ones: one on each thread.
        let (_, short) = w.pick();
        short.fetch_sub(1, Relaxed);
        a.fetch_sub(1, Relaxed);
        b.fetch_sub(1, Relaxed);
        let (_, c) = w.pick();
        let (_, d) = w.pick();
        assert!(!Arc::ptr_eq(&c, &d));
        assert_eq!(w.open_per_thread(), vec![1, 1]);
        // With one thread busier, both new ones go to the other until they are level.
        c.fetch_add(2, Relaxed);
        let (_, e) = w.pick();
        let (_, f) = w.pick();
        assert!(Arc::ptr_eq(&e, &d) && Arc::ptr_eq(&f, &d));
    }
}
