//! A mounted connection: the INIT handshake, then the transports' threads.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::abi::{self, init, op, InHeader};
use crate::fs::{Connection, KernelConfig};
use crate::{devloop, mount, ring, Handler};

/// Which path requests take once the connection is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `threads` threads read `/dev/fuse`.
    Dev { threads: usize },
    /// A queue per CPU served by `threads` threads with `depth` entries each; `/dev/fuse`
    /// stays open for forgets and interrupts, and for everything if the kernel refuses the
    /// queues. A file system whose answers block (disk IO, fsync) wants several threads of
    /// depth 1, so a request waits only when every thread of its CPU is busy; one that never
    /// blocks, one thread with a deeper queue.
    Uring { depth: u16, threads: usize },
}

#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub transport: Transport,
    /// Largest write the kernel may send, and so the largest read (max_pages).
    pub max_write: u32,
    /// The file system's name in the mount table (source `NAME`, type `fuse.NAME`).
    pub name: String,
    /// The kernel checks permissions against the attributes (`default_permissions`).
    pub default_permissions: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            transport: Transport::Dev { threads: 4 },
            max_write: 1 << 20,
            name: "fusering".into(),
            default_permissions: false,
        }
    }
}

/// What each path carried, and why the queues are not in use if they are not.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests answered through `/dev/fuse`.
    pub dev_requests: AtomicU64,
    /// Requests answered through the io_uring queues.
    pub ring_requests: AtomicU64,
    /// Queue entries the kernel accepted.
    pub ring_entries: AtomicU64,
    /// The first error a queue met (registering or committing), if any.
    pub ring_error: Mutex<Option<String>>,
    /// Whether the kernel offered FUSE over io_uring at INIT.
    pub uring_offered: std::sync::atomic::AtomicBool,
}

impl Counters {
    pub fn ring_error(&self) -> Option<String> {
        self.ring_error.lock().expect("counter lock").clone()
    }
    pub(crate) fn note_ring_error(&self, e: String) {
        self.ring_error
            .lock()
            .expect("counter lock")
            .get_or_insert(e);
    }
}

/// A mounted connection; unmounted when dropped.
pub struct Session {
    mountpoint: PathBuf,
    counters: Arc<Counters>,
    threads: Vec<std::thread::JoinHandle<()>>,
    mounted: bool,
    uring: bool,
}

impl Session {
    /// Mounts at `mountpoint`, answers INIT, and starts the transport's threads.
    pub fn start(
        mountpoint: &Path,
        cfg: SessionConfig,
        handler: Arc<dyn Handler>,
    ) -> io::Result<Self> {
        let dev = Arc::new(mount::mount(
            mountpoint,
            &cfg.name,
            cfg.default_permissions,
        )?);
        let counters = Arc::new(Counters::default());
        let mut session = Self {
            mountpoint: mountpoint.to_path_buf(),
            counters: counters.clone(),
            threads: Vec::new(),
            mounted: true,
            uring: false,
        };
        let want_uring = matches!(cfg.transport, Transport::Uring { .. });
        let conn = Connection {
            dev: Arc::downgrade(&dev),
        };
        let (offered, max_write) = handshake(&dev, &cfg, want_uring, &*handler, conn)?;
        counters.uring_offered.store(offered, Ordering::Relaxed);
        session.uring = offered;
        let bufsize = abi::IN_HEADER + 4096 + max_write as usize;
        let readers = match cfg.transport {
            Transport::Dev { threads } => threads.max(1),
            Transport::Uring { .. } => 1,
        };
        for i in 0..readers {
            let (dev, handler, counters) = (dev.clone(), handler.clone(), counters.clone());
            session.threads.push(
                std::thread::Builder::new()
                    .name(format!("fuse-dev-{i}"))
                    .spawn(move || devloop::run(&dev, &*handler, &counters, bufsize))?,
            );
        }
        if let (Transport::Uring { depth, threads }, true) = (cfg.transport, offered) {
            let queues = possible_cpus()?;
            let (tx, rx) = std::sync::mpsc::channel();
            let workers = queues * threads.max(1);
            for w in 0..workers {
                let qid = w % queues;
                let (dev, handler, counters, tx) =
                    (dev.clone(), handler.clone(), counters.clone(), tx.clone());
                // The reply buffer must hold the largest read: max_pages of 4 KiB.
                let payload = max_write as usize;
                session.threads.push(
                    std::thread::Builder::new()
                        .name(format!("fuse-ring-{qid}"))
                        .spawn(move || {
                            let q = ring::Queue {
                                qid: qid as u16,
                                depth: depth.max(1),
                                payload,
                            };
                            if let Err(e) = q.run(&dev, &*handler, &counters, tx) {
                                counters.note_ring_error(format!("queue {qid}: {e}"));
                            }
                        })?,
                );
            }
            drop(tx);
            // Returns once every queue is registered (requests go to io_uring from here on)
            // or one was refused (they keep going to /dev/fuse).
            for _ in 0..workers {
                if let Ok(Err(e)) | Err(e) = rx.recv().map_err(io::Error::other) {
                    counters.note_ring_error(format!("registering: {e}"));
                    break;
                }
            }
        } else if want_uring {
            counters.note_ring_error(
                "the kernel did not offer FUSE over io_uring at INIT \
                 (/sys/module/fuse/parameters/enable_uring is N, or the kernel predates 6.14)"
                    .into(),
            );
        }
        Ok(session)
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// `uring` when the kernel took the connection's io_uring queues, else `dev`.
    pub fn transport_name(&self) -> &'static str {
        if self.uring && self.counters.ring_error().is_none() {
            "uring"
        } else {
            "dev"
        }
    }

    /// Unmounts and waits for the transport's threads to end (they end when the kernel
    /// closes the connection: at once unless files are still open on a lazy unmount).
    pub fn umount_and_join(mut self) -> io::Result<()> {
        self.mounted = false;
        mount::unmount(&self.mountpoint)?;
        for t in std::mem::take(&mut self.threads) {
            t.join()
                .map_err(|_| io::Error::other("a FUSE thread panicked"))?;
        }
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.mounted {
            return;
        }
        if let Err(e) = mount::unmount(&self.mountpoint) {
            eprintln!("fusering: unmounting {}: {e}", self.mountpoint.display());
        }
    }
}

/// Reads the kernel's INIT, lets the handler choose, and answers it; returns whether io_uring
/// was offered and taken, and the largest write agreed.
fn handshake(
    dev: &File,
    cfg: &SessionConfig,
    want_uring: bool,
    handler: &dyn Handler,
    conn: Connection,
) -> io::Result<(bool, u32)> {
    let mut buf = vec![0u8; abi::IN_HEADER + 4096 + cfg.max_write as usize];
    let n = (&*dev).read(&mut buf)?;
    let h = InHeader::decode(&buf[..n])
        .filter(|h| h.opcode == op::INIT)
        .ok_or_else(|| io::Error::other("the first request was not INIT"))?;
    let arg = &buf[abi::IN_HEADER..n];
    let (major, minor, readahead) = (
        abi::u32_at(arg, 0),
        abi::u32_at(arg, 4),
        abi::u32_at(arg, 8),
    );
    let mut kflags = abi::u32_at(arg, 12) as u64;
    if kflags & init::INIT_EXT != 0 {
        kflags |= (abi::u32_at(arg, 16) as u64) << 32;
    }
    if major != 7 || minor < 23 {
        return Err(io::Error::other(format!(
            "kernel FUSE ABI {major}.{minor}: 7.23 or later needed"
        )));
    }
    let offered = kflags & init::OVER_IO_URING != 0;
    let base = init::ASYNC_READ | init::BIG_WRITES | init::MAX_PAGES | init::INIT_EXT;
    let mut kc = KernelConfig::new(kflags, base, cfg.max_write);
    handler.init(conn, &mut kc)?;
    let mut flags = kc.requested;
    if want_uring && offered {
        flags |= init::OVER_IO_URING;
    }
    flags &= kflags;
    let mut out = [0u8; abi::OUT_HEADER + abi::INIT_OUT];
    let len = out.len() as u32;
    abi::encode_out_header(&mut out, len, 0, h.unique);
    let b = &mut out[abi::OUT_HEADER..];
    abi::put_u32(b, 0, 7);
    abi::put_u32(b, 4, minor);
    abi::put_u32(b, 8, readahead);
    abi::put_u32(b, 12, flags as u32);
    abi::put_u16(b, 16, 16); // max_background
    abi::put_u16(b, 18, 12); // congestion_threshold
    abi::put_u32(b, 20, kc.max_write);
    abi::put_u32(b, 24, 1); // time_gran
    abi::put_u16(b, 28, (kc.max_write / 4096) as u16); // max_pages
    abi::put_u32(b, 32, (flags >> 32) as u32);
    abi::put_u32(b, 36, kc.max_stack_depth);
    (&*dev).write_all(&out)?;
    Ok((want_uring && offered, kc.max_write))
}

/// The kernel makes one queue per possible CPU (`/sys/devices/system/cpu/possible`, e.g.
/// `0-1` or `0-3,6`), and every one needs an entry before any request goes to io_uring.
fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(&s).ok_or_else(|| io::Error::other(format!("cpu list {s:?}")))
}

fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut max = None;
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let last = part.rsplit('-').next()?.parse::<usize>().ok()?;
        max = Some(max.map_or(last, |m: usize| m.max(last)));
    }
    max.map(|m| m + 1)
}

#[cfg(test)]
mod tests {
    use super::parse_cpu_list;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-3,6"), Some(7));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
