//! The forwarding frame decoder (`agents/fs/src/remote/frame.rs`): a stream of bytes from a
//! peer is read frame by frame until it fails. Every frame read re-encodes to exactly the
//! bytes it was read from; a failure is `InvalidData` or `UnexpectedEof`; a length out of
//! range is refused after the 8-byte head, before the body is read or allocated.

use std::io::{self, Read};

use lachesis_fs::remote::frame::{Frame, MAX_FRAME};

/// Head (length, crc) and the fixed part of a body.
const HEAD: usize = 8;
const FIXED: usize = 35;

/// Counts what the decoder consumed.
struct Counting<'a> {
    rest: &'a [u8],
    read: usize,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.rest.read(buf)?;
        self.read += n;
        Ok(n)
    }
}

pub fn check(data: &[u8]) {
    let mut r = Counting {
        rest: data,
        read: 0,
    };
    loop {
        let start = r.read;
        let (got, largest) = crate::alloc::largest_during(|| Frame::read_from(&mut r));
        // The largest body a length in range may announce.
        let bound = MAX_FRAME + FIXED + u16::MAX as usize + 2 * HEAD;
        assert!(largest <= bound, "a frame read allocated {largest} bytes");
        match got {
            Ok(f) => {
                let bytes = &data[start..r.read];
                assert_eq!(f.encode(), bytes, "frame {f:?} re-encodes to other bytes");
            }
            Err(e) => {
                match e.kind() {
                    io::ErrorKind::UnexpectedEof => {}
                    io::ErrorKind::InvalidData => {
                        if e.to_string().contains("out of range") {
                            assert_eq!(r.read - start, HEAD, "read past a refused length");
                        }
                    }
                    other => panic!("frame error of kind {other:?}: {e}"),
                }
                return;
            }
        }
    }
}
