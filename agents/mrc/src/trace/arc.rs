//! ARC traces (Megiddo and Modha, FAST'03): lines `start nblocks ignore
//! reqno` of 512-byte blocks; each line stands for `nblocks` references,
//! `start..start + nblocks`.

use super::{field, Lines, Request};
use crate::error::TraceError;
use crate::estimator::Op;
use std::io::BufRead;
use std::path::PathBuf;

const BLOCK: u32 = 512;
/// Larger requests are taken as corruption rather than expanded into
/// billions of references (the traces' largest is a few hundred).
const MAX_BLOCKS: u64 = 1 << 24;

pub(super) struct ArcReader {
    lines: Lines,
    next_block: u64,
    left: u64,
    time: u64,
}

impl ArcReader {
    pub fn new(path: PathBuf, input: Box<dyn BufRead>) -> Self {
        ArcReader {
            lines: Lines::new(path, input),
            next_block: 0,
            left: 0,
            time: 0,
        }
    }

    fn parse(&self) -> Result<Option<(u64, u64, u64)>, String> {
        let text = std::str::from_utf8(&self.lines.buf).map_err(|_| "not text".to_string())?;
        let mut f = text.split_ascii_whitespace();
        let Some(first) = f.next() else {
            return Ok(None);
        };
        let start: u64 = field(Some(first.as_bytes()), "start_block")?;
        let n: u64 = field(f.next().map(str::as_bytes), "number_of_blocks")?;
        let _: u64 = field(f.next().map(str::as_bytes), "ignore")?;
        let req: u64 = field(f.next().map(str::as_bytes), "request_number")?;
        if let Some(extra) = f.next() {
            return Err(format!("unexpected fifth field {extra:?}"));
        }
        if n > MAX_BLOCKS {
            return Err(format!("number_of_blocks {n} is implausibly large"));
        }
        if start.checked_add(n).is_none() {
            return Err("block range overflows".into());
        }
        Ok(Some((start, n, req)))
    }
}

impl Iterator for ArcReader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.left == 0 {
            match self.lines.advance() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
            match self.parse() {
                // Blank lines carry no references.
                Ok(None) => {}
                Ok(Some((start, n, req))) => {
                    self.next_block = start;
                    self.left = n;
                    self.time = req;
                }
                Err(reason) => return Some(Err(self.lines.fail(reason))),
            }
        }
        let key = self.next_block;
        self.next_block += 1;
        self.left -= 1;
        Some(Ok(Request {
            key,
            size: BLOCK,
            op: Op::Read,
            time: self.time,
        }))
    }
}
