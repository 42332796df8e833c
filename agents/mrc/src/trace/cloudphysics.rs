//! CloudPhysics block traces as CSV (`version,time,op,size,lbn`), as shipped
//! with libCacheSim. One request per row, keyed by its logical block number
//! like libCacheSim does; `op` is a SCSI opcode in hex.

use super::{field, line_error, Request};
use crate::error::TraceError;
use crate::estimator::Op;
use std::io::BufRead;
use std::path::PathBuf;

const HEADER: &[&str] = &["version", "time", "op", "size", "lbn"];

pub(super) struct CloudPhysicsReader {
    path: PathBuf,
    csv: csv::Reader<Box<dyn BufRead>>,
    row: csv::ByteRecord,
    checked_header: bool,
    done: bool,
}

impl CloudPhysicsReader {
    pub fn new(path: PathBuf, input: Box<dyn BufRead>) -> Self {
        let csv = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(input);
        CloudPhysicsReader {
            path,
            csv,
            row: csv::ByteRecord::new(),
            checked_header: false,
            done: false,
        }
    }

    fn fail(&mut self, line: u64, reason: String) -> Option<Result<Request, TraceError>> {
        self.done = true;
        Some(Err(line_error(&self.path, line, reason)))
    }
}

/// SCSI READ(6/10/12/16) and WRITE(6/10/12/16) opcodes.
fn op_of(code: u8) -> Op {
    match code {
        0x08 | 0x28 | 0xa8 | 0x88 => Op::Read,
        0x0a | 0x2a | 0xaa | 0x8a => Op::Write,
        _ => Op::Other,
    }
}

impl Iterator for CloudPhysicsReader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            let line = self.csv.position().line();
            match self.csv.read_byte_record(&mut self.row) {
                Ok(false) => {
                    self.done = true;
                    if !self.checked_header {
                        return self
                            .fail(1, "empty file: no `version,time,op,size,lbn` header".into());
                    }
                    return None;
                }
                Ok(true) => {}
                Err(e) => {
                    let line = e.position().map_or(line, |p| p.line());
                    return self.fail(line, format!("bad CSV: {e}"));
                }
            }
            let line = self.row.position().map_or(line, |p| p.line());
            if !self.checked_header {
                self.checked_header = true;
                let names: Vec<String> = self
                    .row
                    .iter()
                    .map(|f| String::from_utf8_lossy(f).trim().to_string())
                    .collect();
                if names != HEADER {
                    return self.fail(
                        line,
                        format!(
                            "expected header `version,time,op,size,lbn`, found `{}`",
                            names.join(",")
                        ),
                    );
                }
                continue;
            }
            if self.row.len() != HEADER.len() {
                return self.fail(line, format!("expected 5 fields, found {}", self.row.len()));
            }
            let parsed = (|| {
                let time: u64 = field(self.row.get(1), "time")?;
                let op = std::str::from_utf8(&self.row[2])
                    .ok()
                    .and_then(|s| u8::from_str_radix(s.trim(), 16).ok());
                let op = op.ok_or_else(|| {
                    format!(
                        "field op: {:?} is not a hex SCSI opcode",
                        String::from_utf8_lossy(&self.row[2])
                    )
                })?;
                let size: u32 = field(self.row.get(3), "size")?;
                let lbn: u64 = field(self.row.get(4), "lbn")?;
                Ok::<_, String>(Request {
                    key: lbn,
                    size,
                    op: op_of(op),
                    time,
                })
            })();
            return match parsed {
                Ok(r) => Some(Ok(r)),
                Err(reason) => self.fail(line, reason),
            };
        }
    }
}
