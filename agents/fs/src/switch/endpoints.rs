//! Where IO lands at the end of a route: the backing file, or copies of it under endpoint
//! directories (replicas, forwarding logs), opened once and kept.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::Arc;

use lachesis_device::uring::files::{read_full_as, write_all_as};

use super::{FileCtx, Switch};
use crate::route::{under, Endpoint, RemoteEndpoint, Route};
use crate::stage::{Backend, LentRead};

impl Switch {
    /// The latency numbers of every remote endpoint this switch forwards to, each that IO
    /// has reached probed once first (so an endpoint no IO goes to any more is still
    /// measured).
    pub fn endpoint_latency(&self) -> Vec<crate::remote::latency::EndpointLatency> {
        let mut out: Vec<_> = self
            .registry
            .clients()
            .into_iter()
            .map(|c| {
                // Only endpoints IO has reached: a named but never used one (a server that
                // is not up yet) is not dialled from the telemetry thread.
                if c.latency().requests == 0 {
                    return c.latency();
                }
                if let Err(e) = c.probe() {
                    tracing::debug!("probing {}: {e}", c.addr());
                }
                c.latency()
            })
            .collect();
        out.sort_by(|a, b| a.addr.cmp(&b.addr));
        out
    }

    pub(super) fn forget_endpoint_files(&self) {
        self.endpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The endpoint copy of `ctx`'s file under `dir`. A copy the switch creates belongs to
    /// the file's owner with the file's permission bits (the backing file was created with
    /// the writer's uid and gid, `fuse.rs`): the switch runs as root, and a copy made
    /// root-owned, or readable by all, would not be the writer's file any more. Directories it
    /// creates stay root's, so no writer can plant a symlink in the path the switch opens;
    /// the copy itself is opened with O_NOFOLLOW.
    fn endpoint_file(&self, dir: &Path, ctx: &FileCtx, direct: bool) -> io::Result<Arc<File>> {
        use std::os::unix::fs::OpenOptionsExt;
        let p = under(dir, &ctx.path);
        let mut m = self.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        let k = (p, direct);
        if let Some(f) = m.get(&k) {
            return Ok(f.clone());
        }
        let p = &k.0;
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let open = |flags, new: bool| {
            let mut o = OpenOptions::new();
            o.read(true)
                .write(true)
                .custom_flags(flags | libc::O_NOFOLLOW);
            if new {
                // Nobody else may read it before it is the owner's.
                o.create_new(true).mode(0o600);
            }
            o.open(p)
        };
        let open_or_create = |flags| match open(flags, true) {
            Ok(f) => Ok((f, true)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok((open(flags, false)?, false)),
            Err(e) => Err(e),
        };
        let (f, created) = if direct {
            open_or_create(libc::O_DIRECT).or_else(|e| {
                tracing::debug!(path = %p.display(), "endpoint refuses O_DIRECT ({e}); buffered IO");
                open_or_create(0)
            })?
        } else {
            open_or_create(0)?
        };
        if created {
            adopt_owner(&f, &ctx.backing)?;
        }
        let f = Arc::new(f);
        m.insert(k, f.clone());
        Ok(f)
    }
}

/// The end of a route: the backing file, or the endpoint replicas (local and remote).
pub(super) struct End<'a> {
    pub(super) sw: &'a Switch,
    pub(super) ctx: &'a FileCtx,
    pub(super) route: &'a Route,
    /// Which endpoint serves reads (an index into `route.endpoints`).
    pub(super) read_from: usize,
}

impl End<'_> {
    /// Whether the application opened the file with O_DIRECT (then its backing file has
    /// it, see `fuse.rs`): endpoint copies are written and read with O_DIRECT too.
    fn direct(&self) -> bool {
        self.ctx.direct()
    }

    fn replica_files(&self) -> io::Result<Vec<Arc<File>>> {
        self.route
            .replicas
            .iter()
            .map(|d| self.sw.endpoint_file(d, self.ctx, self.direct()))
            .collect()
    }

    /// Runs `remote` on every remote endpoint and `local` on the local replicas, all at
    /// once (the remotes on threads of their own, the locals in one io_uring submission);
    /// succeeds only if every replica did.
    fn on_all(
        &self,
        remote: impl Fn(&RemoteEndpoint) -> io::Result<()> + Sync,
        local: impl FnOnce(&[&File]) -> io::Result<()>,
    ) -> io::Result<()> {
        let files = self.replica_files()?;
        let refs: Vec<&File> = files.iter().map(|f| &**f).collect();
        let remotes = &self.route.remotes;
        std::thread::scope(|sc| {
            let remote = &remote;
            let others: Vec<_> = remotes
                .iter()
                .skip(usize::from(refs.is_empty()))
                .map(|r| sc.spawn(move || remote(r)))
                .collect();
            // Without local replicas, the first remote runs on this thread.
            let mut res = if refs.is_empty() {
                remotes.first().map_or(Ok(()), |r| remote(r))
            } else {
                local(&refs)
            };
            for t in others {
                let r = t
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("replica thread panicked")));
                res = res.and(r);
            }
            res
        })
    }
}

/// Gives `copy` the owner and permission bits of `original`.
fn adopt_owner(copy: &File, original: &File) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = original.metadata()?;
    std::os::unix::fs::fchown(copy, Some(m.uid()), Some(m.gid()))?;
    copy.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o777))
}

impl Backend for End<'_> {
    fn read_at(&self, _file: u64, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let n = match self.route.endpoints.get(self.read_from) {
            None => return read_full_as(&self.ctx.backing, self.direct(), buf, off),
            Some(Endpoint::Remote(r)) => r.client.read(&r.path_of(&self.ctx.path), buf, off)?,
            Some(Endpoint::Local(d)) => read_full_as(
                &*self.sw.endpoint_file(d, self.ctx, self.direct())?,
                self.direct(),
                buf,
                off,
            )?,
        };
        // An endpoint copy is sparse: past its end it reads as the hole it stands for. The
        // switch clips reads at the file's size.
        buf[n..].fill(0);
        Ok(buf.len())
    }

    fn read_lent(&self, file: u64, buf: &mut [u8], off: u64) -> LentRead {
        let Some(Endpoint::Remote(r)) = self.route.endpoints.get(self.read_from) else {
            return self.read_at(file, buf, off).map(|n| (n, None));
        };
        let path = r.path_of(&self.ctx.path);
        let (n, token) = r.client.read_lent(&path, buf, off)?;
        buf[n..].fill(0);
        let lease = (token != 0).then(|| crate::remote::demote::Lease {
            token,
            to: crate::remote::demote::DemoteTo::new(r.client.demote_queue(), &path),
        });
        Ok((buf.len(), lease))
    }

    fn write_at(&self, _file: u64, data: &[u8], off: u64) -> io::Result<()> {
        if self.route.endpoints.is_empty() {
            return write_all_as(&[&self.ctx.backing], self.direct(), data, off);
        }
        // Every replica at once; acknowledged when all have it (a remote acknowledges once
        // the bytes are durable there).
        self.on_all(
            |r| r.client.write(&r.path_of(&self.ctx.path), data, off),
            |files| write_all_as(files, self.direct(), data, off),
        )
    }

    fn sync(&self, _file: u64) -> io::Result<()> {
        if self.route.endpoints.is_empty() {
            return lachesis_device::uring::files::sync_data(&[&self.ctx.backing]);
        }
        self.on_all(
            |r| r.client.fsync(&r.path_of(&self.ctx.path)),
            lachesis_device::uring::files::sync_data,
        )
    }
}
