//! `lachesis-fs serve`: answers forwarded IO from a backing directory. Each connection has a
//! reader that decodes requests and a few workers that run them and reply as they finish (in
//! any order; the request id pairs them up). A write is acknowledged only after the store
//! made it durable (`write` then `sync`).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use crate::remote::frame::{Frame, Op};

/// Where forwarded IO lands. `write` need not be durable by itself: the server calls `sync`
/// before acknowledging.
pub trait Store: Send + Sync + 'static {
    fn read(&self, path: &str, off: u64, len: usize) -> io::Result<Vec<u8>>;
    fn write(&self, path: &str, off: u64, data: &[u8]) -> io::Result<()>;
    fn sync(&self, path: &str) -> io::Result<()>;
    fn truncate(&self, path: &str, size: u64) -> io::Result<()>;
    fn size(&self, path: &str) -> io::Result<u64>;
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// A read from a level 1 that demotes (`frame::READ_LEND`): the bytes and a lend token
    /// (0: not lent). A store without an exclusive server level just reads.
    fn read_lent(&self, path: &str, off: u64, len: usize) -> io::Result<(Vec<u8>, u64)> {
        self.read(path, off, len).map(|d| (d, 0))
    }
    /// A block level 1 evicted (`frame::Op::Demote`); whether the server level took it.
    fn demote(&self, _path: &str, _off: u64, _token: u64, _data: &[u8]) -> io::Result<bool> {
        Err(io::Error::from_raw_os_error(libc::EINVAL))
    }
}

/// Files under a root directory; request paths are relative to it and may not leave it.
pub struct DirStore {
    root: PathBuf,
    open: Mutex<HashMap<PathBuf, Arc<File>>>,
}

impl DirStore {
    pub fn new(root: &Path) -> io::Result<Self> {
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: not a directory", root.display()),
            ));
        }
        Ok(DirStore {
            root: root.to_path_buf(),
            open: Mutex::new(HashMap::new()),
        })
    }

    fn resolve(&self, path: &str) -> io::Result<PathBuf> {
        let rel = Path::new(path.trim_start_matches('/'));
        if rel.as_os_str().is_empty()
            || rel.components().any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(self.root.join(rel))
    }

    /// The open file at `path`; `None` if it does not exist and `create` is false (reads and
    /// stats must not leave empty files behind).
    fn open_file(&self, path: &str, create: bool) -> io::Result<Option<Arc<File>>> {
        let p = self.resolve(path)?;
        let mut m = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = m.get(&p) {
            return Ok(Some(f.clone()));
        }
        if !create && !p.exists() {
            return Ok(None);
        }
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        let f = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&p)?,
        );
        m.insert(p, f.clone());
        Ok(Some(f))
    }

    fn file(&self, path: &str) -> io::Result<Arc<File>> {
        Ok(self.open_file(path, true)?.expect("created"))
    }
}

impl Store for DirStore {
    fn read(&self, path: &str, off: u64, len: usize) -> io::Result<Vec<u8>> {
        // A copy never written reads as the hole it stands for.
        let Some(f) = self.open_file(path, false)? else {
            return Ok(vec![]);
        };
        let mut buf = vec![0u8; len];
        let n = lachesis_device::uring::files::read_full(&f, &mut buf, off)?;
        buf.truncate(n);
        Ok(buf)
    }
    fn write(&self, path: &str, off: u64, data: &[u8]) -> io::Result<()> {
        self.file(path)?.write_all_at(data, off)
    }
    fn sync(&self, path: &str) -> io::Result<()> {
        match self.open_file(path, false)? {
            Some(f) => f.sync_data(),
            None => Ok(()),
        }
    }
    fn truncate(&self, path: &str, size: u64) -> io::Result<()> {
        let Some(f) = self.open_file(path, size > 0)? else {
            return Ok(());
        };
        f.set_len(size)?;
        f.sync_data()
    }
    fn size(&self, path: &str) -> io::Result<u64> {
        match self.open_file(path, false)? {
            Some(f) => Ok(f.metadata()?.len()),
            None => Ok(0),
        }
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (src, dst) = (self.resolve(from)?, self.resolve(to)?);
        let mut m = self.open.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(&src);
        m.remove(&dst);
        if !src.exists() {
            return Ok(());
        }
        if let Some(d) = dst.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::rename(src, dst)
    }
}

/// Workers per connection: requests of one connection run in parallel up to this many.
const WORKERS: usize = 4;

/// How long a connecting peer has to complete the authentication handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Accepts connections until the listener fails; one thread per connection. With a key,
/// a peer must authenticate ([`super::auth`]) before any of its frames is read; one that
/// does not is logged and disconnected.
pub fn serve(
    listener: TcpListener,
    store: Arc<dyn Store>,
    key: Option<crate::remote::auth::Key>,
) -> io::Result<()> {
    serve_limited(listener, store, key, None)
}

/// [`serve`], every connection's requests admitted by one server-wide `limit`
/// ([`super::qos`]).
pub fn serve_limited(
    listener: TcpListener,
    store: Arc<dyn Store>,
    key: Option<crate::remote::auth::Key>,
    limit: Option<Arc<super::limit::RateLimit>>,
) -> io::Result<()> {
    for conn in listener.incoming() {
        let conn = conn?;
        let (store, key, limit) = (store.clone(), key.clone(), limit.clone());
        std::thread::spawn(move || {
            let peer = conn.peer_addr().ok();
            if let Some(key) = &key {
                let hs = conn
                    .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
                    .and_then(|_| crate::remote::auth::server(&mut &conn, key))
                    .and_then(|_| conn.set_read_timeout(None));
                if let Err(e) = hs {
                    tracing::warn!("refused unauthenticated peer {peer:?}: {e}");
                    let _ = conn.shutdown(std::net::Shutdown::Both);
                    return;
                }
            }
            if let Err(e) = handle(conn, store, limit) {
                tracing::warn!("connection from {peer:?}: {e}");
            }
        });
    }
    Ok(())
}

fn handle(
    conn: TcpStream,
    store: Arc<dyn Store>,
    limit: Option<Arc<super::limit::RateLimit>>,
) -> io::Result<()> {
    conn.set_nodelay(true)?;
    let out = Arc::new(Mutex::new(conn.try_clone()?));
    let (tx, rx) = mpsc::channel::<Frame>();
    let rx = Arc::new(Mutex::new(rx));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (rx, out, store, limit) = (rx.clone(), out.clone(), store.clone(), limit.clone());
            std::thread::spawn(move || loop {
                let req = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                    Ok(r) => r,
                    Err(_) => return,
                };
                super::limit::admit(limit.as_deref(), &req);
                test_delay::wait();
                let reply = answer(&*store, req).encode();
                let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                if io::Write::write_all(&mut *o, &reply).is_err() {
                    return;
                }
            })
        })
        .collect();
    let mut r = BufReader::new(conn);
    let res = loop {
        match Frame::read_from(&mut r) {
            Ok(f) => {
                if tx.send(f).is_err() {
                    break Ok(());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break Ok(()),
            // A corrupted frame cannot be trusted even for its id: drop the connection; the
            // client fails what was in flight and reconnects.
            Err(e) => break Err(e),
        }
    };
    drop(tx);
    for w in workers {
        let _ = w.join();
    }
    let _ = r.get_ref().shutdown(std::net::Shutdown::Both);
    res
}

/// A test and benchmark hook (`lachesis-fs serve --test-delay-file FILE`): while FILE holds a
/// number N, every request waits N microseconds before it is answered (an endpoint made slow
/// on demand, as by a competing load); absent or empty, none. The file is looked at again
/// at most every 50 ms, or at the next request after [`test_delay::reload`].
pub mod test_delay {
    use std::path::PathBuf;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    struct Hook {
        file: PathBuf,
        checked: Option<Instant>,
        delay: Duration,
    }

    static HOOK: Mutex<Option<Hook>> = Mutex::new(None);

    pub fn set_file(file: PathBuf) {
        *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = Some(Hook {
            file,
            checked: None,
            delay: Duration::ZERO,
        });
    }

    /// Makes the next request look at the file again, whenever it was last looked at (a
    /// test that just wrote the file need not wait out the 50 ms).
    pub fn reload() {
        if let Some(h) = HOOK.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            h.checked = None;
        }
    }

    pub(super) fn wait() {
        let delay = {
            let mut h = HOOK.lock().unwrap_or_else(|e| e.into_inner());
            let Some(h) = h.as_mut() else { return };
            if h.checked
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(50))
            {
                let us = std::fs::read_to_string(&h.file)
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                h.delay = Duration::from_micros(us);
                h.checked = Some(Instant::now());
            }
            h.delay
        };
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
    }
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Runs one request against the store.
pub fn answer(store: &dyn Store, req: Frame) -> Frame {
    let id = req.id;
    let mut token = 0;
    let res: io::Result<(u64, Vec<u8>)> = match req.op {
        Op::Read if req.len > crate::remote::frame::MAX_FRAME as u64 => {
            Err(io::Error::from_raw_os_error(libc::EINVAL))
        }
        Op::Read if req.status & crate::remote::frame::READ_LEND != 0 => store
            .read_lent(&req.path, req.offset, req.len as usize)
            .map(|(d, t)| {
                token = t;
                (d.len() as u64, d)
            }),
        Op::Read => store
            .read(&req.path, req.offset, req.len as usize)
            .map(|d| (d.len() as u64, d)),
        Op::Demote => store
            .demote(&req.path, req.offset, req.len, &req.data)
            .map(|taken| (u64::from(taken), vec![])),
        // Durable before acknowledged.
        Op::Write => store
            .write(&req.path, req.offset, &req.data)
            .and_then(|_| store.sync(&req.path))
            .map(|_| (req.data.len() as u64, vec![])),
        Op::Fsync => store.sync(&req.path).map(|_| (0, vec![])),
        Op::Truncate => store.truncate(&req.path, req.len).map(|_| (0, vec![])),
        Op::Getattr => store.size(&req.path).map(|s| (s, vec![])),
        Op::Rename => match std::str::from_utf8(&req.data) {
            Ok(to) => store.rename(&req.path, to).map(|_| (0, vec![])),
            Err(_) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        },
        Op::Reply => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    match res {
        Ok((len, data)) => Frame {
            offset: token,
            ..Frame::reply(id, 0, len, data)
        },
        Err(e) => Frame::reply(id, errno(&e), 0, vec![]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_store_refuses_paths_outside_its_root() {
        let d = tempfile::tempdir().unwrap();
        let s = DirStore::new(d.path()).unwrap();
        for p in ["/../etc/passwd", "a/../../b", "/", ""] {
            let r = answer(&s, Frame::request(Op::Getattr, p, 0, 0, vec![]));
            assert_eq!(r.status, libc::EINVAL, "{p:?}");
        }
        // Reads and stats of a missing file see an empty file and create nothing.
        let r = answer(&s, Frame::request(Op::Getattr, "/a/b", 0, 0, vec![]));
        assert_eq!((r.status, r.len), (0, 0));
        let r = answer(&s, Frame::request(Op::Read, "/a/b", 0, 10, vec![]));
        assert_eq!((r.status, r.data.len()), (0, 0));
        assert!(!d.path().join("a").exists());
        let r = answer(&s, Frame::request(Op::Write, "/a/b", 3, 0, b"xy".to_vec()));
        assert_eq!(r.status, 0);
        assert_eq!(std::fs::read(d.path().join("a/b")).unwrap(), b"\0\0\0xy");
        let r = answer(&s, Frame::request(Op::Getattr, "/a/b", 0, 0, vec![]));
        assert_eq!((r.status, r.len), (0, 5));
    }
}
