//! The wire format of agent-to-agent forwarding: one frame per request or reply,
//! `len: u32 | crc32c(body): u32 | body`, all little endian. The body carries the request id
//! (a reply names the request it answers, so replies may come back in any order), the op, a
//! status (0 or an errno, replies only), an offset, a length, the path and the data.
//!
//! Two-level caches with demotion (Moirai's global LRU, `cached_store.rs`): a `Read` whose
//! request status has [`READ_LEND`] set comes from a level 1 that keeps the block and will
//! demote it on eviction. A server-level stage that is `exclusive` then answers without
//! keeping a copy and lends the block: the reply's `offset` is a lend token (0: not lent).
//! When level 1 evicts the clean block it sends `Demote` (path, the block's offset, `len` =
//! the token, `data` = the block); the server level takes it only while the lend stands (no
//! write, truncate or rename of the file since, nor a later lend of the block), so a late
//! demotion never installs stale bytes. The reply's `len` is 1 if taken, 0 if not. Servers
//! that know nothing of this ignore the flag and answer `Demote` with EINVAL.

use std::io::{self, Read, Write};

/// Frames larger than this are refused before anything is allocated (a corrupted length must
/// not make a peer allocate gigabytes).
pub const MAX_FRAME: usize = 16 << 20;
const FIXED: usize = 8 + 1 + 4 + 8 + 8 + 2 + 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Read = 1,
    Write = 2,
    Fsync = 3,
    Truncate = 4,
    Getattr = 5,
    Rename = 6,
    /// A clean block level 1 evicted, offered to the server level (see the module doc).
    Demote = 7,
    Reply = 0x80,
}

/// Request status bit of a `Read`: the reader's level 1 keeps the block and demotes it.
pub const READ_LEND: i32 = 1;

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Read,
            2 => Op::Write,
            3 => Op::Fsync,
            4 => Op::Truncate,
            5 => Op::Getattr,
            6 => Op::Rename,
            7 => Op::Demote,
            0x80 => Op::Reply,
            _ => return None,
        })
    }
}

/// A request or a reply. `len` is the read length, the truncate size, or (replies to getattr)
/// the file size; `data` the bytes written or read, or the new name of a rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: u64,
    pub op: Op,
    pub status: i32,
    pub offset: u64,
    pub len: u64,
    pub path: String,
    pub data: Vec<u8>,
}

impl Frame {
    pub fn request(op: Op, path: &str, offset: u64, len: u64, data: Vec<u8>) -> Frame {
        Frame {
            id: 0,
            op,
            status: 0,
            offset,
            len,
            path: path.to_string(),
            data,
        }
    }

    pub fn reply(id: u64, status: i32, len: u64, data: Vec<u8>) -> Frame {
        Frame {
            id,
            op: Op::Reply,
            status,
            offset: 0,
            len,
            path: String::new(),
            data,
        }
    }

    /// The whole frame, ready for one `write_all`.
    pub fn encode(&self) -> Vec<u8> {
        let body_len = FIXED + self.path.len() + self.data.len();
        let mut out = Vec::with_capacity(8 + body_len);
        out.extend_from_slice(&(body_len as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.push(self.op as u8);
        out.extend_from_slice(&self.status.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&(self.path.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.data.len() as u32).to_le_bytes());
        out.extend_from_slice(self.path.as_bytes());
        out.extend_from_slice(&self.data);
        let crc = crc32c::crc32c(&out[8..]);
        out[4..8].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.encode())
    }

    /// Reads one frame; `InvalidData` if it is too large, fails its checksum or is malformed.
    /// `UnexpectedEof` on a clean close between frames.
    pub fn read_from(r: &mut impl Read) -> io::Result<Frame> {
        let mut head = [0u8; 8];
        r.read_exact(&mut head)?;
        let len = u32::from_le_bytes(head[..4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().unwrap());
        if !(FIXED..=MAX_FRAME + FIXED + u16::MAX as usize).contains(&len) {
            return Err(bad(format!("frame length {len} out of range")));
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        if crc32c::crc32c(&body) != crc {
            return Err(bad("frame crc32c mismatch (corrupted in transit)".into()));
        }
        Self::decode_body(&body)
    }

    fn decode_body(b: &[u8]) -> io::Result<Frame> {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let id = u64_at(0);
        let op = Op::from_u8(b[8]).ok_or_else(|| bad(format!("unknown op {}", b[8])))?;
        let status = i32::from_le_bytes(b[9..13].try_into().unwrap());
        let offset = u64_at(13);
        let len = u64_at(21);
        let path_len = u16::from_le_bytes(b[29..31].try_into().unwrap()) as usize;
        let data_len = u32::from_le_bytes(b[31..35].try_into().unwrap()) as usize;
        if FIXED + path_len + data_len != b.len() {
            return Err(bad("frame lengths disagree".into()));
        }
        let path = std::str::from_utf8(&b[FIXED..FIXED + path_len])
            .map_err(|_| bad("frame path is not UTF-8".into()))?
            .to_string();
        Ok(Frame {
            id,
            op,
            status,
            offset,
            len,
            path,
            data: b[FIXED + path_len..].to_vec(),
        })
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Frame {
        let mut f = Frame::request(Op::Write, "/db/main", 4096, 3, b"abc".to_vec());
        f.id = 42;
        f
    }

    #[test]
    fn frames_round_trip() {
        for f in [
            sample(),
            Frame::reply(7, libc::ENOENT, 9, vec![]),
            Frame::request(Op::Getattr, "/x", 0, 0, vec![]),
            Frame {
                status: READ_LEND,
                ..Frame::request(Op::Read, "/x", 4096, 4096, vec![])
            },
            Frame::request(Op::Demote, "/x", 8192, 17, vec![3; 4096]),
        ] {
            let bytes = f.encode();
            assert_eq!(Frame::read_from(&mut &bytes[..]).unwrap(), f);
        }
    }

    #[test]
    fn a_corrupted_frame_is_rejected() {
        let good = sample().encode();
        // Every single-bit flip in the body (data, path, id, op, offsets) fails the checksum.
        for i in 8..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x10;
            let e = Frame::read_from(&mut &b[..]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "byte {i}");
            assert!(e.to_string().contains("crc32c"), "byte {i}: {e}");
        }
        // A corrupted length is refused before allocating.
        let mut b = good.clone();
        b[3] = 0xff;
        let e = Frame::read_from(&mut &b[..]).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        // A truncated frame is an EOF, not a frame.
        let e = Frame::read_from(&mut &good[..good.len() - 1]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
