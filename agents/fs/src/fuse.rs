//! The FUSE front end: a namespace whose files live under a backing directory. Each open is
//! classified to a tenant; files no rule can touch are opened with kernel passthrough, the
//! others with direct IO so that every read and write reaches the [`Switch`].

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, DirEntryExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lachesis_fusering::{
    AccessFlags, BackingId, Connection, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType,
    Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, SessionConfig, TimeOrNow, Transport, WriteFlags,
};

use crate::classify::Classifier;
use crate::switch::{Change, FileCtx, Switch};

const TTL: Duration = Duration::from_secs(1);

/// How a handle the switch serves is opened: direct IO (the switch's stages are the cache,
/// not the page cache), and writes of one file in parallel (the kernel otherwise takes the
/// inode lock for each direct write; it still does for writes that extend the file). The
/// switch orders overlapping IO itself (per-block locks), so only writes that overlap wait.
const SWITCHED: FopenFlags =
    FopenFlags::FOPEN_DIRECT_IO.union(FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES);

/// As the kernel's default `vm.dirty_expire_centisecs` (30 s).
pub const DEFAULT_DIRTY_EXPIRE: Duration = Duration::from_secs(30);

enum Handle {
    Switched(FileCtx),
    /// The kernel does the IO on `file`; the id must live as long as the handle.
    Passthrough {
        file: File,
        _id: Arc<BackingId>,
    },
}

/// Which way the kernel's FUSE requests reach the switch (`--fuse-transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FuseTransport {
    /// io_uring when the kernel has it switched on, else `/dev/fuse`.
    Auto,
    /// FUSE over io_uring (Linux 6.14+, `enable_uring` on); refused if the kernel has it off.
    Uring,
    /// Worker threads reading `/dev/fuse`.
    Dev,
}

/// The module parameter that lets FUSE connections move to io_uring.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

impl FuseTransport {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "uring" => Ok(Self::Uring),
            "dev" => Ok(Self::Dev),
            _ => Err(format!("{s:?}: one of auto, uring, dev")),
        }
    }

    /// The transport for `threads` request threads: over io_uring, as many threads per CPU
    /// queue as make `threads` in all, one request each (the switch's answers block on IO,
    /// so a request should wait only when every thread of its CPU is busy).
    pub fn resolve(self, threads: usize) -> Result<Transport, String> {
        let on = std::fs::read_to_string(ENABLE_URING).is_ok_and(|v| v.trim() == "Y");
        let uring = match self {
            Self::Dev => false,
            Self::Auto => on,
            Self::Uring if on => true,
            Self::Uring => {
                return Err(format!(
                    "uring: the kernel has FUSE over io_uring off or lacks it ({ENABLE_URING} is \
                     not Y; as root: echo Y > {ENABLE_URING})"
                ))
            }
        };
        let threads = threads.max(1);
        Ok(if uring {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            Transport::Uring {
                depth: 1,
                threads: threads.div_ceil(cpus),
            }
        } else {
            Transport::Dev { threads }
        })
    }
}

/// After the mount: `uring` asked for and refused by the kernel is an error (the mount is
/// dropped, so unmounted); refused under `auto` it is logged, and `/dev/fuse` serves.
pub fn check_transport(
    wanted: FuseTransport,
    session: &lachesis_fusering::Session,
) -> Result<(), String> {
    let Some(e) = session.counters().ring_error() else {
        return Ok(());
    };
    if wanted == FuseTransport::Uring {
        return Err(format!("the kernel refused FUSE over io_uring: {e}"));
    }
    tracing::warn!("FUSE over io_uring refused ({e}); requests go through /dev/fuse");
    Ok(())
}

/// The FUSE session settings every Lachesis mount uses (standalone and in the agent): the
/// kernel checks permissions (`default_permissions`), every user may use the mount, 1 MiB
/// writes, and `transport` (see [`FuseTransport::resolve`]).
pub fn mount_config(transport: Transport) -> SessionConfig {
    SessionConfig {
        transport,
        max_write: 1 << 20,
        name: "lachesis".into(),
        default_permissions: true,
    }
}

pub struct SwitchFs {
    root: PathBuf,
    root_ino: u64,
    switch: Arc<Switch>,
    classifier: Classifier,
    passthrough: bool,
    /// A name at the root of the backing directory that the namespace does not show (the
    /// state directory, when it lives there).
    hidden: Option<String>,
    /// The names each inode was seen under (hard links give several), the newest first.
    inodes: RwLock<HashMap<u64, Vec<String>>>,
    /// Shared with the write-back flusher thread (which holds it weakly).
    handles: Arc<RwLock<HashMap<u64, Arc<Handle>>>>,
    /// Write-back data older than this reaches the rest of its route without a sync.
    dirty_expire: Duration,
    next_fh: AtomicU64,
    backing_ids: Mutex<HashMap<u64, Weak<BackingId>>>,
    /// Whether the kernel accepted passthrough at init.
    passthrough_on: std::sync::atomic::AtomicBool,
    /// Whether a refused O_DIRECT open was logged already.
    direct_refused: std::sync::atomic::AtomicBool,
}

fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

impl SwitchFs {
    pub fn new(
        root: &Path,
        switch: Arc<Switch>,
        classifier: Classifier,
        passthrough: bool,
        hidden: Option<String>,
    ) -> io::Result<Self> {
        let root_ino = std::fs::metadata(root)?.ino();
        switch.set_backing_root(root);
        let mut inodes = HashMap::new();
        inodes.insert(1, vec!["/".to_string()]);
        Ok(SwitchFs {
            root: root.to_path_buf(),
            root_ino,
            switch,
            classifier,
            passthrough,
            hidden,
            inodes: RwLock::new(inodes),
            handles: Default::default(),
            dirty_expire: DEFAULT_DIRTY_EXPIRE,
            next_fh: AtomicU64::new(1),
            backing_ids: Mutex::new(HashMap::new()),
            passthrough_on: Default::default(),
            direct_refused: Default::default(),
        })
    }

    /// How long write-back data may stay in a stage before the background flusher writes it
    /// on (default [`DEFAULT_DIRTY_EXPIRE`]).
    pub fn with_dirty_expire(mut self, age: Duration) -> Self {
        self.dirty_expire = age;
        self
    }

    /// The background flusher: every quarter of the expiry (10 ms to 1 s), each open
    /// switched file's expired write-back data is written on. Ends when the file system is
    /// dropped (unmount).
    fn spawn_flusher(&self) {
        let handles = Arc::downgrade(&self.handles);
        let switch = self.switch.clone();
        let age = self.dirty_expire;
        let tick = (age / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let spawned = std::thread::Builder::new()
            .name("lachesis-fs-flusher".into())
            .spawn(move || loop {
                std::thread::sleep(tick);
                let Some(h) = handles.upgrade() else { return };
                let open: Vec<Arc<Handle>> = h
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .cloned()
                    .collect();
                drop(h);
                let mut seen = std::collections::HashSet::new();
                for h in open {
                    if let Handle::Switched(ctx) = &*h {
                        if seen.insert(ctx.id) {
                            if let Err(e) = switch.flush_expired(ctx, age) {
                                tracing::warn!(
                                    path = ctx.path,
                                    "background write-back failed: {e}"
                                );
                            }
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!("no background write-back flusher: {e}");
        }
    }

    fn ino(&self, st_ino: u64) -> u64 {
        if st_ino == self.root_ino {
            1
        } else {
            st_ino
        }
    }

    fn path_of(&self, ino: INodeNo) -> Result<String, Errno> {
        let names = self
            .inodes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ENOENT)?;
        if names.len() == 1 {
            return Ok(names[0].clone());
        }
        // Several names: hard links, or a name that went stale (a lookup racing the removal
        // of the name, whose inode number the backing file system gave a new node since).
        // The first that still names this inode.
        let live = names.iter().find(|n| {
            std::fs::symlink_metadata(self.real(n)).is_ok_and(|m| self.ino(m.ino()) == ino.0)
        });
        Ok(live.unwrap_or(&names[0]).clone())
    }

    /// Remembers `ns` as the newest name of `ino`.
    fn name_inode(&self, ino: u64, ns: &str) {
        let mut inodes = self.inodes.write().unwrap_or_else(|e| e.into_inner());
        let names = inodes.entry(ino).or_default();
        names.retain(|n| n != ns);
        names.insert(0, ns.to_string());
    }

    /// Forgets the name `ns` (removed, or now another inode's).
    fn unname(&self, ns: &str) {
        let mut inodes = self.inodes.write().unwrap_or_else(|e| e.into_inner());
        inodes.retain(|_, names| {
            names.retain(|n| n != ns);
            !names.is_empty()
        });
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        let p = self.path_of(parent)?;
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        if p == "/" && self.hidden.as_deref() == Some(name) {
            return Err(Errno::ENOENT);
        }
        Ok(if p == "/" {
            format!("/{name}")
        } else {
            format!("{p}/{name}")
        })
    }

    fn real(&self, ns: &str) -> crate::longpath::Real {
        crate::longpath::Real::new(crate::route::under(&self.root, ns))
    }

    fn attr(&self, m: &std::fs::Metadata) -> FileAttr {
        let t = |s: i64, ns: i64| {
            if s >= 0 {
                UNIX_EPOCH + Duration::new(s as u64, ns as u32)
            } else {
                UNIX_EPOCH
            }
        };
        let kind = FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile);
        FileAttr {
            ino: INodeNo(self.ino(m.ino())),
            size: m.size(),
            blocks: m.blocks(),
            atime: t(m.atime(), m.atime_nsec()),
            mtime: t(m.mtime(), m.mtime_nsec()),
            ctime: t(m.ctime(), m.ctime_nsec()),
            // The birth time tells apart two nodes the backing file system gave one inode
            // number in turn (see `generation`).
            crtime: m.created().unwrap_or(UNIX_EPOCH),
            kind,
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Stats `ns`, remembers its inode and returns its attributes.
    /// Makes `name` in `parent` with `make` (given its backing path), owned by the caller, and
    /// replies with its entry.
    fn make_node(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: Option<u32>,
        reply: ReplyEntry,
        make: impl FnOnce(&Path) -> io::Result<()>,
    ) {
        let r = (|| {
            let ns = self.child(parent, name)?;
            let real = self.real(&ns);
            make(&real).map_err(errno)?;
            self.own(req, &ns, &real, mode).map_err(errno)?;
            self.entry(&ns)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, generation(&a)),
            Err(e) => reply.error(e),
        }
    }

    /// Gives a node this front end made (as root) to the caller, as the kernel would have made
    /// it: the caller's uid, the caller's gid or a set-group-ID parent's (which the backing file
    /// system already gave), and exactly `mode` (the daemon's own umask must not apply; a
    /// directory under a set-group-ID parent keeps the bit it inherited). Symlinks: owner only.
    fn own(&self, req: &Request, ns: &str, real: &Path, mode: Option<u32>) -> io::Result<()> {
        let parent = std::path::Path::new(ns).parent().unwrap_or(Path::new("/"));
        let pm = std::fs::metadata(self.real(&parent.to_string_lossy()))?;
        let sgid_parent = pm.mode() & libc::S_ISGID != 0;
        let gid = (!sgid_parent).then_some(req.gid());
        std::os::unix::fs::lchown(real, Some(req.uid()), gid)?;
        if let Some(mode) = mode {
            use std::os::unix::fs::PermissionsExt;
            let m = std::fs::symlink_metadata(real)?;
            let mut bits = mode & 0o7777;
            if m.is_dir() && sgid_parent {
                bits |= libc::S_ISGID;
            }
            if !m.file_type().is_symlink() && m.mode() & 0o7777 != bits {
                std::fs::set_permissions(real, std::fs::Permissions::from_mode(bits))?;
            }
        }
        Ok(())
    }

    fn entry(&self, ns: &str) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(self.real(ns)).map_err(errno)?;
        let a = self.attr(&m);
        self.name_inode(a.ino.0, ns);
        Ok(a)
    }

    fn handle(&self, fh: FileHandle) -> Result<Arc<Handle>, Errno> {
        self.handles
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// An open handle's backing file of inode `ino`: a file unlinked while open has no name
    /// to stat, and the kernel may ask for its attributes without the handle.
    fn open_file_of(&self, ino: INodeNo) -> Option<File> {
        let handles = self.handles.read().unwrap_or_else(|e| e.into_inner());
        handles.values().find_map(|h| {
            let f: &File = match &**h {
                Handle::Switched(c) => &c.backing,
                Handle::Passthrough { file, .. } => file,
            };
            let m = f.metadata().ok()?;
            (self.ino(m.ino()) == ino.0).then(|| f.try_clone().ok())?
        })
    }

    fn add_handle(&self, h: Handle) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, Arc::new(h));
        FileHandle(fh)
    }

    /// Opens the backing file read-write when possible: stages may write back through any
    /// handle. The kernel has already checked the caller's permissions (default_permissions).
    fn open_backing(path: &Path, flags: i32) -> io::Result<File> {
        let custom = flags & (libc::O_SYNC | libc::O_DSYNC | libc::O_NOATIME);
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(custom)
            .open(path)
            .or_else(|_| {
                let mut o = OpenOptions::new();
                match flags & libc::O_ACCMODE {
                    libc::O_WRONLY => o.write(true),
                    libc::O_RDWR => o.read(true).write(true),
                    _ => o.read(true),
                };
                o.custom_flags(custom).open(path)
            })
    }

    /// Decides passthrough or switched for an open file and registers its handle.
    fn make_handle(
        &self,
        req: &Request,
        ns: String,
        file: File,
        open_flags: i32,
        backing_for: impl FnOnce(&File) -> io::Result<BackingId>,
    ) -> io::Result<(FileHandle, Option<Arc<BackingId>>)> {
        let meta = file.metadata()?;
        let st_ino = meta.ino();
        if self.passthrough_on.load(Ordering::Relaxed) && self.switch.can_passthrough(&ns) {
            // The kernel does this file's IO from now on: the stages hand over what they hold.
            self.switch.opening_passthrough(&ns, st_ino)?;
            let mut ids = self.backing_ids.lock().unwrap_or_else(|e| e.into_inner());
            let id = match ids.get(&st_ino).and_then(Weak::upgrade) {
                Some(id) => id,
                None => {
                    let id = Arc::new(backing_for(&file)?);
                    ids.insert(st_ino, Arc::downgrade(&id));
                    id
                }
            };
            drop(ids);
            let fh = self.add_handle(Handle::Passthrough {
                file,
                _id: id.clone(),
            });
            return Ok((fh, Some(id)));
        }
        let file = if open_flags & libc::O_DIRECT != 0 {
            self.direct_twin(file, &ns)
        } else {
            file
        };
        let tenant = self.classifier.classify(req.pid(), req.uid(), &ns);
        self.switch.opened(st_ino, &meta);
        let fh = self.add_handle(Handle::Switched(FileCtx::new(tenant, ns, st_ino, file)));
        Ok((fh, None))
    }

    /// The application opened with `O_DIRECT`: the switch does the backing IO with it too
    /// (see `lachesis_device::uring::files` for alignment), unless the backing file system refuses it, then the IO
    /// stays buffered and the reason is logged (once per mount, then at debug level).
    fn direct_twin(&self, file: File, ns: &str) -> File {
        let reopen = |write: bool| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .custom_flags(libc::O_DIRECT)
                .open(format!(
                    "/proc/self/fd/{}",
                    std::os::fd::AsRawFd::as_raw_fd(&file)
                ))
        };
        match reopen(true).or_else(|_| reopen(false)) {
            Ok(direct) => direct,
            Err(e) => {
                if !self.direct_refused.swap(true, Ordering::Relaxed) {
                    tracing::warn!(path = ns, "backing file system refuses O_DIRECT ({e}); this and later O_DIRECT opens do buffered IO");
                } else {
                    tracing::debug!(path = ns, "O_DIRECT refused ({e}); buffered IO");
                }
                file
            }
        }
    }
}

/// A write by someone else than root clears the set-user-ID bit, and the set-group-ID bit of a
/// group-executable file, as the kernel does for a writer without CAP_FSETID (the switch's
/// own writes are root's, and the kernel leaves direct-IO writes of FUSE files to it).
fn kill_suid(f: &File) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = f.metadata()?.mode();
    let mut kill = mode & libc::S_ISUID;
    if mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP {
        kill |= libc::S_ISGID;
    }
    if kill != 0 {
        f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777 & !kill))?;
    }
    Ok(())
}

/// The node's generation, from its birth time: the backing file system reuses a removed
/// node's inode number (our node id), and the kernel, which may still hold the old node under
/// that id, takes a reply with another generation as a new node instead of serving the old
/// one's type and attributes (pjdfstest in parallel saw ENOENT and ESTALE without it).
fn generation(a: &FileAttr) -> Generation {
    let d = a.crtime.duration_since(UNIX_EPOCH).unwrap_or_default();
    Generation(d.as_secs().wrapping_mul(1_000_000_007) ^ u64::from(d.subsec_nanos()))
}

fn cstr(p: &Path) -> Result<CString, Errno> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
    }
}

impl Filesystem for SwitchFs {
    fn init(&self, _conn: &Connection, config: &mut KernelConfig) -> io::Result<()> {
        if self.passthrough && config.capabilities().contains(InitFlags::FUSE_PASSTHROUGH) {
            let ok = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(2).is_ok();
            self.passthrough_on.store(ok, Ordering::Relaxed);
        }
        for f in [
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
        ] {
            if config.capabilities().contains(f) {
                let _ = config.add_capabilities(f);
            }
        }
        let _ = config.set_max_write(1 << 20);
        self.spawn_flusher();
        crate::switch::spawn_reclaimer(&self.switch);
        tracing::info!(
            passthrough = self.passthrough_on.load(Ordering::Relaxed),
            "lachesis-fs mounted"
        );
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name).and_then(|p| self.entry(&p)) {
            Ok(a) => reply.entry(&TTL, &a, generation(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let from_fh = fh.and_then(|fh| self.handle(fh).ok()).map(|h| match &*h {
            Handle::Switched(c) => c.backing.metadata(),
            Handle::Passthrough { file, .. } => file.metadata(),
        });
        let m = match from_fh {
            Some(m) => m,
            None => match self.path_of(ino) {
                Ok(p) => std::fs::symlink_metadata(self.real(&p))
                    .or_else(|e| self.open_file_of(ino).ok_or(e)?.metadata()),
                Err(e) => self.open_file_of(ino).ok_or(e).map_or_else(
                    |e| Err(io::Error::from_raw_os_error(e.code())),
                    |f| f.metadata(),
                ),
            },
        };
        match m {
            Ok(m) => reply.attr(&TTL, &self.attr(&m)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        let r = (|| -> Result<FileAttr, Errno> {
            let ns = self.path_of(ino)?;
            let real = self.real(&ns);
            if let Some(size) = size {
                // The open handle's file when there is one (it may have no name any more).
                let open = fh
                    .and_then(|fh| self.handle(fh).ok())
                    .and_then(|h| match &*h {
                        Handle::Switched(c) => c.backing.try_clone().ok(),
                        Handle::Passthrough { file, .. } => file.try_clone().ok(),
                    });
                let f = match open {
                    Some(f) => f,
                    None => OpenOptions::new().write(true).open(&real).map_err(errno)?,
                };
                let id = f.metadata().map_err(errno)?.ino();
                self.switch
                    .truncate(&ns, id, size, || match f.set_len(size) {
                        // Opened for reading only (or O_DIRECT refuses it): by name.
                        Err(e) if matches!(e.raw_os_error(), Some(libc::EBADF | libc::EINVAL)) => {
                            OpenOptions::new().write(true).open(&real)?.set_len(size)
                        }
                        r => r,
                    })
                    .map_err(errno)?;
            }
            if let Some(mode) = mode {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&real, std::fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(errno)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&real, uid, gid).map_err(errno)?;
            }
            if atime.is_some() || mtime.is_some() {
                let c = cstr(&real)?;
                let ts = [timespec(atime), timespec(mtime)];
                // SAFETY: c is a valid C string and ts two timespecs, as utimensat requires.
                let rc = unsafe {
                    libc::utimensat(
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        ts.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
                if rc != 0 {
                    return Err(errno(io::Error::last_os_error()));
                }
            }
            self.entry(&ns)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self
            .path_of(ino)
            .and_then(|p| std::fs::read_link(self.real(&p)).map_err(errno))
        {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mode = mode & !umask & 0o7777;
        self.make_node(req, parent, name, Some(mode), reply, |real| {
            std::fs::DirBuilder::new().mode(mode).create(real)
        })
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.make_node(req, parent, link_name, None, reply, |real| {
            std::os::unix::fs::symlink(target, real)
        })
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let ns = self.child(parent, name)?;
            let real = self.real(&ns);
            let m = std::fs::symlink_metadata(&real).map_err(errno)?;
            std::fs::remove_file(&real).map_err(errno)?;
            self.unname(&ns);
            if m.is_file() {
                self.switch
                    .unlinked(&ns, m.ino(), m.nlink() <= 1)
                    .map_err(errno)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.child(parent, name).and_then(|ns| {
            std::fs::remove_dir(self.real(&ns)).map_err(errno)?;
            self.unname(&ns);
            Ok(())
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // RENAME_EXCHANGE would swap delegates and endpoint copies by name: not supported,
        // as on a file system without it (EINVAL); RENAME_NOREPLACE is the backing's.
        if flags.bits() & !(libc::RENAME_NOREPLACE) != 0 {
            return reply.error(Errno::EINVAL);
        }
        let r = (|| {
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            let (src, dst) = (self.real(&from), self.real(&to));
            let moved = std::fs::symlink_metadata(&src).map_err(errno)?;
            let replaced = std::fs::symlink_metadata(&dst)
                .ok()
                .filter(|m| m.ino() != moved.ino());
            let (a, b) = (cstr(&src)?, cstr(&dst)?);
            // SAFETY: two valid C strings; renameat2 reads them only.
            let rc = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    flags.bits(),
                )
            };
            if rc != 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            if moved.ino() == replaced.as_ref().map_or(0, |m| m.ino()) {
                return Ok(());
            }
            let mut inodes = self.inodes.write().unwrap_or_else(|e| e.into_inner());
            for names in inodes.values_mut() {
                names.retain(|p| p != &to);
                for p in names.iter_mut() {
                    if lachesis_switch::path_prefix_matches(&from, p) {
                        *p = format!("{to}{}", &p[from.len()..]);
                    }
                }
            }
            inodes.retain(|_, names| !names.is_empty());
            drop(inodes);
            // The file renamed over loses a name (maybe its last) as by an unlink.
            if let Some(m) = replaced.filter(|m| m.is_file()) {
                self.switch
                    .unlinked(&to, m.ino(), m.nlink() <= 1)
                    .map_err(errno)?;
            }
            self.switch.renamed(&from, &to).map_err(errno)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let ns = self.path_of(ino)?;
            let file = Self::open_backing(&self.real(&ns), flags.0).map_err(errno)?;
            self.make_handle(req, ns, file, flags.0, |f| reply.open_backing(f))
                .map_err(errno)
        })();
        match r {
            Ok((fh, Some(id))) => reply.opened_passthrough(fh, FopenFlags::empty(), &id),
            Ok((fh, None)) => reply.opened(fh, SWITCHED),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            let ns = self.child(parent, name)?;
            let real = self.real(&ns);
            let mode = mode & !umask & 0o7777;
            let made = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&real);
            let file = match made {
                Ok(file) => {
                    self.own(req, &ns, &real, Some(mode)).map_err(errno)?;
                    file
                }
                // Made by someone else since the kernel looked: an open of the file there
                // (with its own truncate, so the stages see it).
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && flags & libc::O_EXCL == 0 => {
                    let file = Self::open_backing(&real, flags).map_err(errno)?;
                    if flags & libc::O_TRUNC != 0 {
                        let id = file.metadata().map_err(errno)?.ino();
                        self.switch
                            .truncate(&ns, id, 0, || file.set_len(0))
                            .map_err(errno)?;
                    }
                    file
                }
                Err(e) => return Err(errno(e)),
            };
            let attr = self.entry(&ns)?;
            let (fh, id) = self
                .make_handle(req, ns, file, flags, |f| reply.open_backing(f))
                .map_err(errno)?;
            Ok((attr, fh, id))
        })();
        match r {
            Ok((a, fh, Some(id))) => {
                reply.created_passthrough(&TTL, &a, generation(&a), fh, FopenFlags::empty(), &id)
            }
            Ok((a, fh, None)) => reply.created(&TTL, &a, generation(&a), fh, SWITCHED),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let h = match self.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        // Into the reply's own buffer: no buffer per read.
        reply.fill(size as usize, |buf| {
            match &*h {
                Handle::Switched(ctx) => self.switch.read(ctx, buf, offset),
                Handle::Passthrough { file, .. } => file.read_at(buf, offset),
            }
            .map_err(|e| {
                tracing::warn!(fh = fh.0, offset, size, "read failed: {e}");
                errno(e)
            })
        })
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = (|| {
            let h = self.handle(fh)?;
            if let (Handle::Switched(ctx), true) = (&*h, req.uid() != 0) {
                kill_suid(&ctx.backing).map_err(errno)?;
            }
            match &*h {
                Handle::Switched(ctx) => self.switch.write(ctx, data, offset),
                Handle::Passthrough { file, .. } => file.write_all_at(data, offset),
            }
            .map_err(|e| {
                tracing::warn!(fh = fh.0, offset, len = data.len(), "write failed: {e}");
                errno(e)
            })
        })();
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let h = self
            .handles
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        let r = match h.as_deref() {
            Some(Handle::Switched(ctx)) => {
                let r = self.switch.closed(ctx);
                // After its write-back: the stamp the next open compares with.
                self.switch.released(ctx.id, ctx.backing.metadata());
                r
            }
            _ => Ok(()),
        };
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.handle(fh).and_then(|h| {
            match &*h {
                Handle::Switched(ctx) => self.switch.sync(ctx),
                Handle::Passthrough { file, .. } => file.sync_data(),
            }
            .map_err(errno)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = (|| {
            let ns = self.path_of(ino)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, std::ffi::OsString::from(".")),
                (1, FileType::Directory, std::ffi::OsString::from("..")),
            ];
            for e in std::fs::read_dir(self.real(&ns)).map_err(errno)? {
                let e = e.map_err(errno)?;
                if ns == "/" && self.hidden.as_deref().is_some_and(|h| e.file_name() == *h) {
                    continue;
                }
                let kind = e
                    .file_type()
                    .ok()
                    .and_then(FileType::from_std)
                    .unwrap_or(FileType::RegularFile);
                entries.push((self.ino(e.ino()), kind, e.file_name()));
            }
            Ok(entries)
        })();
        match r {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), (i + 1) as u64, kind, &name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let perm = mode & !umask & 0o7777;
        let kind = mode & libc::S_IFMT;
        self.make_node(req, parent, name, Some(perm), reply, |real| {
            let c = CString::new(real.as_os_str().as_bytes())
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            // SAFETY: a valid C string; mknod reads it only.
            match unsafe { libc::mknod(c.as_ptr(), kind | perm, rdev as libc::dev_t) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        })
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let from = self.path_of(ino)?;
            let to = self.child(newparent, newname)?;
            let src = self.real(&from);
            let id = std::fs::symlink_metadata(&src).map_err(errno)?.ino();
            // Endpoint copies and delegates go by name: a file whose newest bytes live off
            // the backing file cannot take a second name (as across file systems).
            if !self.switch.can_link(&from, id) {
                return Err(Errno::EXDEV);
            }
            std::fs::hard_link(&src, self.real(&to)).map_err(errno)?;
            self.entry(&to)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, generation(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        // The reply counts in 32 bits: a longer copy is a short one, which callers repeat.
        let len = len.min(1 << 30);
        let r = (|| -> Result<u64, Errno> {
            let (hin, hout) = (self.handle(fh_in)?, self.handle(fh_out)?);
            if let (Handle::Passthrough { file: a, .. }, Handle::Passthrough { file: b, .. }) =
                (&*hin, &*hout)
            {
                // Both sides are the kernel's: the backing file system copies (reflinks where
                // it can), and the stages drop what they cached of the destination.
                let id = b.metadata().map_err(errno)?.ino();
                let path = self.path_of(ino_out)?;
                let (mut oi, mut oo) = (offset_in as i64, offset_out as i64);
                use std::os::fd::AsRawFd;
                return self
                    .switch
                    .alter(&path, id, Change::Bytes, || {
                        // SAFETY: both fds stay open while the handles are held.
                        let n = unsafe {
                            libc::copy_file_range(
                                a.as_raw_fd(),
                                &mut oi,
                                b.as_raw_fd(),
                                &mut oo,
                                len as usize,
                                0,
                            )
                        };
                        if n < 0 {
                            return Err(io::Error::last_os_error());
                        }
                        Ok(n as u64)
                    })
                    .map_err(errno);
            }
            // A switched side: read and write through the switch, which keeps every stage
            // coherent as for any write.
            let mut buf = vec![0u8; len.min(1 << 20) as usize];
            let mut done = 0u64;
            while done < len {
                let want = (len - done).min(buf.len() as u64) as usize;
                let n = match &*hin {
                    Handle::Switched(ctx) => {
                        self.switch.read(ctx, &mut buf[..want], offset_in + done)
                    }
                    Handle::Passthrough { file, .. } => {
                        file.read_at(&mut buf[..want], offset_in + done)
                    }
                }
                .map_err(errno)?;
                if n == 0 {
                    break;
                }
                match &*hout {
                    Handle::Switched(ctx) => self.switch.write(ctx, &buf[..n], offset_out + done),
                    Handle::Passthrough { file, .. } => {
                        file.write_all_at(&buf[..n], offset_out + done)
                    }
                }
                .map_err(errno)?;
                done += n as u64;
            }
            Ok(done)
        })();
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let r = (|| {
            let c = cstr(&self.root)?;
            // SAFETY: statvfs fills the zeroed struct for a valid C path.
            let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            Ok(s)
        })();
        match r {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // default_permissions: the kernel checked already.
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.handle(fh).and_then(|h| {
            let (file, path) = match &*h {
                Handle::Switched(ctx) => (&*ctx.backing, ctx.path.clone()),
                Handle::Passthrough { file, .. } => (file, self.path_of(ino)?),
            };
            let id = file.metadata().map_err(errno)?.ino();
            // Allocating (with or without keeping the size) leaves every byte as it was;
            // punch, zero, collapse and insert change or move them.
            let kind = match mode & !libc::FALLOC_FL_KEEP_SIZE {
                0 => Change::Keeps,
                _ => Change::Bytes,
            };
            let fd = std::os::fd::AsRawFd::as_raw_fd(file);
            self.switch
                .alter(&path, id, kind, || {
                    // SAFETY: fd stays open while `h` is held.
                    match unsafe { libc::fallocate(fd, mode, offset as i64, length as i64) } {
                        0 => Ok(()),
                        _ => Err(io::Error::last_os_error()),
                    }
                })
                .map_err(errno)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
