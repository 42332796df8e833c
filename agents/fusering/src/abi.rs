//! The parts of the kernel's FUSE ABI (`include/uapi/linux/fuse.h`) this crate reads and
//! writes, as byte layouts. Fields are read and written by offset in native byte order, so no
//! struct is ever cast from a buffer the kernel filled (no alignment or validity questions).
//!
//! fuser keeps its ABI types private, and Debian 12's headers predate FUSE over io_uring
//! (ABI 7.42), so the few layouts needed are written out here, each with its size checked by a
//! test against the header's.

/// Opcodes (`enum fuse_opcode`).
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const RENAME2: u32 = 45;
    pub const COPY_FILE_RANGE: u32 = 47;
}

/// `fuse_init_in.flags` / `fuse_init_out.flags` bits (the low word; `flags2` is the high).
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const INIT_EXT: u64 = 1 << 30;
    /// Since ABI 7.42: the connection may move its requests to io_uring.
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// `fuse_open_out.open_flags` bits.
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
}

/// `struct fuse_in_header`: 40 bytes.
pub const IN_HEADER: usize = 40;
/// `struct fuse_out_header`: 16 bytes.
pub const OUT_HEADER: usize = 16;
/// `struct fuse_init_out` for minor ≥ 23: 64 bytes.
pub const INIT_OUT: usize = 64;
/// `struct fuse_attr`: 88 bytes.
pub const ATTR: usize = 88;
/// `struct fuse_entry_out`: 40 bytes then the attributes.
pub const ENTRY_OUT: usize = 40 + ATTR;
/// `struct fuse_attr_out`: 16 bytes then the attributes.
pub const ATTR_OUT: usize = 16 + ATTR;
/// `struct fuse_open_out`.
pub const OPEN_OUT: usize = 16;
/// `struct fuse_write_out`.
pub const WRITE_OUT: usize = 8;
/// `struct fuse_statfs_out` (`struct fuse_kstatfs`).
pub const STATFS_OUT: usize = 80;

/// The fixed argument (`in_args[0]`) of each opcode this crate's users answer, as the
/// `/dev/fuse` read path concatenates it before the rest (names, write data). Over io_uring the
/// kernel hands it apart (`op_in`), so the two transports give a handler the same split.
pub fn fixed_arg_len(opcode: u32) -> usize {
    match opcode {
        op::GETATTR | op::MKNOD | op::FSYNC | op::CREATE | op::RENAME2 => 16,
        op::OPEN | op::OPENDIR | op::MKDIR | op::RENAME | op::LINK | op::ACCESS => 8,
        op::FORGET | op::BATCH_FORGET | op::INTERRUPT => 8,
        op::READ | op::WRITE | op::READDIR => 40,
        op::RELEASE | op::RELEASEDIR | op::FLUSH => 24,
        op::FALLOCATE => 32,
        op::COPY_FILE_RANGE => 56,
        op::INIT => 64,
        op::SETATTR => 88,
        // LOOKUP, SYMLINK, UNLINK, RMDIR: names only; READLINK, STATFS, DESTROY: nothing.
        _ => 0,
    }
}

/// Reads a native-endian u32 at `off` (0 when the buffer is short: a short argument reads as
/// zeros, which every handler treats as an invalid request rather than a panic).
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map(|s| u32::from_ne_bytes(s.try_into().expect("4 bytes")))
        .unwrap_or(0)
}

/// Reads a native-endian u64 at `off` (0 when the buffer is short).
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map(|s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
        .unwrap_or(0)
}

pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_ne_bytes());
}

pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

/// `struct fuse_in_header`, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InHeader {
    /// Bytes of the whole request: this header, the fixed argument and the payload.
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl InHeader {
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < IN_HEADER {
            return None;
        }
        Some(Self {
            len: u32_at(b, 0),
            opcode: u32_at(b, 4),
            unique: u64_at(b, 8),
            nodeid: u64_at(b, 16),
            uid: u32_at(b, 24),
            gid: u32_at(b, 28),
            pid: u32_at(b, 32),
        })
    }
}

/// Writes `struct fuse_out_header` into `b[..16]`: `len` counts the header too; `error` is 0
/// or a negated errno.
pub fn encode_out_header(b: &mut [u8], len: u32, error: i32, unique: u64) {
    put_u32(b, 0, len);
    put_u32(b, 4, error as u32);
    put_u64(b, 8, unique);
}

/// The attributes of a file, as `struct fuse_attr` carries them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Attr {
    /// Writes `struct fuse_attr` into `b[..88]` (times zero, 4 KiB blocks).
    pub fn encode(&self, b: &mut [u8]) {
        b[..ATTR].fill(0);
        put_u64(b, 0, self.ino);
        put_u64(b, 8, self.size);
        put_u64(b, 16, self.size.div_ceil(512));
        put_u32(b, 60, self.mode);
        put_u32(b, 64, self.nlink);
        put_u32(b, 68, self.uid);
        put_u32(b, 72, self.gid);
        put_u32(b, 80, 4096);
    }
}

/// FUSE over io_uring (ABI 7.42): the per-entry header buffer the kernel fills on fetch and
/// reads on commit (`struct fuse_uring_req_header`).
pub mod uring {
    /// `in_out`: the in header on fetch, the out header on commit.
    pub const IN_OUT: usize = 0;
    pub const IN_OUT_LEN: usize = 128;
    /// `op_in`: the opcode's fixed argument.
    pub const OP_IN: usize = 128;
    pub const OP_IN_LEN: usize = 128;
    /// `ring_ent_in_out`: flags, commit_id, payload_sz, padding, reserved.
    pub const ENT_IN_OUT: usize = 256;
    pub const COMMIT_ID: usize = ENT_IN_OUT + 8;
    pub const PAYLOAD_SZ: usize = ENT_IN_OUT + 16;
    /// `sizeof(struct fuse_uring_req_header)`.
    pub const HEADER_LEN: usize = 288;

    /// `enum fuse_uring_cmd`, carried in the SQE's `cmd_op`.
    pub const CMD_REGISTER: u32 = 1;
    pub const CMD_COMMIT_AND_FETCH: u32 = 2;
    /// Header and payload: the iovec count a REGISTER must carry in the SQE's `len`.
    pub const IOV_SEGS: u32 = 2;

    /// `struct fuse_uring_cmd_req` (flags, commit_id, qid) in the SQE's 80-byte command area.
    pub fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
        let mut c = [0u8; 80];
        c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        c[16..18].copy_from_slice(&qid.to_ne_bytes());
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_kernel_header() {
        // Sizes from include/uapi/linux/fuse.h (ABI 7.42).
        assert_eq!(ENTRY_OUT, 128);
        assert_eq!(ATTR_OUT, 104);
        assert_eq!(uring::HEADER_LEN, 128 + 128 + 32);
        assert_eq!(uring::ENT_IN_OUT + 32, uring::HEADER_LEN);
    }

    #[test]
    fn header_round_trip() {
        let mut b = [0u8; IN_HEADER];
        put_u32(&mut b, 0, 80);
        put_u32(&mut b, 4, op::READ);
        put_u64(&mut b, 8, 7);
        put_u64(&mut b, 16, 2);
        let h = InHeader::decode(&b).unwrap();
        assert_eq!((h.len, h.opcode, h.unique, h.nodeid), (80, op::READ, 7, 2));
        assert!(InHeader::decode(&b[..39]).is_none());
    }

    #[test]
    fn short_buffers_read_as_zero() {
        assert_eq!(u32_at(&[1, 2], 0), 0);
        assert_eq!(u64_at(&[0; 12], 8), 0);
    }

    #[test]
    fn cmd_req_places_commit_id_and_queue() {
        let c = uring::cmd_req(0x0102, 3);
        assert_eq!(u64_at(&c, 8), 0x0102);
        assert_eq!(u16::from_ne_bytes([c[16], c[17]]), 3);
        assert!(c[..8].iter().chain(&c[18..]).all(|&x| x == 0));
    }
}
