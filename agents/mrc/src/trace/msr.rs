//! MSR Cambridge block traces (Narayanan et al., FAST'08): CSV rows
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, no header
//! (one is skipped if present). Keys are 4 KiB blocks: a request expands to
//! every block it touches. Each file is one volume, so host and disk are not
//! part of the key.

use super::{field, Lines, Run};
use crate::estimator::Op;

pub(super) const BLOCK: u64 = 4096;
const MAX_BLOCKS: u64 = 1 << 24;

/// A row's run of blocks; `Ok(None)` for a blank or header line.
pub(super) fn parse(lines: &Lines) -> Result<Option<Run>, String> {
    let text = std::str::from_utf8(&lines.buf).map_err(|_| "not text".to_string())?;
    if text.trim().is_empty() || (lines.line == 1 && text.starts_with("Timestamp")) {
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
    Ok(Some(Run { first, n, op, time }))
}
