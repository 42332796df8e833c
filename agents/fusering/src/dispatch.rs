//! From a request's bytes to a [`Filesystem`] method and back: each opcode's arguments
//! decoded from its fixed argument and payload, the method called with a reply that writes
//! into the transport's buffer.

use std::cell::Cell;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::abi::{op, u32_at, u64_at, InHeader};
use crate::fs::*;
use crate::Handler;

/// `fuse_getattr_in.getattr_flags`: the request names an open file.
const GETATTR_FH: u32 = 1;
/// `fuse_setattr_in.valid` bits.
mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
}
/// `fuse_release_in.release_flags`: the release comes with a flush.
const RELEASE_FLUSH: u32 = 1;
/// `fuse_read_in.read_flags` / `fuse_write_in.write_flags`: `lock_owner` is set.
const READ_LOCKOWNER: u32 = 1 << 1;
const WRITE_LOCKOWNER: u32 = 1 << 1;

/// A [`Filesystem`] behind a transport.
pub struct Dispatcher<F> {
    fs: F,
    conn: OnceLock<Connection>,
}

impl<F: Filesystem> Dispatcher<F> {
    pub fn new(fs: F) -> Self {
        Self {
            fs,
            conn: OnceLock::new(),
        }
    }
}

/// The names in a payload: NUL-terminated strings one after another.
fn names(payload: &[u8]) -> impl Iterator<Item = &OsStr> {
    payload.split(|&b| b == 0).map(OsStr::from_bytes)
}

fn first_name(payload: &[u8]) -> Result<&OsStr, i32> {
    names(payload)
        .next()
        .filter(|n| !n.is_empty())
        .ok_or(libc::EINVAL)
}

fn two_names(payload: &[u8]) -> Result<(&OsStr, &OsStr), i32> {
    let mut it = names(payload);
    match (it.next(), it.next()) {
        (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => Ok((a, b)),
        _ => Err(libc::EINVAL),
    }
}

fn time(secs: u64, nsecs: u32) -> SystemTime {
    let s = secs as i64;
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, nsecs)
    } else {
        UNIX_EPOCH - Duration::from_secs(s.unsigned_abs()) + Duration::from_nanos(u64::from(nsecs))
    }
}

fn setattr_time(valid: u32, set: u32, now: u32, secs: u64, nsecs: u32) -> Option<TimeOrNow> {
    if valid & now != 0 {
        Some(TimeOrNow::Now)
    } else if valid & set != 0 {
        Some(TimeOrNow::SpecificTime(time(secs, nsecs)))
    } else {
        None
    }
}

impl<F: Filesystem> Handler for Dispatcher<F> {
    fn init(&self, conn: Connection, config: &mut KernelConfig) -> io::Result<()> {
        let conn = self.conn.get_or_init(|| conn);
        self.fs.init(conn, config)
    }

    fn handle(
        &self,
        h: &InHeader,
        arg: &[u8],
        payload: &[u8],
        out: &mut [u8],
    ) -> Result<usize, i32> {
        let conn = self.conn.get().ok_or(libc::EIO)?;
        let done = Cell::new(None);
        let sink = Sink {
            out,
            done: &done,
            conn,
        };
        let req = Request {
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
        };
        let ino = INodeNo(h.nodeid);
        let fs = &self.fs;
        match h.opcode {
            op::LOOKUP => fs.lookup(&req, ino, first_name(payload)?, ReplyEntry(sink)),
            op::GETATTR => {
                let fh = (u32_at(arg, 0) & GETATTR_FH != 0).then(|| FileHandle(u64_at(arg, 8)));
                fs.getattr(&req, ino, fh, ReplyAttr(sink))
            }
            op::SETATTR => {
                let valid = u32_at(arg, 0);
                let has = |bit| valid & bit != 0;
                fs.setattr(
                    &req,
                    ino,
                    has(fattr::MODE).then(|| u32_at(arg, 68)),
                    has(fattr::UID).then(|| u32_at(arg, 76)),
                    has(fattr::GID).then(|| u32_at(arg, 80)),
                    has(fattr::SIZE).then(|| u64_at(arg, 16)),
                    setattr_time(
                        valid,
                        fattr::ATIME,
                        fattr::ATIME_NOW,
                        u64_at(arg, 32),
                        u32_at(arg, 56),
                    ),
                    setattr_time(
                        valid,
                        fattr::MTIME,
                        fattr::MTIME_NOW,
                        u64_at(arg, 40),
                        u32_at(arg, 60),
                    ),
                    has(fattr::CTIME).then(|| time(u64_at(arg, 48), u32_at(arg, 64))),
                    has(fattr::FH).then(|| FileHandle(u64_at(arg, 8))),
                    ReplyAttr(sink),
                )
            }
            op::READLINK => fs.readlink(&req, ino, ReplyData(sink)),
            op::SYMLINK => {
                let (name, target) = two_names(payload)?;
                fs.symlink(&req, ino, name, Path::new(target), ReplyEntry(sink))
            }
            op::MKNOD => fs.mknod(
                &req,
                ino,
                first_name(payload)?,
                u32_at(arg, 0),
                u32_at(arg, 8),
                u32_at(arg, 4),
                ReplyEntry(sink),
            ),
            op::MKDIR => fs.mkdir(
                &req,
                ino,
                first_name(payload)?,
                u32_at(arg, 0),
                u32_at(arg, 4),
                ReplyEntry(sink),
            ),
            op::UNLINK => fs.unlink(&req, ino, first_name(payload)?, ReplyEmpty(sink)),
            op::RMDIR => fs.rmdir(&req, ino, first_name(payload)?, ReplyEmpty(sink)),
            op::RENAME | op::RENAME2 => {
                let (name, newname) = two_names(payload)?;
                let flags = if h.opcode == op::RENAME2 {
                    u32_at(arg, 8)
                } else {
                    0
                };
                fs.rename(
                    &req,
                    ino,
                    name,
                    INodeNo(u64_at(arg, 0)),
                    newname,
                    RenameFlags(flags),
                    ReplyEmpty(sink),
                )
            }
            op::LINK => fs.link(
                &req,
                INodeNo(u64_at(arg, 0)),
                ino,
                first_name(payload)?,
                ReplyEntry(sink),
            ),
            op::OPEN => fs.open(&req, ino, OpenFlags(u32_at(arg, 0) as i32), ReplyOpen(sink)),
            op::READ => {
                let lock =
                    (u32_at(arg, 20) & READ_LOCKOWNER != 0).then(|| LockOwner(u64_at(arg, 24)));
                fs.read(
                    &req,
                    ino,
                    FileHandle(u64_at(arg, 0)),
                    u64_at(arg, 8),
                    u32_at(arg, 16),
                    OpenFlags(u32_at(arg, 32) as i32),
                    lock,
                    ReplyData(sink),
                )
            }
            op::WRITE => {
                let size = (u32_at(arg, 16) as usize).min(payload.len());
                let wflags = u32_at(arg, 20);
                let lock = (wflags & WRITE_LOCKOWNER != 0).then(|| LockOwner(u64_at(arg, 24)));
                fs.write(
                    &req,
                    ino,
                    FileHandle(u64_at(arg, 0)),
                    u64_at(arg, 8),
                    &payload[..size],
                    WriteFlags(wflags),
                    OpenFlags(u32_at(arg, 32) as i32),
                    lock,
                    ReplyWrite(sink),
                )
            }
            op::STATFS => fs.statfs(&req, ino, ReplyStatfs(sink)),
            op::RELEASE => fs.release(
                &req,
                ino,
                FileHandle(u64_at(arg, 0)),
                OpenFlags(u32_at(arg, 8) as i32),
                Some(LockOwner(u64_at(arg, 16))),
                u32_at(arg, 12) & RELEASE_FLUSH != 0,
                ReplyEmpty(sink),
            ),
            op::FSYNC => fs.fsync(
                &req,
                ino,
                FileHandle(u64_at(arg, 0)),
                u32_at(arg, 8) & 1 != 0,
                ReplyEmpty(sink),
            ),
            op::FLUSH => fs.flush(
                &req,
                ino,
                FileHandle(u64_at(arg, 0)),
                LockOwner(u64_at(arg, 16)),
                ReplyEmpty(sink),
            ),
            op::OPENDIR => fs.opendir(&req, ino, OpenFlags(u32_at(arg, 0) as i32), ReplyOpen(sink)),
            op::READDIR => {
                let size = u32_at(arg, 16) as usize;
                fs.readdir(
                    &req,
                    ino,
                    FileHandle(u64_at(arg, 0)),
                    u64_at(arg, 8),
                    ReplyDirectory { sink, size, len: 0 },
                )
            }
            op::RELEASEDIR => fs.releasedir(
                &req,
                ino,
                FileHandle(u64_at(arg, 0)),
                OpenFlags(u32_at(arg, 8) as i32),
                ReplyEmpty(sink),
            ),
            op::ACCESS => fs.access(
                &req,
                ino,
                AccessFlags(u32_at(arg, 0) as i32),
                ReplyEmpty(sink),
            ),
            op::CREATE => fs.create(
                &req,
                ino,
                first_name(payload)?,
                u32_at(arg, 4),
                u32_at(arg, 8),
                u32_at(arg, 0) as i32,
                ReplyCreate(sink),
            ),
            op::FALLOCATE => fs.fallocate(
                &req,
                ino,
                FileHandle(u64_at(arg, 0)),
                u64_at(arg, 8),
                u64_at(arg, 16),
                u32_at(arg, 24) as i32,
                ReplyEmpty(sink),
            ),
            op::COPY_FILE_RANGE => fs.copy_file_range(
                &req,
                ino,
                FileHandle(u64_at(arg, 0)),
                u64_at(arg, 8),
                INodeNo(u64_at(arg, 16)),
                FileHandle(u64_at(arg, 24)),
                u64_at(arg, 32),
                u64_at(arg, 40),
                CopyFileRangeFlags(u64_at(arg, 48)),
                ReplyWrite(sink),
            ),
            op::DESTROY => sink_ok(sink),
            _ => return Err(libc::ENOSYS),
        }
        // A method that returned without answering: the request fails rather than hangs.
        done.take().unwrap_or(Err(libc::EIO))
    }
}

fn sink_ok(sink: Sink) {
    ReplyEmpty(sink).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{put_u32, put_u64};
    use std::sync::{Arc, Mutex};

    /// Records what each method was called with and answers simply.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Recorder {
        fn said(&self, s: String) {
            self.0.lock().unwrap().push(s)
        }
    }

    impl Filesystem for Arc<Recorder> {
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
            self.said(format!(
                "setattr {} {mode:?} {uid:?} {gid:?} {size:?} {atime:?} {mtime:?} {fh:?}",
                ino.0
            ));
            reply.error(Errno::EINVAL)
        }
        fn rename(
            &self,
            _r: &Request,
            p: INodeNo,
            n: &OsStr,
            np: INodeNo,
            nn: &OsStr,
            f: RenameFlags,
            reply: ReplyEmpty,
        ) {
            self.said(format!("rename {} {n:?} {} {nn:?} {}", p.0, np.0, f.0));
            reply.ok()
        }
        fn readdir(
            &self,
            _r: &Request,
            _i: INodeNo,
            _fh: FileHandle,
            offset: u64,
            mut reply: ReplyDirectory,
        ) {
            for (i, name) in ["a", "bbbbbbbbb", "c"]
                .iter()
                .enumerate()
                .skip(offset as usize)
            {
                if reply.add(
                    INodeNo(10 + i as u64),
                    i as u64 + 1,
                    FileType::RegularFile,
                    name,
                ) {
                    break;
                }
            }
            reply.ok()
        }
        fn unlink(&self, _r: &Request, _p: INodeNo, _n: &OsStr, _reply: ReplyEmpty) {
            // Never answers: the dispatcher must fail the request, not hang it.
        }
    }

    fn dispatcher() -> (Dispatcher<Arc<Recorder>>, Arc<Recorder>) {
        let rec = Arc::new(Recorder::default());
        let d = Dispatcher::new(rec.clone());
        let mut kc = KernelConfig::new(0, 0, 1 << 20);
        d.init(
            Connection {
                dev: std::sync::Weak::new(),
            },
            &mut kc,
        )
        .unwrap();
        (d, rec)
    }

    fn header(opcode: u32, nodeid: u64) -> InHeader {
        InHeader {
            len: 0,
            opcode,
            unique: 9,
            nodeid,
            uid: 1,
            gid: 2,
            pid: 3,
        }
    }

    #[test]
    fn setattr_passes_only_the_valid_fields() {
        let (d, rec) = dispatcher();
        let mut arg = [0u8; 88];
        put_u32(
            &mut arg,
            0,
            fattr::MODE | fattr::SIZE | fattr::MTIME_NOW | fattr::ATIME,
        );
        put_u64(&mut arg, 16, 4096);
        put_u64(&mut arg, 32, 5);
        put_u32(&mut arg, 56, 7);
        put_u32(&mut arg, 68, 0o640);
        put_u32(&mut arg, 76, 1000);
        let mut out = vec![0u8; 4096];
        assert_eq!(
            d.handle(&header(op::SETATTR, 4), &arg, &[], &mut out),
            Err(libc::EINVAL)
        );
        let said = rec.0.lock().unwrap().pop().unwrap();
        let at = UNIX_EPOCH + Duration::new(5, 7);
        assert_eq!(said, format!("setattr 4 Some(416) None None Some(4096) Some(SpecificTime({at:?})) Some(Now) None"));
    }

    #[test]
    fn rename2_carries_its_flags_and_both_names() {
        let (d, rec) = dispatcher();
        let mut arg = [0u8; 16];
        put_u64(&mut arg, 0, 8);
        put_u32(&mut arg, 8, libc::RENAME_NOREPLACE);
        let mut out = vec![0u8; 64];
        assert_eq!(
            d.handle(&header(op::RENAME2, 1), &arg, b"from\0to\0", &mut out),
            Ok(0)
        );
        assert_eq!(
            rec.0.lock().unwrap().pop().unwrap(),
            "rename 1 \"from\" 8 \"to\" 1"
        );
        assert_eq!(
            d.handle(&header(op::RENAME2, 1), &arg, b"from\0", &mut out),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn readdir_pads_entries_and_stops_at_the_size_asked() {
        let (d, _) = dispatcher();
        let mut arg = [0u8; 40];
        put_u32(&mut arg, 16, 4096);
        let mut out = vec![0u8; 4096];
        // 24-byte header + name, each padded to 8: a 32, bbbbbbbbb 40, c 32.
        assert_eq!(
            d.handle(&header(op::READDIR, 1), &arg, &[], &mut out),
            Ok(104)
        );
        assert_eq!(
            (u64_at(&out, 0), u64_at(&out, 8), u32_at(&out, 16)),
            (10, 1, 1)
        );
        assert_eq!(u32_at(&out, 20), libc::S_IFREG >> 12);
        assert_eq!(&out[32 + 24..32 + 33], b"bbbbbbbbb");
        // Room for the first two only.
        put_u32(&mut arg, 16, 80);
        assert_eq!(
            d.handle(&header(op::READDIR, 1), &arg, &[], &mut out),
            Ok(72)
        );
    }

    #[test]
    fn unanswered_unknown_and_malformed_requests_fail() {
        let (d, _) = dispatcher();
        let mut out = vec![0u8; 64];
        assert_eq!(
            d.handle(&header(op::UNLINK, 1), &[], b"x\0", &mut out),
            Err(libc::EIO)
        );
        assert_eq!(
            d.handle(&header(op::UNLINK, 1), &[], b"", &mut out),
            Err(libc::EINVAL)
        );
        assert_eq!(
            d.handle(&header(4242, 1), &[], &[], &mut out),
            Err(libc::ENOSYS)
        );
        // The defaults: no such operation, and directories opened without state.
        assert_eq!(
            d.handle(&header(op::LOOKUP, 1), &[], b"x\0", &mut out),
            Err(libc::ENOSYS)
        );
        assert_eq!(
            d.handle(&header(op::OPENDIR, 1), &[0; 8], &[], &mut out),
            Ok(16)
        );
    }
}
