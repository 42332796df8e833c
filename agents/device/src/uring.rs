//! io_uring backend on a file or block device: O_DIRECT, registered (fixed) buffers and a
//! registered file, batched submission, a configurable queue depth and one ring per worker
//! thread ([`UringDevice::worker`]).
//!
//! Two ways in: the [`BlockDevice`] methods (any buffer; aligned buffers go straight to the
//! kernel, others bounce through a registered buffer), and the pipelined fixed-buffer API
//! ([`UringDevice::queue_fixed`], [`UringDevice::submit`], [`UringDevice::wait`]) that keeps
//! `queue_depth` IOs in flight from one thread without copies.
//!
//! [`files`] is the same backend for IO on open files that are no device of their own (the
//! file system's backing and replica files): any number of files per submission.

use std::fs::{File, OpenOptions};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::buf::{is_aligned, AlignedBuf};

pub mod files;
use crate::device::{
    BlockDevice, ConcurrentRead, Error, FdpMode, Geometry, IoRequest, Placement, PlacementHandle,
    Result,
};

/// How to open a [`UringDevice`].
#[derive(Clone, Debug)]
pub struct UringConfig {
    /// IOs in flight per ring (also the ring size and the number of registered buffers).
    pub queue_depth: u32,
    /// Size of each registered buffer; larger IOs are split.
    pub max_io_bytes: u32,
    /// Open with O_DIRECT (bypass the page cache).
    pub direct: bool,
    /// Block size to enforce; default 4096 for files, the logical sector size for block devices.
    pub block_size: Option<u32>,
    /// Placement: this backend has no placement directives (see [`FdpMode`]).
    pub fdp: FdpMode,
    /// For regular files: create the file if missing and extend it to this many bytes.
    pub create_size: Option<u64>,
    /// Set up each ring as single-issuer with deferred task work (what fio does): cheaper
    /// completions, but a ring then belongs to the first thread that submits on it, and using
    /// it from another thread fails (EEXIST). Give each thread its own `worker()`.
    pub single_issuer: bool,
}

impl Default for UringConfig {
    fn default() -> Self {
        UringConfig {
            queue_depth: 32,
            max_io_bytes: 128 * 1024,
            direct: true,
            block_size: None,
            fdp: FdpMode::Off,
            create_size: None,
            single_issuer: true,
        }
    }
}

/// Direction of a fixed-buffer IO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixedOp {
    Read,
    Write,
}

/// A finished pipelined IO: its tag and the bytes moved, or the error.
#[derive(Debug)]
pub struct Completion {
    pub tag: u64,
    pub result: Result<u32>,
}

mod ioctl {
    // Block device ioctls from <linux/fs.h>.
    nix::ioctl_read!(blkgetsize64, 0x12, 114, u64);
    nix::ioctl_read_bad!(blksszget, nix::request_code_none!(0x12, 104), libc::c_int);
    nix::ioctl_write_ptr_bad!(blkdiscard, nix::request_code_none!(0x12, 119), [u64; 2]);
}

/// The open file shared by all rings of one device.
#[derive(Debug)]
struct Target {
    file: File,
    path: PathBuf,
    is_block: bool,
    geometry: Geometry,
    config: UringConfig,
}

/// Where a finished IO's bytes go and what it was.
#[derive(Clone, Copy, Debug)]
struct Slot {
    tag: u64,
    buf: Option<u16>,
    /// The buffer was taken from the batch's bounce pool (return it on completion).
    bounce: bool,
    len: u32,
    /// For bounced reads: copy the registered buffer here on completion.
    copy_to: *mut u8,
    op: &'static str,
}

const IDLE_SLOT: Slot = Slot {
    tag: 0,
    buf: None,
    bounce: false,
    len: 0,
    copy_to: std::ptr::null_mut(),
    op: "",
};

/// One io_uring on the device. Not `Sync`: give each worker thread its own
/// ([`UringDevice::worker`]).
pub struct UringDevice {
    // Both dropped by hand in Drop: the ring (and its buffer registration) first, then the
    // buffers, unless the kernel might still write into them.
    ring: ManuallyDrop<IoUring>,
    target: Arc<Target>,
    bufs: ManuallyDrop<AlignedBuf>,
    buf_busy: Vec<bool>,
    free_bufs: Vec<u16>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    in_flight: usize,
    /// Created with IORING_SETUP_R_DISABLED: enable on first submission.
    disabled: bool,
    /// The thread a single-issuer ring belongs to, once enabled.
    issuer: Option<std::thread::ThreadId>,
    cqes: Vec<cqueue::Entry>,
    /// Set if the kernel may still own memory we could not wait for; then buffers are leaked
    /// on drop instead of freed.
    broken: bool,
}

// SAFETY: raw pointers in `slots` are only set while a call that owns the pointed-to buffers
// is running on this thread; between calls they are null or point into `bufs`, which moves
// with the device.
unsafe impl Send for UringDevice {}

impl std::fmt::Debug for UringDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringDevice")
            .field("path", &self.target.path)
            .field("geometry", &self.target.geometry)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl UringDevice {
    /// Opens `path` (regular file or block device) and builds the first ring.
    pub fn open(path: impl AsRef<Path>, config: UringConfig) -> Result<UringDevice> {
        let path = path.as_ref();
        if config.queue_depth == 0 || config.queue_depth > 4096 {
            return Err(Error::Config(format!(
                "queue_depth {} must be 1..=4096",
                config.queue_depth
            )));
        }
        if config.max_io_bytes == 0 || !config.max_io_bytes.is_multiple_of(4096) {
            return Err(Error::Config(format!(
                "max_io_bytes {} must be a non-zero multiple of 4096",
                config.max_io_bytes
            )));
        }
        if let Some(size) = config.create_size {
            create_file(path, size)?;
        }
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::DeviceNotFound {
                path: path.to_owned(),
            },
            _ => Error::io("stat device", e),
        })?;
        let is_block = meta.file_type().is_block_device();
        if !is_block && !meta.is_file() {
            return Err(Error::Config(format!(
                "{}: not a regular file or block device",
                path.display()
            )));
        }
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if config.direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = opts.open(path).map_err(|e| Error::io("open device", e))?;
        let geometry = geometry_of(&file, path, is_block, &config)?;
        let target = Arc::new(Target {
            file,
            path: path.to_owned(),
            is_block,
            geometry,
            config,
        });
        UringDevice::with_ring(target)
    }

    /// Reads of the device from any thread, each on that thread's own ring (see [`files`]).
    pub fn file_reads(&self) -> FileReads {
        FileReads {
            target: Arc::clone(&self.target),
        }
    }

    /// Another ring on the same open device, for another worker thread.
    pub fn worker(&self) -> Result<UringDevice> {
        UringDevice::with_ring(Arc::clone(&self.target))
    }

    fn with_ring(target: Arc<Target>) -> Result<UringDevice> {
        let qd = target.config.queue_depth;
        // SINGLE_ISSUER + DEFER_TASKRUN (6.1+) run completion work only when we reap; the ring
        // starts disabled so the thread that first submits, not the one that built it, becomes
        // its issuer. COOP_TASKRUN (5.19+) alone avoids interrupting the thread; a plain ring
        // is the last resort.
        let mut disabled = false;
        let single = if target.config.single_issuer {
            IoUring::builder()
                .setup_r_disabled()
                .setup_single_issuer()
                .setup_defer_taskrun()
                .setup_coop_taskrun()
                .build(qd)
                .ok()
        } else {
            None
        };
        let ring = match single {
            Some(r) => {
                disabled = true;
                r
            }
            None => IoUring::builder()
                .setup_coop_taskrun()
                .build(qd)
                .or_else(|_| IoUring::new(qd))
                .map_err(|e| Error::io("io_uring setup", e))?,
        };
        let max_io = target.config.max_io_bytes as usize;
        let mut bufs = AlignedBuf::new(max_io * qd as usize)?;
        let base = bufs.as_mut_ptr();
        let iovecs: Vec<libc::iovec> = (0..qd as usize)
            // SAFETY: every iovec lies inside `bufs`.
            .map(|i| libc::iovec {
                iov_base: unsafe { base.add(i * max_io) }.cast(),
                iov_len: max_io,
            })
            .collect();
        // SAFETY: the buffers outlive the registration: `ring` is dropped before `bufs`.
        unsafe { ring.submitter().register_buffers(&iovecs) }
            .map_err(|e| Error::io("register buffers", e))?;
        ring.submitter()
            .register_files(&[target.file.as_raw_fd()])
            .map_err(|e| Error::io("register file", e))?;
        Ok(UringDevice {
            ring: ManuallyDrop::new(ring),
            target,
            bufs: ManuallyDrop::new(bufs),
            buf_busy: vec![false; qd as usize],
            free_bufs: (0..qd as u16).rev().collect(),
            slots: vec![IDLE_SLOT; qd as usize],
            free_slots: (0..qd).rev().collect(),
            in_flight: 0,
            disabled,
            issuer: None,
            cqes: Vec::with_capacity(qd as usize * 2),
            broken: false,
        })
    }

    /// The path the device was opened from.
    pub fn path(&self) -> &Path {
        &self.target.path
    }

    /// IOs submitted through the pipelined API and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Number of registered buffers (= queue depth).
    pub fn buffer_count(&self) -> usize {
        self.buf_busy.len()
    }

    fn buf_range(&self, index: usize) -> Result<std::ops::Range<usize>> {
        if index >= self.buf_busy.len() {
            return Err(Error::Config(format!(
                "buffer {index} does not exist ({} registered)",
                self.buf_busy.len()
            )));
        }
        if self.buf_busy[index] {
            return Err(Error::BufferBusy { index });
        }
        let m = self.target.config.max_io_bytes as usize;
        Ok(index * m..(index + 1) * m)
    }

    /// Registered buffer `index`, unless an IO in flight uses it.
    pub fn buffer(&self, index: usize) -> Result<&[u8]> {
        let r = self.buf_range(index)?;
        Ok(&self.bufs[r])
    }

    /// Registered buffer `index` for filling, unless an IO in flight uses it.
    pub fn buffer_mut(&mut self, index: usize) -> Result<&mut [u8]> {
        let r = self.buf_range(index)?;
        Ok(&mut self.bufs[r])
    }

    /// Queues a read or write of `len` bytes between registered buffer `buf_index` and the
    /// device at `offset`, to be reported by [`UringDevice::wait`] with `tag`. Nothing is sent
    /// before [`UringDevice::submit`] or [`UringDevice::wait`].
    pub fn queue_fixed(
        &mut self,
        op: FixedOp,
        buf_index: usize,
        offset: u64,
        len: u32,
        handle: PlacementHandle,
        tag: u64,
    ) -> Result<()> {
        let g = &self.target.geometry;
        g.check_range(offset, u64::from(len))?;
        if op == FixedOp::Write {
            g.check_handle(handle)?;
        }
        if len > self.target.config.max_io_bytes {
            return Err(Error::Config(format!(
                "{len} bytes exceed the {}-byte registered buffer",
                self.target.config.max_io_bytes
            )));
        }
        let range = self.buf_range(buf_index)?;
        let ptr = self.bufs[range].as_mut_ptr();
        let idx = buf_index as u16;
        let (sqe, name) = rw_entry(op, ptr, len, offset, Some(idx));
        self.push(
            sqe,
            Slot {
                tag,
                buf: Some(idx),
                bounce: false,
                len,
                copy_to: std::ptr::null_mut(),
                op: name,
            },
        )
    }

    /// Enables a single-issuer ring for the calling thread on first use, and refuses any other
    /// thread afterwards (the kernel would, with a less helpful EEXIST, after we had queued).
    fn ensure_enabled(&mut self) -> Result<()> {
        let me = std::thread::current().id();
        if self.disabled {
            self.ring
                .submitter()
                .register_enable_rings()
                .map_err(|e| Error::io("io_uring enable", e))?;
            self.disabled = false;
            self.issuer = Some(me);
        }
        match self.issuer {
            Some(t) if t != me => Err(Error::ForeignThread),
            _ => Ok(()),
        }
    }

    /// Sends every queued IO to the kernel.
    pub fn submit(&mut self) -> Result<()> {
        self.ensure_enabled()?;
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if transient(&e) => continue,
                Err(e) => return Err(Error::io("io_uring submit", e)),
            }
        }
    }

    /// Submits queued IOs, waits until at least `min` have finished (or none are in flight),
    /// and appends every finished IO to `out`.
    pub fn wait(&mut self, min: usize, out: &mut Vec<Completion>) -> Result<()> {
        let min = min.min(self.in_flight);
        self.enter(min)?;
        self.reap(|slot, res, _| {
            let result = if res < 0 {
                Err(Error::io(slot.op, io::Error::from_raw_os_error(-res)))
            } else if res as u32 != slot.len {
                Err(Error::ShortTransfer {
                    op: slot.op,
                    done: res as u64,
                    expected: u64::from(slot.len),
                })
            } else {
                Ok(res as u32)
            };
            out.push(Completion {
                tag: slot.tag,
                result,
            });
        });
        Ok(())
    }

    fn push(&mut self, sqe: squeue::Entry, slot: Slot) -> Result<()> {
        self.ensure_enabled()?;
        let id = self.free_slots.pop().ok_or(Error::Busy {
            in_flight: self.in_flight,
        })?;
        let sqe = sqe.user_data(u64::from(id));
        // SAFETY: the buffers the entry points at stay valid until its completion is reaped:
        // registered buffers live as long as the ring, and callers passing their own memory
        // (run_batch) wait for every IO before returning.
        while unsafe { self.ring.submission().push(&sqe) }.is_err() {
            self.submit()?;
        }
        if let Some(b) = slot.buf {
            self.buf_busy[usize::from(b)] = true;
        }
        self.slots[id as usize] = slot;
        self.in_flight += 1;
        Ok(())
    }

    /// io_uring_enter: submit and wait for `min` completions, retrying interruptions.
    fn enter(&mut self, min: usize) -> Result<()> {
        self.ensure_enabled()?;
        loop {
            match self.ring.submit_and_wait(min) {
                Ok(_) => return Ok(()),
                Err(e) if transient(&e) => continue,
                Err(e) => return Err(Error::io("io_uring wait", e)),
            }
        }
    }

    fn reap(&mut self, mut f: impl FnMut(Slot, i32, &mut [u8])) {
        // Copy the entries out first (into a reused vector) so the ring is not borrowed while
        // slots are released.
        let mut entries = std::mem::take(&mut self.cqes);
        entries.clear();
        entries.extend(self.ring.completion());
        for cqe in entries.iter() {
            let id = cqe.user_data() as usize;
            let Some(slot) = self.slots.get(id).copied() else {
                continue;
            };
            self.slots[id] = IDLE_SLOT;
            self.free_slots.push(id as u32);
            self.in_flight -= 1;
            let m = self.target.config.max_io_bytes as usize;
            let bounce: &mut [u8] = match slot.buf {
                Some(b) => {
                    let b = usize::from(b);
                    self.buf_busy[b] = false;
                    if slot.bounce {
                        self.free_bufs.push(b as u16);
                    }
                    &mut self.bufs[b * m..(b + 1) * m]
                }
                None => &mut [],
            };
            f(slot, cqe.result(), bounce);
        }
        self.cqes = entries;
    }

    fn require_idle(&self) -> Result<()> {
        if self.in_flight > 0 {
            return Err(Error::Busy {
                in_flight: self.in_flight,
            });
        }
        Ok(())
    }

    /// Runs a batch with up to `queue_depth` IOs in flight. Returns the index of the failing
    /// request with its error; every IO has finished when this returns.
    fn run_batch(&mut self, reqs: &mut [IoRequest<'_>]) -> std::result::Result<(), (usize, Error)> {
        self.require_idle().map_err(|e| (0, e))?;
        let g = self.target.geometry.clone();
        for (i, r) in reqs.iter().enumerate() {
            g.check_range(r.offset(), r.len() as u64)
                .map_err(|e| (i, e))?;
            if let IoRequest::Write { handle, .. } = r {
                g.check_handle(*handle).map_err(|e| (i, e))?;
            }
        }
        let max_io = self.target.config.max_io_bytes as usize;
        let align = if self.target.config.direct {
            g.block_size as usize
        } else {
            1
        };
        let qd = self.buf_busy.len();
        // Bounce buffers: every registered buffer is free here (nothing in flight).
        self.free_bufs = (0..qd as u16).rev().collect();
        let (mut req, mut done) = (0usize, 0usize);
        let mut first_err: Option<(usize, Error)> = None;
        loop {
            while first_err.is_none() && req < reqs.len() && self.in_flight < qd {
                let r = &mut reqs[req];
                let offset = r.offset() + done as u64;
                let len = (r.len() - done).min(max_io);
                let (ptr, dir) = match r {
                    IoRequest::Read { buf, .. } => (buf[done..].as_mut_ptr(), FixedOp::Read),
                    IoRequest::Write { buf, .. } => {
                        (buf[done..].as_ptr() as *mut u8, FixedOp::Write)
                    }
                };
                let pushed = if is_aligned(ptr, len, align) {
                    let (sqe, op) = rw_entry(dir, ptr, len as u32, offset, None);
                    self.push(
                        sqe,
                        Slot {
                            tag: req as u64,
                            buf: None,
                            bounce: false,
                            len: len as u32,
                            copy_to: std::ptr::null_mut(),
                            op,
                        },
                    )
                } else {
                    let Some(b) = self.free_bufs.pop() else { break };
                    let start = usize::from(b) * max_io;
                    let bptr = self.bufs[start..start + max_io].as_mut_ptr();
                    let copy_to = match dir {
                        FixedOp::Read => ptr,
                        FixedOp::Write => {
                            // SAFETY: ptr..ptr+len is inside the caller's write buffer.
                            self.bufs[start..start + len]
                                .copy_from_slice(unsafe { std::slice::from_raw_parts(ptr, len) });
                            std::ptr::null_mut()
                        }
                    };
                    let (sqe, op) = rw_entry(dir, bptr, len as u32, offset, Some(b));
                    self.push(
                        sqe,
                        Slot {
                            tag: req as u64,
                            buf: Some(b),
                            bounce: true,
                            len: len as u32,
                            copy_to,
                            op,
                        },
                    )
                };
                if let Err(e) = pushed {
                    first_err = Some((req, e));
                    break;
                }
                done += len;
                if done == reqs[req].len() {
                    req += 1;
                    done = 0;
                }
            }
            if self.in_flight == 0 {
                break;
            }
            if let Err(e) = self.enter(1) {
                // The kernel still owns in-flight buffers: keep trying to collect them, and if
                // that is impossible mark the ring so its buffers are never freed.
                if !self.drain_or_break() {
                    return Err((req, e));
                }
                first_err.get_or_insert((req, e));
                continue;
            }
            self.reap(|slot, res, bounce| {
                let idx = slot.tag as usize;
                if res < 0 {
                    first_err.get_or_insert((
                        idx,
                        Error::io(slot.op, io::Error::from_raw_os_error(-res)),
                    ));
                } else if res as u32 != slot.len {
                    first_err.get_or_insert((
                        idx,
                        Error::ShortTransfer {
                            op: slot.op,
                            done: res as u64,
                            expected: u64::from(slot.len),
                        },
                    ));
                } else if !slot.copy_to.is_null() {
                    // SAFETY: copy_to points at `len` bytes of the caller's read buffer, which
                    // this call borrows mutably until it returns.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            bounce.as_ptr(),
                            slot.copy_to,
                            slot.len as usize,
                        )
                    };
                }
            });
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Waits for every IO in flight; false (and the ring marked broken) if the kernel will
    /// not report them.
    fn drain_or_break(&mut self) -> bool {
        // Entries queued on a never-enabled ring still need submitting to complete; a ring
        // owned by another thread cannot be drained from this one.
        if self.ensure_enabled().is_err() {
            self.broken = self.in_flight > 0;
            return !self.broken;
        }
        for _ in 0..1000 {
            if self.in_flight == 0 {
                return true;
            }
            match self.ring.submit_and_wait(self.in_flight) {
                Ok(_) => self.reap(|_, _, _| {}),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        self.broken = self.in_flight > 0;
        !self.broken
    }

    fn run_one(&mut self, req: IoRequest<'_>) -> Result<()> {
        self.run_batch(&mut [req]).map_err(|(_, e)| e)
    }

    fn sync_op(&mut self, sqe: squeue::Entry, op: &'static str) -> Result<()> {
        self.require_idle()?;
        self.push(
            sqe,
            Slot {
                tag: 0,
                buf: None,
                bounce: false,
                len: 0,
                copy_to: std::ptr::null_mut(),
                op,
            },
        )?;
        let mut res = 0;
        while self.in_flight > 0 {
            self.enter(1)?;
            self.reap(|_, r, _| res = r);
        }
        if res < 0 {
            return Err(Error::io(op, io::Error::from_raw_os_error(-res)));
        }
        Ok(())
    }
}

/// [`ConcurrentRead`] of a [`UringDevice`]'s file: positional reads on the calling thread's
/// ring, through an aligned bounce buffer when the caller's is not (`O_DIRECT`).
pub struct FileReads {
    target: Arc<Target>,
}

impl ConcurrentRead for FileReads {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.target.geometry.check_range(offset, buf.len() as u64)?;
        let n = files::read_full_as(&self.target.file, self.target.config.direct, buf, offset)
            .map_err(|e| Error::io("read", e))?;
        // As the ring's reads: a short read is an error, never bytes left as they were.
        if n != buf.len() {
            return Err(Error::ShortTransfer {
                op: "read",
                done: n as u64,
                expected: buf.len() as u64,
            });
        }
        Ok(())
    }
}

impl BlockDevice for UringDevice {
    fn geometry(&self) -> &Geometry {
        &self.target.geometry
    }

    fn concurrent_reads(&self) -> Option<Arc<dyn ConcurrentRead>> {
        Some(Arc::new(self.file_reads()))
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.run_one(IoRequest::Read { offset, buf })
    }

    fn write(&mut self, offset: u64, buf: &[u8], handle: PlacementHandle) -> Result<()> {
        self.run_one(IoRequest::Write {
            offset,
            buf,
            handle,
        })
    }

    fn trim(&mut self, offset: u64, len: u64) -> Result<()> {
        self.target.geometry.check_range(offset, len)?;
        self.require_idle()?;
        let fd = self.target.file.as_raw_fd();
        if self.target.is_block {
            let range = [offset, len];
            // SAFETY: BLKDISCARD reads two u64 (start, length) from the pointer.
            unsafe { ioctl::blkdiscard(fd, &range) }.map_err(|e| Error::io("discard", e.into()))?;
        } else {
            use nix::fcntl::{fallocate, FallocateFlags};
            let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
            fallocate(&self.target.file, flags, offset as i64, len as i64)
                .map_err(|e| Error::io("punch hole", e.into()))?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let sqe = opcode::Fsync::new(types::Fixed(0))
            .flags(types::FsyncFlags::DATASYNC)
            .build();
        self.sync_op(sqe, "fsync")
    }

    fn submit_batch(&mut self, batch: &mut [IoRequest<'_>]) -> Result<()> {
        self.run_batch(batch).map_err(|(index, e)| Error::Batch {
            index,
            source: Box::new(e),
        })
    }
}

impl Drop for UringDevice {
    fn drop(&mut self) {
        if self.in_flight > 0 {
            self.drain_or_break();
        }
        // SAFETY: neither field is used again.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
        if !self.broken {
            // SAFETY: the ring that referenced the buffers is gone and nothing is in flight.
            unsafe { ManuallyDrop::drop(&mut self.bufs) };
        }
        // A broken ring's buffers are leaked: the kernel may still write into them.
    }
}

/// The entry for a read or write of `len` bytes at `offset` between `ptr` and the registered
/// file, through registered buffer `fixed` when given; with the op's name for errors.
fn rw_entry(
    dir: FixedOp,
    ptr: *mut u8,
    len: u32,
    offset: u64,
    fixed: Option<u16>,
) -> (squeue::Entry, &'static str) {
    let fd = types::Fixed(0);
    let sqe = match (dir, fixed) {
        (FixedOp::Read, Some(b)) => opcode::ReadFixed::new(fd, ptr, len, b)
            .offset(offset)
            .build(),
        (FixedOp::Read, None) => opcode::Read::new(fd, ptr, len).offset(offset).build(),
        (FixedOp::Write, Some(b)) => opcode::WriteFixed::new(fd, ptr, len, b)
            .offset(offset)
            .build(),
        (FixedOp::Write, None) => opcode::Write::new(fd, ptr, len).offset(offset).build(),
    };
    let name = match dir {
        FixedOp::Read => "read",
        FixedOp::Write => "write",
    };
    (sqe, name)
}

fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

fn create_file(path: &Path, size: u64) -> Result<()> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io("create file", e))?;
    let meta = f.metadata().map_err(|e| Error::io("stat file", e))?;
    if meta.is_file() && meta.len() < size {
        f.set_len(size).map_err(|e| Error::io("size file", e))?;
    }
    Ok(())
}

fn geometry_of(file: &File, path: &Path, is_block: bool, config: &UringConfig) -> Result<Geometry> {
    let fd = file.as_raw_fd();
    let (size, sector) = if is_block {
        let mut size = 0u64;
        // SAFETY: BLKGETSIZE64 writes one u64.
        unsafe { ioctl::blkgetsize64(fd, &mut size) }
            .map_err(|e| Error::io("BLKGETSIZE64", e.into()))?;
        let mut sector: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one int.
        unsafe { ioctl::blksszget(fd, &mut sector) }
            .map_err(|e| Error::io("BLKSSZGET", e.into()))?;
        (size, sector.max(512) as u32)
    } else {
        (
            file.metadata()
                .map_err(|e| Error::io("stat file", e))?
                .len(),
            4096,
        )
    };
    let block_size = config.block_size.unwrap_or(sector);
    if !block_size.is_power_of_two() || block_size < sector || block_size > config.max_io_bytes {
        return Err(Error::Config(format!(
            "block size {block_size} must be a power of two between {sector} and max_io_bytes {}",
            config.max_io_bytes
        )));
    }
    let capacity = size / u64::from(block_size) * u64::from(block_size);
    if capacity == 0 {
        return Err(Error::Config(format!(
            "{} holds less than one {block_size}-byte block",
            path.display()
        )));
    }
    let (placement, handles) = match config.fdp {
        FdpMode::Off => (Placement::None, 1),
        FdpMode::Required => return Err(Error::FdpUnsupported {
            device: path.display().to_string(),
            reason:
                "the io_uring block backend sends no placement directives; open the namespace's \
                         /dev/ngXnY with the NVMe passthrough backend"
                    .into(),
        }),
        FdpMode::Fallback { handles } => {
            tracing::warn!(
                device = %path.display(),
                handles,
                "FDP requested but the io_uring block backend has no placement directives: \
                 all placement handles write to the default placement"
            );
            (Placement::Fallback, handles.max(1))
        }
    };
    Ok(Geometry {
        capacity_bytes: capacity,
        block_size,
        max_io_bytes: config.max_io_bytes,
        placement_handles: handles,
        reclaim_unit_bytes: 0,
        reclaim_groups: 0,
        placement,
    })
}
