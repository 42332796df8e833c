//! MSR Cambridge block traces (Narayanan et al., FAST'08): CSV rows
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, no header
//! (one is skipped if present). Keys are 4 KiB blocks: a request expands to
//! every block it touches. Each file is one volume, so host and disk are not
//! part of the key.

use super::{field, Lines, Request};
use crate::error::TraceError;
use crate::estimator::Op;
use std::io::BufRead;
use std::path::PathBuf;

const BLOCK: u64 = 4096;
const MAX_BLOCKS: u64 = 1 << 24;

pub(super) struct MsrReader {
    lines: Lines,
    next_block: u64,
    left: u64,
    op: Op,
    time: u64,
}

impl MsrReader {
    pub fn new(path: PathBuf, input: Box<dyn BufRead>) -> Self {
        MsrReader {
            lines: Lines::new(path, input),
            next_block: 0,
            left: 0,
            op: Op::Read,
            time: 0,
        }
    }

    /// `Ok(None)` for a blank or header line.
    fn parse(&self) -> Result<Option<(u64, u64, Op, u64)>, String> {
        let text = std::str::from_utf8(&self.lines.buf).map_err(|_| "not text".to_string())?;
        if text.trim().is_empty() || (self.lines.line == 1 && text.starts_with("Timestamp")) {
            return Ok(None);
        }
        let f: Vec<&str> = text.split(',').collect();
        if f.len() != 7 {
            return Err(format!("expected 7 fields (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), found {}", f.len()));
        }
        let time: u64 = field(Some(f[0].as_bytes()), "Timestamp")?;
        let op = match f[3].trim().to_ascii_lowercase().as_str() {
            "read" => Op::Read,
            "write" => Op::Write,
            other => return Err(format!("field Type: {other:?} is neither Read nor Write")),
        };
        let offset: u64 = field(Some(f[4].as_bytes()), "Offset")?;
        let size: u64 = field(Some(f[5].as_bytes()), "Size")?;
        let first = offset / BLOCK;
        let end = offset.checked_add(size).ok_or("Offset + Size overflows")?;
        // A zero-length request still touches the block at its offset.
        let last = if size == 0 { first } else { (end - 1) / BLOCK };
        let n = last - first + 1;
        if n > MAX_BLOCKS {
            return Err(format!("request of {size} bytes is implausibly large"));
        }
        Ok(Some((first, n, op, time)))
    }
}

impl Iterator for MsrReader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.left == 0 {
            match self.lines.advance() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
            match self.parse() {
                Ok(None) => {}
                Ok(Some((first, n, op, time))) => {
                    self.next_block = first;
                    self.left = n;
                    self.op = op;
                    self.time = time;
                }
                Err(reason) => return Some(Err(self.lines.fail(reason))),
            }
        }
        let key = self.next_block;
        self.next_block += 1;
        self.left -= 1;
        Some(Ok(Request {
            key,
            size: BLOCK as u32,
            op: self.op,
            time: self.time,
        }))
    }
}
