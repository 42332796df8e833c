//! The forwarding client: one connection per remote agent, shared by every FUSE worker.
//! Requests are pipelined (each waits on its own id while a reader thread hands out replies
//! in whatever order they come); a broken connection is replaced on the next request; a
//! request that gets no answer within the timeout fails with EIO instead of hanging.

use std::collections::HashMap;
use std::io::{self, BufReader};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use super::auth::{self, Key};
use super::demote::DemoteQueue;
use super::frame::{Frame, Op};
use super::latency::{EndpointLatency, LatencyMonitor};

/// Reads and writes are split into frames of at most this many data bytes.
const CHUNK: usize = 4 << 20;

pub struct Client {
    addr: String,
    timeout: Duration,
    /// With a key, every connection authenticates (both ways) before its first frame.
    key: Option<Key>,
    conn: Mutex<Option<Arc<Conn>>>,
    next_id: AtomicU64,
    /// Round trips of answered requests (and timeouts, at the timeout).
    latency: LatencyMonitor,
    /// Level-1 evictions on their way back to this agent's server level (started on use).
    demotions: OnceLock<Arc<DemoteQueue>>,
}

/// The path a probe asks the size of: never written, so the server only looks it up.
const PROBE_PATH: &str = ".lachesis-probe";

type Pending = HashMap<u64, mpsc::SyncSender<Frame>>;

struct Conn {
    out: Mutex<TcpStream>,
    /// Waiting requests by id; `None` once the connection is dead (so nobody registers on a
    /// connection whose reader is gone).
    pending: Mutex<Option<Pending>>,
    dead: AtomicBool,
}

impl Conn {
    fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
        let _ = self
            .out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown(Shutdown::Both);
        // Dropping the senders wakes every waiter with an error.
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}

fn eio(why: impl std::fmt::Display) -> io::Error {
    tracing::warn!("remote endpoint: {why}");
    io::Error::from_raw_os_error(libc::EIO)
}

impl Client {
    /// `addr` is `HOST:PORT`; nothing is connected until the first request.
    pub fn new(addr: &str, timeout: Duration) -> Client {
        Client::with_key(addr, timeout, None)
    }

    /// A client that authenticates with `key` (see [`auth`]).
    pub fn with_key(addr: &str, timeout: Duration, key: Option<Key>) -> Client {
        Client {
            addr: addr.to_string(),
            timeout,
            key,
            conn: Mutex::new(None),
            next_id: AtomicU64::new(1),
            latency: LatencyMonitor::default(),
            demotions: OnceLock::new(),
        }
    }

    /// The endpoint's latency numbers so far.
    pub fn latency(&self) -> EndpointLatency {
        self.latency.report(&self.addr)
    }

    /// One round trip that touches no data (a size lookup of a file never written), so the
    /// monitor keeps measuring an endpoint no IO goes to (one writes were forwarded away
    /// from): recovery shows without sending it data.
    pub fn probe(&self) -> io::Result<()> {
        self.getattr(PROBE_PATH).map(|_| ())
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn connect(&self) -> io::Result<Arc<Conn>> {
        let mut slot = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = slot.as_ref().filter(|c| !c.dead.load(Ordering::SeqCst)) {
            return Ok(c.clone());
        }
        let sa = self
            .addr
            .to_socket_addrs()
            .map_err(|e| eio(format!("{}: {e}", self.addr)))?
            .next()
            .ok_or_else(|| eio(format!("{}: no address", self.addr)))?;
        let s = TcpStream::connect_timeout(&sa, self.timeout)
            .map_err(|e| eio(format!("connecting to {}: {e}", self.addr)))?;
        s.set_nodelay(true)?;
        s.set_write_timeout(Some(self.timeout))?;
        if let Some(key) = &self.key {
            s.set_read_timeout(Some(self.timeout))?;
            let mut hs = &s;
            auth::client(&mut hs, key)
                .map_err(|e| eio(format!("authenticating to {}: {e}", self.addr)))?;
            s.set_read_timeout(None)?;
        }
        let conn = Arc::new(Conn {
            out: Mutex::new(s.try_clone()?),
            pending: Mutex::new(Some(HashMap::new())),
            dead: AtomicBool::new(false),
        });
        let reader = conn.clone();
        let addr = self.addr.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(s);
            loop {
                match Frame::read_from(&mut r) {
                    Ok(f) => {
                        let waiter = reader
                            .pending
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .as_mut()
                            .and_then(|p| p.remove(&f.id));
                        // A reply nobody waits for (its request timed out) is dropped.
                        if let Some(w) = waiter {
                            let _ = w.try_send(f);
                        }
                    }
                    Err(e) => {
                        if !reader.dead.load(Ordering::SeqCst) {
                            tracing::warn!("remote endpoint {addr}: connection lost: {e}");
                        }
                        reader.kill();
                        return;
                    }
                }
            }
        });
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Sends `req` and waits for its reply; a connection found broken is replaced once.
    fn call(&self, mut req: Frame) -> io::Result<Frame> {
        for attempt in 0..2 {
            let conn = self.connect()?;
            req.id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = mpsc::sync_channel(1);
            {
                let mut p = conn.pending.lock().unwrap_or_else(|e| e.into_inner());
                match p.as_mut() {
                    Some(p) => p.insert(req.id, tx),
                    None => continue,
                };
            }
            let asked = std::time::Instant::now();
            let sent = {
                let mut o = conn.out.lock().unwrap_or_else(|e| e.into_inner());
                req.write_to(&mut *o)
            };
            if let Err(e) = sent {
                conn.kill();
                if attempt == 0 {
                    continue;
                }
                return Err(eio(format!("sending to {}: {e}", self.addr)));
            }
            let got = rx.recv_timeout(self.timeout);
            if !matches!(got, Err(mpsc::RecvTimeoutError::Disconnected)) {
                self.latency.record(asked.elapsed());
            }
            match got {
                Ok(reply) if reply.status != 0 => {
                    return Err(io::Error::from_raw_os_error(reply.status))
                }
                Ok(reply) => return Ok(reply),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // The peer is wedged or the network dropped: start afresh next time.
                    conn.kill();
                    return Err(eio(format!(
                        "{} did not answer {:?} of {} within {:?}",
                        self.addr, req.op, req.path, self.timeout
                    )));
                }
                // The connection died under the request; every op is idempotent (writes at
                // an offset, truncates to a size, renames of a gone source are no-ops).
                Err(mpsc::RecvTimeoutError::Disconnected) if attempt == 0 => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(eio(format!("connection to {} lost", self.addr)))
                }
            }
        }
        Err(eio(format!("connection to {} lost", self.addr)))
    }

    /// Reads up to `buf.len()` bytes at `off`; fewer only at the remote file's end.
    pub fn read(&self, path: &str, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let mut got = 0;
        for piece in buf.chunks_mut(CHUNK) {
            let r = self.call(Frame::request(
                Op::Read,
                path,
                off + got as u64,
                piece.len() as u64,
                vec![],
            ))?;
            let n = r.data.len().min(piece.len());
            piece[..n].copy_from_slice(&r.data[..n]);
            got += n;
            if n < piece.len() {
                break;
            }
        }
        Ok(got)
    }

    /// A read of at most one frame from a level 1 that keeps what it reads and demotes it
    /// on eviction (`frame::READ_LEND`): the bytes read and the lend token (0: not lent).
    pub fn read_lent(&self, path: &str, buf: &mut [u8], off: u64) -> io::Result<(usize, u64)> {
        if buf.len() > CHUNK {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let r = self.call(Frame {
            status: super::frame::READ_LEND,
            ..Frame::request(Op::Read, path, off, buf.len() as u64, vec![])
        })?;
        let n = r.data.len().min(buf.len());
        buf[..n].copy_from_slice(&r.data[..n]);
        Ok((n, r.offset))
    }

    /// Sends one demoted block (see `frame.rs`); whether the server level took it.
    pub fn demote(&self, path: &str, off: u64, token: u64, data: &[u8]) -> io::Result<bool> {
        self.call(Frame::request(Op::Demote, path, off, token, data.to_vec()))
            .map(|r| r.len == 1)
    }

    /// The queue level-1 evictions go back to this agent by (its thread started on first use).
    pub fn demote_queue(self: &Arc<Self>) -> Arc<DemoteQueue> {
        self.demotions
            .get_or_init(|| {
                Arc::new(DemoteQueue::start(
                    Arc::downgrade(self),
                    super::demote::QUEUE_BLOCKS,
                ))
            })
            .clone()
    }

    /// Returns once the bytes are durable on the remote.
    pub fn write(&self, path: &str, data: &[u8], off: u64) -> io::Result<()> {
        for (i, piece) in data.chunks(CHUNK).enumerate() {
            let at = off + (i * CHUNK) as u64;
            self.call(Frame::request(Op::Write, path, at, 0, piece.to_vec()))?;
        }
        Ok(())
    }

    pub fn fsync(&self, path: &str) -> io::Result<()> {
        self.call(Frame::request(Op::Fsync, path, 0, 0, vec![]))
            .map(|_| ())
    }

    pub fn truncate(&self, path: &str, size: u64) -> io::Result<()> {
        self.call(Frame::request(Op::Truncate, path, 0, size, vec![]))
            .map(|_| ())
    }

    /// The remote file's size.
    pub fn getattr(&self, path: &str) -> io::Result<u64> {
        self.call(Frame::request(Op::Getattr, path, 0, 0, vec![]))
            .map(|r| r.len)
    }

    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.call(Frame::request(
            Op::Rename,
            from,
            0,
            0,
            to.as_bytes().to_vec(),
        ))
        .map(|_| ())
    }
}
