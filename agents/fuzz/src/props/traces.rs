//! The trace readers (`agents/mrc/src/trace/`): any file, of any of the five formats, plain
//! or zstd-compressed, reads as requests until the end or until one error that names the file
//! and place, after which the reader yields nothing more. Oracle traces have an exact model
//! (24-byte records); the text readers' block sizes are fixed by their formats.

use std::io::Write;

use lachesis_mrc::trace::{self, Format, Progress};

/// Requests read per input at most: one line may stand for 2^24 blocks, and reading that many
/// proves nothing more than reading this many.
pub const MAX_REQUESTS: usize = 1 << 16;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// zstd's decoder allocates its window, up to 2^27 bytes by default, whatever the input says.
const ZSTD_ALLOC_BOUND: usize = (1 << 27) + (4 << 20);

pub fn check(format: Format, data: &[u8]) {
    let mut file = tempfile::Builder::new()
        .prefix("lachesis-fuzz-trace")
        .tempfile()
        .expect("a temporary file");
    file.write_all(data).expect("write the trace");
    let path = file.path();
    let zstd = data.starts_with(&ZSTD_MAGIC);
    let ((), largest) = crate::alloc::largest_during(|| read(format, path, data, zstd));
    // The line buffer and the read buffer: the input's length and a fixed 64 KiB.
    let bound = if zstd {
        ZSTD_ALLOC_BOUND
    } else {
        2 * data.len() + (256 << 10)
    };
    assert!(
        largest <= bound,
        "{format:?}: reading {} bytes allocated a block of {largest}",
        data.len()
    );
}

fn read(format: Format, path: &std::path::Path, data: &[u8], zstd: bool) {
    let shown = path.display().to_string();
    let mut requests = match trace::open(path, format, Progress::Hidden) {
        Ok(r) => r,
        Err(e) => {
            assert!(e.to_string().starts_with(&shown), "{e}");
            return;
        }
    };
    let mut n = 0usize;
    let failed = loop {
        match requests.next() {
            None => break false,
            Some(Ok(r)) => {
                match format {
                    Format::Oracle if !zstd => {
                        let rec = &data[24 * n..24 * n + 24];
                        assert_eq!(r.key, u64::from_le_bytes(rec[4..12].try_into().unwrap()));
                        assert_eq!(r.size, u32::from_le_bytes(rec[12..16].try_into().unwrap()));
                    }
                    Format::Arc => assert_eq!(r.size, 512),
                    Format::Msr => assert_eq!(r.size, 4096),
                    _ => {}
                }
                n += 1;
                if n == MAX_REQUESTS {
                    return;
                }
            }
            Some(Err(e)) => {
                let text = e.to_string();
                assert!(
                    text.starts_with(&shown),
                    "error does not name the file: {text}"
                );
                assert!(
                    text.contains(": line ") || text.contains(": record "),
                    "error does not say where: {text}"
                );
                break true;
            }
        }
    };
    assert!(
        requests.next().is_none(),
        "{format:?}: the reader went on after its end or error"
    );
    if format == Format::Oracle && !zstd {
        assert_eq!(n, data.len() / 24, "oracle records read");
        assert_eq!(
            failed,
            !data.len().is_multiple_of(24),
            "a truncated oracle record"
        );
    }
}

pub fn arc(data: &[u8]) {
    check(Format::Arc, data)
}

pub fn cloudphysics(data: &[u8]) {
    check(Format::CloudPhysics, data)
}

pub fn msr(data: &[u8]) {
    check(Format::Msr, data)
}

pub fn oracle(data: &[u8]) {
    check(Format::Oracle, data)
}

pub fn lines(data: &[u8]) {
    check(Format::Lines, data)
}
