//! One key per line, optionally followed (after a space, tab or comma) by
//! the object's size in bytes, 1 if absent. A key that is a decimal u64 is
//! used as is; any other text is hashed (xxh3) to a key. Blank lines are
//! skipped.

use super::{field, Lines, Request};
use crate::error::TraceError;
use crate::estimator::Op;
use crate::hash::key_of_bytes;
use std::io::BufRead;
use std::path::PathBuf;

pub(super) struct LinesReader {
    lines: Lines,
}

impl LinesReader {
    pub fn new(path: PathBuf, input: Box<dyn BufRead>) -> Self {
        LinesReader {
            lines: Lines::new(path, input),
        }
    }

    fn parse(&self) -> Result<Option<Request>, String> {
        let text = self.lines.buf.trim_ascii();
        if text.is_empty() {
            return Ok(None);
        }
        let mut parts = text.splitn(2, |&b| b == b' ' || b == b'\t' || b == b',');
        let key_text = parts.next().unwrap_or_default();
        let size = match parts.next() {
            Some(s) => field::<u32>(Some(s), "size")?,
            None => 1,
        };
        let key = std::str::from_utf8(key_text)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| key_of_bytes(key_text));
        Ok(Some(Request {
            key,
            size,
            op: Op::Read,
            time: self.lines.line,
        }))
    }
}

impl Iterator for LinesReader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.lines.advance() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
            match self.parse() {
                Ok(Some(r)) => return Some(Ok(r)),
                Ok(None) => {}
                Err(reason) => return Some(Err(self.lines.fail(reason))),
            }
        }
    }
}
