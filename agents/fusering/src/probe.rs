//! The probe's file system: a root directory holding one file, `data`, whose bytes are a
//! function of their offset and whose writes are acknowledged and dropped. It does no IO, so
//! what a request costs on it is what the transport costs.

use crate::abi::{self, fopen, op, Attr, InHeader};
use crate::Handler;

pub const ROOT: u64 = 1;
pub const DATA: u64 = 2;
pub const NAME: &str = "data";
/// Seconds the kernel may keep entries and attributes: the probe's never change.
const TTL: u64 = 3600;

pub struct ProbeFs {
    /// Bytes of `data`.
    pub size: u64,
}

/// The byte at `offset` of `data`: each 4 KiB block is filled with its index's low byte.
pub fn byte_at(offset: u64) -> u8 {
    (offset / 4096) as u8
}

impl ProbeFs {
    fn attr(&self, ino: u64) -> Option<Attr> {
        match ino {
            ROOT => Some(Attr {
                ino,
                size: 0,
                mode: libc::S_IFDIR | 0o755,
                nlink: 2,
                uid: 0,
                gid: 0,
            }),
            DATA => Some(Attr {
                ino,
                size: self.size,
                mode: libc::S_IFREG | 0o666,
                nlink: 1,
                uid: 0,
                gid: 0,
            }),
            _ => None,
        }
    }

    fn read(&self, arg: &[u8], out: &mut [u8]) -> usize {
        let (offset, size) = (abi::u64_at(arg, 8), abi::u32_at(arg, 16) as u64);
        let n = size
            .min(self.size.saturating_sub(offset))
            .min(out.len() as u64) as usize;
        let mut pos = 0;
        while pos < n {
            let at = offset + pos as u64;
            let run = ((4096 - at % 4096) as usize).min(n - pos);
            out[pos..pos + run].fill(byte_at(at));
            pos += run;
        }
        n
    }
}

impl Handler for ProbeFs {
    fn handle(
        &self,
        h: &InHeader,
        arg: &[u8],
        payload: &[u8],
        out: &mut [u8],
    ) -> Result<usize, i32> {
        match h.opcode {
            op::LOOKUP => {
                let name = payload.split(|&b| b == 0).next().unwrap_or_default();
                if h.nodeid != ROOT || name != NAME.as_bytes() {
                    return Err(libc::ENOENT);
                }
                let a = self.attr(DATA).expect("data exists");
                out[..abi::ENTRY_OUT].fill(0);
                abi::put_u64(out, 0, DATA);
                abi::put_u64(out, 16, TTL);
                abi::put_u64(out, 24, TTL);
                a.encode(&mut out[40..]);
                Ok(abi::ENTRY_OUT)
            }
            op::GETATTR => {
                let a = self.attr(h.nodeid).ok_or(libc::ENOENT)?;
                out[..abi::ATTR_OUT].fill(0);
                abi::put_u64(out, 0, TTL);
                a.encode(&mut out[16..]);
                Ok(abi::ATTR_OUT)
            }
            op::OPEN | op::OPENDIR => {
                out[..abi::OPEN_OUT].fill(0);
                if h.opcode == op::OPEN {
                    abi::put_u32(out, 8, fopen::DIRECT_IO | fopen::PARALLEL_DIRECT_WRITES);
                }
                Ok(abi::OPEN_OUT)
            }
            op::READ => Ok(self.read(arg, out)),
            op::WRITE => {
                out[..abi::WRITE_OUT].fill(0);
                abi::put_u32(out, 0, abi::u32_at(arg, 16));
                Ok(abi::WRITE_OUT)
            }
            op::STATFS => {
                out[..abi::STATFS_OUT].fill(0);
                abi::put_u32(out, 40, 4096); // bsize
                abi::put_u32(out, 44, 255); // namelen
                abi::put_u32(out, 48, 4096); // frsize
                Ok(abi::STATFS_OUT)
            }
            op::READDIR | op::RELEASE | op::RELEASEDIR | op::FLUSH | op::DESTROY => Ok(0),
            _ => Err(libc::ENOSYS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(opcode: u32, nodeid: u64) -> InHeader {
        InHeader {
            len: 0,
            opcode,
            unique: 1,
            nodeid,
            uid: 0,
            gid: 0,
            pid: 0,
        }
    }

    #[test]
    fn reads_are_the_pattern_and_stop_at_the_end() {
        let fs = ProbeFs { size: 3 * 4096 };
        let mut arg = [0u8; 40];
        abi::put_u64(&mut arg, 8, 4096 - 2);
        abi::put_u32(&mut arg, 16, 8192);
        let mut out = vec![0u8; 16384];
        let n = fs
            .handle(&header(op::READ, DATA), &arg, &[], &mut out)
            .unwrap();
        assert_eq!(n, 8192);
        assert_eq!(&out[..3], &[0, 0, 1]);
        abi::put_u64(&mut arg, 8, 3 * 4096 - 10);
        assert_eq!(
            fs.handle(&header(op::READ, DATA), &arg, &[], &mut out),
            Ok(10)
        );
        assert!(out[..10].iter().all(|&b| b == 2));
    }

    #[test]
    fn only_data_is_found() {
        let fs = ProbeFs { size: 4096 };
        let mut out = vec![0u8; 4096];
        assert_eq!(
            fs.handle(&header(op::LOOKUP, ROOT), &[], b"data\0", &mut out),
            Ok(abi::ENTRY_OUT)
        );
        assert_eq!(abi::u64_at(&out, 0), DATA);
        assert_eq!(
            fs.handle(&header(op::LOOKUP, ROOT), &[], b"other\0", &mut out),
            Err(libc::ENOENT)
        );
        assert_eq!(
            fs.handle(&header(op::GETATTR, 9), &[], &[], &mut out),
            Err(libc::ENOENT)
        );
        assert_eq!(
            fs.handle(&header(1000, ROOT), &[], &[], &mut out),
            Err(libc::ENOSYS)
        );
    }
}
