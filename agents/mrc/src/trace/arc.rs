//! ARC traces (Megiddo and Modha, FAST'03): lines `start nblocks ignore
//! reqno` of 512-byte blocks; each line stands for `nblocks` references,
//! `start..start + nblocks`.

use super::{field, Lines, Run};
use crate::estimator::Op;

pub(super) const BLOCK: u32 = 512;
/// Larger requests are taken as corruption rather than expanded into
/// billions of references (the traces' largest is a few hundred).
const MAX_BLOCKS: u64 = 1 << 24;

/// A line's run of blocks; `None` for a blank line, which carries no references.
pub(super) fn parse(lines: &Lines) -> Result<Option<Run>, String> {
    let text = std::str::from_utf8(&lines.buf).map_err(|_| "not text".to_string())?;
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
    Ok(Some(Run {
        first: start,
        n,
        op: Op::Read,
        time: req,
    }))
}
