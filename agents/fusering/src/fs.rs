//! The file-system side of the protocol: the [`Filesystem`] trait a file system implements,
//! the values its methods take, and the replies they answer with.
//!
//! The shapes follow fuser's (the library `lachesis-fs` was first written on), method for
//! method, so a file system moves between the two by changing its imports; the protocol work
//! behind them is this crate's own ([`crate::dispatch`]). A reply writes its answer into the
//! transport's reply buffer at once: every method answers before it returns.

use std::cell::Cell;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Weak;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::abi::{self, put_u32, put_u64};

/// A node id (the kernel's `nodeid`; 1 is the root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct INodeNo(pub u64);

/// A file handle this file system gave at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileHandle(pub u64);

/// A node's generation: a node id answered with another generation is a new node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(pub u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOwner(pub u64);

/// `open(2)` flags as the application passed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFlags(pub i32);

/// `fuse_write_in.write_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteFlags(pub u32);

/// `renameat2(2)` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenameFlags(pub u32);

impl RenameFlags {
    pub fn bits(self) -> u32 {
        self.0
    }
}

/// `access(2)`'s mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessFlags(pub i32);

/// `copy_file_range(2)` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyFileRangeFlags(pub u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOrNow {
    SpecificTime(SystemTime),
    Now,
}

/// An errno a request fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(i32);

impl Errno {
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);

    pub fn from_i32(code: i32) -> Self {
        Errno(if code > 0 { code } else { libc::EIO })
    }
    pub fn code(self) -> i32 {
        self.0
    }
}

impl From<io::Error> for Errno {
    fn from(e: io::Error) -> Self {
        Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    NamedPipe,
    CharDevice,
    BlockDevice,
    Directory,
    RegularFile,
    Symlink,
    Socket,
}

impl FileType {
    pub fn from_std(t: std::fs::FileType) -> Option<Self> {
        use std::os::unix::fs::FileTypeExt;
        Some(if t.is_file() {
            FileType::RegularFile
        } else if t.is_dir() {
            FileType::Directory
        } else if t.is_symlink() {
            FileType::Symlink
        } else if t.is_fifo() {
            FileType::NamedPipe
        } else if t.is_socket() {
            FileType::Socket
        } else if t.is_char_device() {
            FileType::CharDevice
        } else if t.is_block_device() {
            FileType::BlockDevice
        } else {
            return None;
        })
    }

    /// The `S_IFMT` bits.
    fn mode(self) -> u32 {
        match self {
            FileType::NamedPipe => libc::S_IFIFO,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Directory => libc::S_IFDIR,
            FileType::RegularFile => libc::S_IFREG,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Socket => libc::S_IFSOCK,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAttr {
    pub ino: INodeNo,
    pub size: u64,
    pub blocks: u64,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub crtime: SystemTime,
    pub kind: FileType,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub flags: u32,
}

/// Seconds and nanoseconds since the epoch, negative before it.
fn since_epoch(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            match d.subsec_nanos() {
                0 => (-(d.as_secs() as i64), 0),
                ns => (-(d.as_secs() as i64) - 1, 1_000_000_000 - ns),
            }
        }
    }
}

impl FileAttr {
    /// `struct fuse_attr` into `b[..88]`.
    fn encode(&self, b: &mut [u8]) {
        b[..abi::ATTR].fill(0);
        let (a, an) = since_epoch(self.atime);
        let (m, mn) = since_epoch(self.mtime);
        let (c, cn) = since_epoch(self.ctime);
        put_u64(b, 0, self.ino.0);
        put_u64(b, 8, self.size);
        put_u64(b, 16, self.blocks);
        put_u64(b, 24, a as u64);
        put_u64(b, 32, m as u64);
        put_u64(b, 40, c as u64);
        put_u32(b, 48, an);
        put_u32(b, 52, mn);
        put_u32(b, 56, cn);
        put_u32(b, 60, self.kind.mode() | u32::from(self.perm));
        put_u32(b, 64, self.nlink);
        put_u32(b, 68, self.uid);
        put_u32(b, 72, self.gid);
        put_u32(b, 76, self.rdev);
        put_u32(b, 80, self.blksize);
        put_u32(b, 84, self.flags);
    }
}

/// Capabilities (`fuse_init_in.flags` and `flags2`, as one 64-bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitFlags(pub u64);

impl InitFlags {
    pub const FUSE_ASYNC_READ: InitFlags = InitFlags(abi::init::ASYNC_READ);
    pub const FUSE_BIG_WRITES: InitFlags = InitFlags(abi::init::BIG_WRITES);
    pub const FUSE_PARALLEL_DIROPS: InitFlags = InitFlags(1 << 18);
    pub const FUSE_MAX_PAGES: InitFlags = InitFlags(abi::init::MAX_PAGES);
    pub const FUSE_INIT_EXT: InitFlags = InitFlags(abi::init::INIT_EXT);
    pub const FUSE_DIRECT_IO_ALLOW_MMAP: InitFlags = InitFlags(1 << 36);
    pub const FUSE_PASSTHROUGH: InitFlags = InitFlags(1 << 37);
    pub const FUSE_OVER_IO_URING: InitFlags = InitFlags(abi::init::OVER_IO_URING);

    pub fn contains(self, f: InitFlags) -> bool {
        self.0 & f.0 == f.0
    }
}

/// What the kernel offered at INIT and what the file system asks for in return.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    offered: InitFlags,
    pub(crate) requested: u64,
    pub(crate) max_write: u32,
    pub(crate) max_stack_depth: u32,
}

impl KernelConfig {
    pub(crate) fn new(offered: u64, requested: u64, max_write: u32) -> Self {
        Self {
            offered: InitFlags(offered),
            requested: requested & offered,
            max_write,
            max_stack_depth: 0,
        }
    }
    pub fn capabilities(&self) -> InitFlags {
        self.offered
    }
    /// Asks for `f`; refused (with the flags the kernel lacks) if it did not offer them.
    pub fn add_capabilities(&mut self, f: InitFlags) -> Result<(), InitFlags> {
        if !self.offered.contains(f) {
            return Err(InitFlags(f.0 & !self.offered.0));
        }
        self.requested |= f.0;
        Ok(())
    }
    /// The largest write, 4 KiB to 1 MiB (this crate's buffers are sized for 1 MiB).
    pub fn set_max_write(&mut self, n: u32) -> Result<u32, u32> {
        if !(4096..=1 << 20).contains(&n) {
            return Err(self.max_write);
        }
        let old = self.max_write;
        self.max_write = n;
        Ok(old)
    }
    /// How deep the backing files of passthrough may be stacked (1 or 2).
    pub fn set_max_stack_depth(&mut self, n: u32) -> Result<u32, u32> {
        if !(1..=2).contains(&n) {
            return Err(self.max_stack_depth);
        }
        let old = self.max_stack_depth;
        self.max_stack_depth = n;
        Ok(old)
    }
}

/// The connection's `/dev/fuse`, for what is asked of it outside a reply (passthrough).
#[derive(Debug, Clone)]
pub struct Connection {
    pub(crate) dev: Weak<File>,
}

// `_IOW(229, 1, struct fuse_backing_map)` and `_IOW(229, 2, uint32_t)`.
const FUSE_DEV_IOC_BACKING_OPEN: libc::c_ulong = 0x4010_e501;
const FUSE_DEV_IOC_BACKING_CLOSE: libc::c_ulong = 0x4004_e502;

impl Connection {
    /// Registers `file` as a backing file for passthrough; closed when the id is dropped.
    pub fn open_backing(&self, file: &File) -> io::Result<BackingId> {
        let dev = self
            .dev
            .upgrade()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTCONN))?;
        // struct fuse_backing_map { int32_t fd; uint32_t flags; uint64_t padding; }
        let mut map = [0u8; 16];
        map[..4].copy_from_slice(&file.as_raw_fd().to_ne_bytes());
        // SAFETY: the ioctl reads the 16-byte map, which outlives the call.
        let id = unsafe { libc::ioctl(dev.as_raw_fd(), FUSE_DEV_IOC_BACKING_OPEN, map.as_ptr()) };
        if id < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(BackingId {
            dev: self.dev.clone(),
            id: id as u32,
        })
    }
}

/// A backing file registered with the kernel; unregistered when dropped.
#[derive(Debug)]
pub struct BackingId {
    dev: Weak<File>,
    id: u32,
}

impl Drop for BackingId {
    fn drop(&mut self) {
        if let Some(dev) = self.dev.upgrade() {
            // SAFETY: the ioctl reads the u32, which outlives the call.
            unsafe { libc::ioctl(dev.as_raw_fd(), FUSE_DEV_IOC_BACKING_CLOSE, &self.id) };
        }
    }
}

/// Who asked (the in header's credentials).
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) pid: u32,
}

impl Request {
    pub fn uid(&self) -> u32 {
        self.uid
    }
    pub fn gid(&self) -> u32 {
        self.gid
    }
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// Where a reply goes: the transport's reply buffer and the outcome slot the dispatcher reads
/// after the method returns.
pub struct Sink<'a> {
    pub(crate) out: &'a mut [u8],
    pub(crate) done: &'a Cell<Option<Result<usize, i32>>>,
    pub(crate) conn: &'a Connection,
}

impl Sink<'_> {
    fn ok(self, len: usize) {
        self.done.set(Some(Ok(len)));
    }
    fn error(self, e: Errno) {
        self.done.set(Some(Err(e.code())));
    }
    fn bytes(self, data: &[u8]) {
        let n = data.len().min(self.out.len());
        self.out[..n].copy_from_slice(&data[..n]);
        self.ok(n);
    }
}

fn ttl(b: &mut [u8], off: usize, nsec_off: usize, t: &Duration) {
    put_u64(b, off, t.as_secs());
    put_u32(b, nsec_off, t.subsec_nanos());
}

/// `struct fuse_entry_out` into `b[..128]`.
fn entry_out(b: &mut [u8], ttl_: &Duration, attr: &FileAttr, generation: Generation) {
    b[..abi::ENTRY_OUT].fill(0);
    put_u64(b, 0, attr.ino.0);
    put_u64(b, 8, generation.0);
    ttl(b, 16, 32, ttl_);
    ttl(b, 24, 36, ttl_);
    attr.encode(&mut b[40..]);
}

/// `struct fuse_open_out` into `b[..16]`.
fn open_out(b: &mut [u8], fh: FileHandle, flags: u32, backing: Option<&BackingId>) {
    put_u64(b, 0, fh.0);
    put_u32(
        b,
        8,
        flags | backing.map_or(0, |_| FopenFlags::FOPEN_PASSTHROUGH.0),
    );
    put_u32(b, 12, backing.map_or(0, |id| id.id));
}

/// `fuse_open_out.open_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FopenFlags(pub u32);

impl FopenFlags {
    pub const FOPEN_DIRECT_IO: FopenFlags = FopenFlags(abi::fopen::DIRECT_IO);
    pub const FOPEN_PARALLEL_DIRECT_WRITES: FopenFlags =
        FopenFlags(abi::fopen::PARALLEL_DIRECT_WRITES);
    pub const FOPEN_PASSTHROUGH: FopenFlags = FopenFlags(1 << 7);

    pub const fn empty() -> Self {
        FopenFlags(0)
    }
    pub const fn union(self, o: FopenFlags) -> Self {
        FopenFlags(self.0 | o.0)
    }
}

/// A reply type over a [`Sink`], with the `error` every reply has.
macro_rules! reply {
    ($name:ident) => {
        pub struct $name<'a>(pub(crate) Sink<'a>);
        impl $name<'_> {
            pub fn error(self, e: Errno) {
                self.0.error(e)
            }
        }
    };
}

reply!(ReplyEmpty);
impl ReplyEmpty<'_> {
    pub fn ok(self) {
        self.0.ok(0)
    }
}

reply!(ReplyData);
impl ReplyData<'_> {
    pub fn data(self, data: &[u8]) {
        self.0.bytes(data)
    }
    /// Answers with the first bytes of a zeroed `size`-byte buffer that `f` fills in place
    /// (the reply buffer itself: no buffer of its own and no copy); `f` returns how many.
    pub fn fill(self, size: usize, f: impl FnOnce(&mut [u8]) -> Result<usize, Errno>) {
        let n = size.min(self.0.out.len());
        let buf = &mut self.0.out[..n];
        buf.fill(0);
        match f(buf) {
            Ok(k) => self.0.ok(k.min(n)),
            Err(e) => self.0.error(e),
        }
    }
}

reply!(ReplyEntry);
impl ReplyEntry<'_> {
    pub fn entry(self, ttl: &Duration, attr: &FileAttr, generation: Generation) {
        entry_out(self.0.out, ttl, attr, generation);
        self.0.ok(abi::ENTRY_OUT)
    }
}

reply!(ReplyAttr);
impl ReplyAttr<'_> {
    pub fn attr(self, ttl_: &Duration, attr: &FileAttr) {
        let b = &mut *self.0.out;
        b[..16].fill(0);
        ttl(b, 0, 8, ttl_);
        attr.encode(&mut b[16..]);
        self.0.ok(abi::ATTR_OUT)
    }
}

reply!(ReplyOpen);
impl ReplyOpen<'_> {
    pub fn open_backing(&self, file: &File) -> io::Result<BackingId> {
        self.0.conn.open_backing(file)
    }
    pub fn opened(self, fh: FileHandle, flags: FopenFlags) {
        open_out(self.0.out, fh, flags.0, None);
        self.0.ok(abi::OPEN_OUT)
    }
    pub fn opened_passthrough(self, fh: FileHandle, flags: FopenFlags, id: &BackingId) {
        open_out(self.0.out, fh, flags.0, Some(id));
        self.0.ok(abi::OPEN_OUT)
    }
}

reply!(ReplyCreate);
impl ReplyCreate<'_> {
    pub fn open_backing(&self, file: &File) -> io::Result<BackingId> {
        self.0.conn.open_backing(file)
    }
    pub fn created(
        self,
        ttl: &Duration,
        a: &FileAttr,
        g: Generation,
        fh: FileHandle,
        flags: FopenFlags,
    ) {
        self.create(ttl, a, g, fh, flags, None)
    }
    pub fn created_passthrough(
        self,
        ttl: &Duration,
        a: &FileAttr,
        g: Generation,
        fh: FileHandle,
        flags: FopenFlags,
        id: &BackingId,
    ) {
        self.create(ttl, a, g, fh, flags, Some(id))
    }
    fn create(
        self,
        ttl: &Duration,
        a: &FileAttr,
        g: Generation,
        fh: FileHandle,
        flags: FopenFlags,
        id: Option<&BackingId>,
    ) {
        entry_out(self.0.out, ttl, a, g);
        open_out(&mut self.0.out[abi::ENTRY_OUT..], fh, flags.0, id);
        self.0.ok(abi::ENTRY_OUT + abi::OPEN_OUT)
    }
}

reply!(ReplyWrite);
impl ReplyWrite<'_> {
    pub fn written(self, size: u32) {
        self.0.out[..abi::WRITE_OUT].fill(0);
        put_u32(self.0.out, 0, size);
        self.0.ok(abi::WRITE_OUT)
    }
}

reply!(ReplyStatfs);
impl ReplyStatfs<'_> {
    #[allow(clippy::too_many_arguments)]
    pub fn statfs(
        self,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
    ) {
        let b = &mut *self.0.out;
        b[..abi::STATFS_OUT].fill(0);
        put_u64(b, 0, blocks);
        put_u64(b, 8, bfree);
        put_u64(b, 16, bavail);
        put_u64(b, 24, files);
        put_u64(b, 32, ffree);
        put_u32(b, 40, bsize);
        put_u32(b, 44, namelen);
        put_u32(b, 48, frsize);
        self.0.ok(abi::STATFS_OUT)
    }
}

/// Directory entries (`struct fuse_dirent`, each padded to 8 bytes), up to the size the
/// kernel asked for.
pub struct ReplyDirectory<'a> {
    pub(crate) sink: Sink<'a>,
    pub(crate) size: usize,
    pub(crate) len: usize,
}

impl ReplyDirectory<'_> {
    /// Adds an entry; true when it did not fit (the buffer is full).
    pub fn add<T: AsRef<OsStr>>(
        &mut self,
        ino: INodeNo,
        offset: u64,
        kind: FileType,
        name: T,
    ) -> bool {
        let name = name.as_ref().as_bytes();
        let entlen = 24 + name.len();
        let padded = entlen.div_ceil(8) * 8;
        let limit = self.size.min(self.sink.out.len());
        if self.len + padded > limit {
            return true;
        }
        let b = &mut self.sink.out[self.len..self.len + padded];
        b.fill(0);
        put_u64(b, 0, ino.0);
        put_u64(b, 8, offset);
        put_u32(b, 16, name.len() as u32);
        put_u32(b, 20, kind.mode() >> 12);
        b[24..entlen].copy_from_slice(name);
        self.len += padded;
        false
    }
    pub fn ok(self) {
        let n = self.len;
        self.sink.ok(n)
    }
    pub fn error(self, e: Errno) {
        self.sink.error(e)
    }
}

/// A file system. Every method answers through its reply before it returns; the defaults
/// answer as a file system without the operation does (ENOSYS), or as a directory open that
/// keeps no state.
#[allow(unused_variables, clippy::too_many_arguments)]
pub trait Filesystem: Send + Sync + 'static {
    fn init(&self, conn: &Connection, config: &mut KernelConfig) -> io::Result<()> {
        Ok(())
    }
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS)
    }
    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        reply.error(Errno::ENOSYS)
    }
    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        reply.error(Errno::ENOSYS)
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
        reply.error(Errno::ENOSYS)
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
        reply.error(Errno::ENOSYS)
    }
    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS)
    }
    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }
    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty())
    }
    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }
    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 512, 255, 0)
    }
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
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
        reply.error(Errno::ENOSYS)
    }
    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS)
    }
    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::ENOSYS)
    }
}
