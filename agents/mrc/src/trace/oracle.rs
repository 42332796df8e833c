//! libCacheSim oracleGeneral binary traces.

use super::Request;
use crate::error::TraceError;
use crate::estimator::Op;
use std::io::{BufRead, ErrorKind, Read};
use std::path::PathBuf;

const RECORD: usize = 24;

pub(super) struct OracleReader {
    path: PathBuf,
    input: Box<dyn BufRead>,
    record: u64,
    done: bool,
}

impl OracleReader {
    pub fn new(path: PathBuf, input: Box<dyn BufRead>) -> Self {
        OracleReader {
            path,
            input,
            record: 0,
            done: false,
        }
    }

    fn error(&mut self, reason: String) -> Option<Result<Request, TraceError>> {
        self.done = true;
        Some(Err(TraceError::Record {
            path: self.path.clone(),
            record: self.record,
            reason,
        }))
    }
}

impl Iterator for OracleReader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut buf = [0u8; RECORD];
        let mut got = 0;
        while got < RECORD {
            match self.input.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.record += 1;
                    return self.error(format!("read failed: {e}"));
                }
            }
        }
        if got == 0 {
            self.done = true;
            return None;
        }
        self.record += 1;
        if got < RECORD {
            return self.error(format!("truncated record: {got} of {RECORD} bytes"));
        }
        let time = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&buf[4..12]);
        let size = u32::from_le_bytes([buf[12], buf[13], buf[14], buf[15]]);
        Some(Ok(Request {
            key: u64::from_le_bytes(id),
            size,
            op: Op::Read,
            time: time as u64,
        }))
    }
}
