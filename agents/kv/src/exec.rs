//! Executes one parsed command for a connection: routes each key to its tenant's store (or
//! a remote front end), applies the rate limit, writes memcached's reply.

use lachesis_stages::qos::Permit;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use lachesis_switch::Op;

use crate::item::Item;
use crate::protocol::{encode, reply, Command, Meta, MetaKind, StoreMode};
use crate::service::{KvOp, Service};
use crate::store::{Arith, Deleted, Store, Stored};
use crate::tenant::{Routed, Target};
use crate::upstream::{ReplyKind, Upstreams};

/// A connection's state across commands.
pub struct Conn {
    /// The tenant of the port it came in on.
    pub port_tenant: Option<Arc<str>>,
    pub upstreams: Upstreams,
    /// Unsent reply bytes past which the connection is closed.
    pub output_bound: usize,
    /// The socket replies go to, and how much of the reply buffer it has taken.
    pub stream: Option<Arc<tokio::net::TcpStream>>,
    pub sent: usize,
}

impl Conn {
    /// Writes what the socket takes now of `out` (never waits); false on a socket error.
    pub fn write_now(&mut self, out: &[u8]) -> bool {
        let Some(s) = &self.stream else {
            return true;
        };
        while self.sent < out.len() {
            match s.try_write(&out[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
        }
        true
    }

    /// Whether the unsent replies are past the bound even after writing what the socket
    /// takes: then the connection is closed.
    pub fn over_bound(&mut self, out: &[u8]) -> bool {
        out.len() - self.sent > self.output_bound
            && (!self.write_now(out) || out.len() - self.sent > self.output_bound)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Close after sending what is written (`quit`).
    Close,
    /// Close at once: the reply would pass the output bound.
    Overflow,
}

type R<T> = Result<T, String>;

/// A key's route, or the error line when it has none.
fn route(svc: &Service, conn: &Conn, key: &[u8], op: Op) -> Result<Routed, &'static str> {
    svc.route(conn.port_tenant.as_ref(), key, op)
        .ok_or(reply::NO_TENANT)
}

/// Waits until the route's qos stage lets a request of `bytes` through the front end's IO
/// scheduler; the slot, held while the request runs (none without a qos stage). The wait is on
/// a blocking thread: the scheduler's gate blocks, the connection's task must not.
async fn limit(r: &Routed, bytes: usize) -> Option<Permit> {
    let q = r.route.limit.clone()?;
    let slot = tokio::task::spawn_blocking(move || q.admit(bytes as u64))
        .await
        .ok()?
        .ok()?;
    if slot.limited() {
        r.counters.rate_limited.fetch_add(1, Relaxed);
    }
    Some(slot)
}

fn store_of(r: &Routed) -> Option<&Arc<Store>> {
    match &r.route.target {
        Target::Local(s) => Some(s),
        Target::Remote(_) => None,
    }
}

/// Sends `cmd` to the route's remote front end; the reply, or a `SERVER_ERROR` line.
async fn forward(conn: &mut Conn, r: &Routed, cmd: &Command, kind: ReplyKind) -> Vec<u8> {
    let Target::Remote(addr) = &r.route.target else {
        unreachable!("forward is called for remote routes")
    };
    r.counters.forwarded.fetch_add(1, Relaxed);
    match conn.upstreams.exchange(addr, &encode(cmd), kind).await {
        Ok(v) => v,
        Err(e) => {
            let mut v = Vec::new();
            reply::server_error(&mut v, &e);
            v
        }
    }
}

fn server_error(out: &mut Vec<u8>, e: String) {
    reply::server_error(out, &e);
}

pub async fn execute(svc: &Service, conn: &mut Conn, cmd: Command, out: &mut Vec<u8>) -> Flow {
    match cmd {
        Command::Get { keys, cas, touch } => {
            for key in keys {
                let r = match route(svc, conn, &key, Op::Read) {
                    Ok(r) => r,
                    Err(e) => {
                        out.extend_from_slice(e.as_bytes());
                        return Flow::Continue;
                    }
                };
                if let Err(e) = get_one(svc, conn, &r, key, cas, touch, out).await {
                    server_error(out, e);
                    return Flow::Continue;
                }
                if conn.over_bound(out) {
                    return Flow::Overflow;
                }
            }
            out.extend_from_slice(reply::END.as_bytes());
        }
        Command::Store { .. }
        | Command::Delete { .. }
        | Command::Touch { .. }
        | Command::Arith { .. } => {
            let noreply = cmd.noreply();
            let mut line = Vec::new();
            if let Err(e) = keyed(svc, conn, &cmd, &mut line).await {
                server_error(&mut line, e);
            }
            // noreply silences success and failure lines alike, not errors (as memcached).
            let error = line.starts_with(b"CLIENT_ERROR")
                || line.starts_with(b"SERVER_ERROR")
                || line.starts_with(b"ERROR");
            if !noreply || error {
                out.extend_from_slice(&line);
            }
        }
        Command::FlushAll { delay, noreply } => {
            for s in svc.stores(conn.port_tenant.as_deref()) {
                s.flush_all(delay);
            }
            if !noreply {
                out.extend_from_slice(reply::OK.as_bytes());
            }
        }
        Command::Stats { arg } => {
            let now = (svc.config().clock)();
            match arg.as_deref() {
                None => svc.stats().write_general(
                    out,
                    now.saturating_sub(svc.started),
                    now,
                    svc.config().default_dram_bytes,
                ),
                Some("lachesis") => svc.stats().write_lachesis(out),
                Some(_) => out.extend_from_slice(reply::ERROR.as_bytes()),
            }
        }
        Command::Verbosity { noreply, .. } => {
            if !noreply {
                out.extend_from_slice(reply::OK.as_bytes());
            }
        }
        Command::Version => out.extend_from_slice(reply::VERSION.as_bytes()),
        Command::Quit => return Flow::Close,
        Command::Meta(m) => {
            if let Err(e) = meta(svc, conn, m, out).await {
                server_error(out, e);
            }
        }
    }
    Flow::Continue
}

async fn get_one(
    svc: &Service,
    conn: &mut Conn,
    r: &Routed,
    key: Vec<u8>,
    cas: bool,
    touch: Option<i64>,
    out: &mut Vec<u8>,
) -> R<()> {
    r.counters.gets.fetch_add(1, Relaxed);
    let Some(store) = store_of(r) else {
        let one = Command::Get {
            keys: vec![key],
            cas,
            touch,
        };
        let v = forward(conn, r, &one, ReplyKind::Values).await;
        // The remote's VALUE block without its END (ours ends the whole reply).
        let body = v.strip_suffix(reply::END.as_bytes()).unwrap_or(&v);
        if !body.is_empty() && body.starts_with(b"VALUE") {
            r.counters.hits.fetch_add(1, Relaxed);
        }
        out.extend_from_slice(body);
        return Ok(());
    };
    let _slot = limit(r, key.len()).await;
    let item = match touch {
        Some(t) => store.get_and_touch(&key, t)?,
        None => store.get(&key)?,
    };
    let bytes = item
        .as_ref()
        .map_or(0, |i| (key.len() + i.data.len()) as u64);
    svc.observe(&r.tenant, &key, bytes, KvOp::Get, item.is_some());
    if let Some(i) = item {
        r.counters.hits.fetch_add(1, Relaxed);
        reply::value(out, &key, i.flags, &i.data, cas.then_some(i.cas));
    }
    Ok(())
}

/// The single-key commands other than get; `line` gets the reply.
async fn keyed(svc: &Service, conn: &mut Conn, cmd: &Command, line: &mut Vec<u8>) -> R<()> {
    let (key, op) = match cmd {
        Command::Store { key, .. } | Command::Touch { key, .. } | Command::Arith { key, .. } => {
            (key, Op::Write)
        }
        Command::Delete { key, .. } => (key, Op::Delete),
        _ => unreachable!("keyed commands only"),
    };
    let r = match route(svc, conn, key, op) {
        Ok(r) => r,
        Err(e) => {
            line.extend_from_slice(e.as_bytes());
            return Ok(());
        }
    };
    let Some(store) = store_of(&r).cloned() else {
        // The remote always replies; noreply is applied here.
        let mut c = cmd.clone();
        match &mut c {
            Command::Store { noreply, .. }
            | Command::Delete { noreply, .. }
            | Command::Touch { noreply, .. }
            | Command::Arith { noreply, .. } => *noreply = false,
            _ => {}
        }
        line.extend_from_slice(&forward(conn, &r, &c, ReplyKind::Line).await);
        return Ok(());
    };
    let text = |s: &'static str| s.as_bytes();
    match cmd {
        Command::Store {
            mode,
            key,
            flags,
            exptime,
            data,
            ..
        } => {
            let _slot = limit(&r, key.len() + data.len()).await;
            r.counters.sets.fetch_add(1, Relaxed);
            let bytes = (key.len() + data.len()) as u64;
            let (res, _) = store.store(*mode, key, *flags, *exptime, data.clone())?;
            svc.observe(&r.tenant, key, bytes, KvOp::Set, false);
            line.extend_from_slice(text(match res {
                Stored::Stored => reply::STORED,
                Stored::NotStored => reply::NOT_STORED,
                Stored::Exists => reply::EXISTS,
                Stored::NotFound => reply::NOT_FOUND,
                Stored::TooLarge => reply::OUT_OF_MEMORY,
            }));
        }
        Command::Delete { key, .. } => {
            let _slot = limit(&r, key.len()).await;
            r.counters.deletes.fetch_add(1, Relaxed);
            let res = store.delete(key, None)?;
            svc.observe(
                &r.tenant,
                key,
                key.len() as u64,
                KvOp::Delete,
                res == Deleted::Deleted,
            );
            line.extend_from_slice(text(if res == Deleted::Deleted {
                reply::DELETED
            } else {
                reply::NOT_FOUND
            }));
        }
        Command::Touch { key, exptime, .. } => {
            let _slot = limit(&r, key.len()).await;
            line.extend_from_slice(text(if store.touch(key, *exptime)? {
                reply::TOUCHED
            } else {
                reply::NOT_FOUND
            }));
        }
        Command::Arith {
            incr, key, delta, ..
        } => {
            let _slot = limit(&r, key.len()).await;
            match store.arith(key, *incr, *delta)?.0 {
                Arith::NotFound => line.extend_from_slice(text(reply::NOT_FOUND)),
                Arith::NonNumeric => line.extend_from_slice(text(reply::NON_NUMERIC)),
                Arith::Value(v) => line.extend_from_slice(format!("{v}\r\n").as_bytes()),
            }
        }
        _ => unreachable!("keyed commands only"),
    }
    Ok(())
}

/// The return flags a meta reply echoes, in the order asked.
fn ret_flags(m: &Meta, item: Option<&Item>, ttl: i64, cas: u64) -> Vec<u8> {
    let mut v = Vec::new();
    for f in &m.flags {
        let s = match (f.flag, item) {
            (b'c', _) => format!(" c{cas}"),
            (b'f', Some(i)) => format!(" f{}", i.flags),
            (b't', Some(_)) => format!(" t{ttl}"),
            (b's', Some(i)) => format!(" s{}", i.data.len()),
            (b'k', _) => {
                v.extend_from_slice(b" k");
                v.extend_from_slice(&m.key);
                continue;
            }
            (b'O', _) => {
                v.extend_from_slice(b" O");
                v.extend_from_slice(&f.token);
                continue;
            }
            _ => continue,
        };
        v.extend_from_slice(s.as_bytes());
    }
    v
}

fn meta_line(out: &mut Vec<u8>, code: &str, flags: &[u8]) {
    out.extend_from_slice(code.as_bytes());
    out.extend_from_slice(flags);
    out.extend_from_slice(b"\r\n");
}

async fn meta(svc: &Service, conn: &mut Conn, m: Meta, out: &mut Vec<u8>) -> R<()> {
    let quiet = m.has(b'q');
    let op = match m.kind {
        MetaKind::Noop => {
            out.extend_from_slice(b"MN\r\n");
            return Ok(());
        }
        MetaKind::Get => Op::Read,
        MetaKind::Set => Op::Write,
        MetaKind::Delete => Op::Delete,
    };
    let r = match route(svc, conn, &m.key, op) {
        Ok(r) => r,
        Err(e) => {
            out.extend_from_slice(e.as_bytes());
            return Ok(());
        }
    };
    let Some(store) = store_of(&r).cloned() else {
        // Forwarded without q (so a reply always comes); q is applied here.
        let mut c = m.clone();
        c.flags.retain(|f| f.flag != b'q');
        let v = forward(conn, &r, &Command::Meta(c), ReplyKind::Meta).await;
        let silent = quiet
            && match m.kind {
                MetaKind::Get => v.starts_with(b"EN"),
                _ => v.starts_with(b"HD"),
            };
        if !silent {
            out.extend_from_slice(&v);
        }
        return Ok(());
    };
    let bad = |out: &mut Vec<u8>, e: &'static str| -> R<()> {
        out.extend_from_slice(e.as_bytes());
        Ok(())
    };
    match m.kind {
        MetaKind::Get => {
            let touch = match m.number::<i64>(b'T') {
                Ok(t) => t,
                Err(e) => return bad(out, e),
            };
            r.counters.gets.fetch_add(1, Relaxed);
            let _slot = limit(&r, m.key.len()).await;
            let item = match touch {
                Some(t) => store.get_and_touch(&m.key, t)?,
                None => store.get(&m.key)?,
            };
            let bytes = item
                .as_ref()
                .map_or(0, |i| (m.key.len() + i.data.len()) as u64);
            svc.observe(&r.tenant, &m.key, bytes, KvOp::Get, item.is_some());
            let Some(i) = item else {
                if !quiet {
                    out.extend_from_slice(b"EN\r\n");
                }
                return Ok(());
            };
            r.counters.hits.fetch_add(1, Relaxed);
            let flags = ret_flags(&m, Some(&i), store.ttl(&i), i.cas);
            if m.has(b'v') {
                meta_line(out, &format!("VA {}", i.data.len()), &flags);
                out.extend_from_slice(&i.data);
                out.extend_from_slice(b"\r\n");
            } else {
                meta_line(out, "HD", &flags);
            }
        }
        MetaKind::Set => {
            let (ttl, flags, compare) = match (
                m.number::<i64>(b'T'),
                m.number::<u32>(b'F'),
                m.number::<u64>(b'C'),
            ) {
                (Ok(t), Ok(f), Ok(c)) => (t.unwrap_or(0), f.unwrap_or(0), c),
                _ => return bad(out, reply::BAD_TOKEN),
            };
            let mode = match (m.token(b'M'), compare) {
                (None | Some(b"S" | b"s"), Some(c)) => StoreMode::Cas(c),
                (None | Some(b"S" | b"s"), None) => StoreMode::Set,
                (Some(b"E" | b"e"), _) => StoreMode::Add,
                (Some(b"A" | b"a"), _) => StoreMode::Append,
                (Some(b"P" | b"p"), _) => StoreMode::Prepend,
                (Some(b"R" | b"r"), _) => StoreMode::Replace,
                _ => return bad(out, reply::BAD_TOKEN),
            };
            let _slot = limit(&r, m.key.len() + m.data.len()).await;
            r.counters.sets.fetch_add(1, Relaxed);
            let bytes = (m.key.len() + m.data.len()) as u64;
            let (res, cas) = store.store(mode, &m.key, flags, ttl, m.data.clone())?;
            svc.observe(&r.tenant, &m.key, bytes, KvOp::Set, false);
            let code = match res {
                Stored::Stored if quiet => return Ok(()),
                Stored::Stored => "HD",
                Stored::NotStored => "NS",
                Stored::Exists => "EX",
                Stored::NotFound => "NF",
                Stored::TooLarge => return bad(out, reply::OUT_OF_MEMORY),
            };
            meta_line(out, code, &ret_flags(&m, None, 0, cas));
        }
        MetaKind::Delete => {
            let compare = match m.number::<u64>(b'C') {
                Ok(c) => c,
                Err(e) => return bad(out, e),
            };
            let _slot = limit(&r, m.key.len()).await;
            r.counters.deletes.fetch_add(1, Relaxed);
            let res = store.delete(&m.key, compare)?;
            svc.observe(
                &r.tenant,
                &m.key,
                m.key.len() as u64,
                KvOp::Delete,
                res == Deleted::Deleted,
            );
            let code = match res {
                Deleted::Deleted if quiet => return Ok(()),
                Deleted::Deleted => "HD",
                Deleted::NotFound => "NF",
                Deleted::Exists => "EX",
            };
            let mut flags = Vec::new();
            for f in m.flags.iter().filter(|f| f.flag == b'O' || f.flag == b'k') {
                flags.push(b' ');
                flags.push(f.flag);
                flags.extend_from_slice(if f.flag == b'k' { &m.key } else { &f.token });
            }
            meta_line(out, code, &flags);
        }
        MetaKind::Noop => {}
    }
    Ok(())
}

/// A refused set of a too large value drops the key's old value (as memcached does).
pub fn unlink(svc: &Service, conn: &Conn, key: &[u8]) {
    if let Ok(r) = route(svc, conn, key, Op::Write) {
        if let Some(s) = store_of(&r) {
            let _ = s.delete(key, None);
        }
    }
}
