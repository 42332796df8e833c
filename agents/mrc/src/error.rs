//! Errors. Bad input never panics: it comes back as one of these, naming the
//! file and the record or line where reading stopped.

use std::path::PathBuf;

/// A trace could not be read to the end.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}: cannot open: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Binary formats count records from 1.
    #[error("{}: record {record}: {reason}", path.display())]
    Record {
        path: PathBuf,
        record: u64,
        reason: String,
    },
    /// Text formats count lines from 1 (a header is line 1).
    #[error("{}: line {line}: {reason}", path.display())]
    Line {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    #[error("{}: cannot tell the trace format; pass --format", path.display())]
    UnknownFormat { path: PathBuf },
}

/// Misuse of the estimators' parameters (rates, sizes, curve shapes).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MrcError {
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    #[error("curves are over different cache sizes ({0} vs {1} points)")]
    SizeMismatch(usize, usize),
}
