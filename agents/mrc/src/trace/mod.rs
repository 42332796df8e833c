//! Streaming trace readers. Each yields [`Request`]s one at a time (a
//! multi-block request expands into one request per block) and stops with a
//! [`TraceError`] naming the file and the record or line at the first bad
//! input: a truncated or malformed trace is never read as a shorter one.
//!
//! Text formats may be zstd-compressed (detected by the frame magic, not the
//! file name). A progress bar over the file's bytes goes to stderr when it
//! is a terminal and the caller did not ask for quiet.

mod arc;
mod cloudphysics;
mod lines;
mod msr;
mod oracle;

use crate::error::TraceError;
use crate::estimator::Op;
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::{Path, PathBuf};

/// One reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub key: u64,
    pub size: u32,
    pub op: Op,
    /// The trace's own timestamp, in its own unit (0 where it has none).
    pub time: u64,
}

/// The trace formats we read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// libCacheSim oracleGeneral: 24-byte little-endian records
    /// `u32 time, u64 obj_id, u32 size, i64 next_access_vtime`.
    Oracle,
    /// CloudPhysics CSV `version,time,op,size,lbn`; key = lbn.
    CloudPhysics,
    /// ARC `.lis`: `start nblocks ignore reqno`, 512 B blocks, expanded.
    Arc,
    /// MSR Cambridge CSV `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`;
    /// 4 KiB blocks, expanded over the request.
    Msr,
    /// One key per line, optionally followed by a size in bytes.
    Lines,
}

impl Format {
    pub const NAMES: &'static str = "oracle, cloudphysics, arc, msr, lines";

    pub fn parse(s: &str) -> Option<Format> {
        match s.to_ascii_lowercase().as_str() {
            "oracle" | "oraclegeneral" | "libcachesim" => Some(Format::Oracle),
            "cloudphysics" | "cp" => Some(Format::CloudPhysics),
            "arc" | "lis" => Some(Format::Arc),
            "msr" => Some(Format::Msr),
            "lines" | "keys" | "txt" => Some(Format::Lines),
            _ => None,
        }
    }

    /// Guess from the file name, then (for `.csv`) from the first line.
    pub fn detect(path: &Path) -> Result<Format, TraceError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let name = name.strip_suffix(".zst").unwrap_or(&name);
        if name.ends_with(".oraclegeneral.bin")
            || name.ends_with(".oraclegeneral")
            || name.ends_with(".bin")
        {
            return Ok(Format::Oracle);
        }
        if name.ends_with(".lis") {
            return Ok(Format::Arc);
        }
        if name.ends_with(".txt") || name.ends_with(".keys") {
            return Ok(Format::Lines);
        }
        if name.ends_with(".csv") {
            let mut first = String::new();
            let mut r = open_input(path, Progress::Hidden)?;
            // A read error here shows up again, with a line number, when the
            // trace is read for real.
            let _ = r.read_line(&mut first);
            if first.trim_start().starts_with("version,") {
                return Ok(Format::CloudPhysics);
            }
            return Ok(Format::Msr);
        }
        Err(TraceError::UnknownFormat {
            path: path.to_path_buf(),
        })
    }
}

/// Whether to draw a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// On stderr if stderr is a terminal.
    Auto,
    Hidden,
}

/// The requests of a trace, in order.
pub type Requests = Box<dyn Iterator<Item = Result<Request, TraceError>>>;

/// Open `path` as a trace of `format`.
pub fn open(path: &Path, format: Format, progress: Progress) -> Result<Requests, TraceError> {
    let input = open_input(path, progress)?;
    let path = path.to_path_buf();
    Ok(match format {
        Format::Oracle => Box::new(oracle::OracleReader::new(path, input)),
        Format::CloudPhysics => Box::new(cloudphysics::CloudPhysicsReader::new(path, input)),
        Format::Arc => Box::new(BlockRuns::new(path, input, arc::BLOCK, arc::parse)),
        Format::Msr => Box::new(BlockRuns::new(path, input, msr::BLOCK as u32, msr::parse)),
        Format::Lines => Box::new(lines::LinesReader::new(path, input)),
    })
}

/// Read a whole trace into memory (benchmarks and tests time reading apart
/// from the estimators).
pub fn read_all(
    path: &Path,
    format: Format,
    progress: Progress,
) -> Result<Vec<Request>, TraceError> {
    open(path, format, progress)?.collect()
}

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The file's bytes, decompressed if it is a zstd stream, counted by a
/// progress bar over the (compressed) file.
fn open_input(path: &Path, progress: Progress) -> Result<Box<dyn BufRead>, TraceError> {
    let open_err = |source| TraceError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(open_err)?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = match progress {
        Progress::Auto if std::io::stderr().is_terminal() => {
            let bar = ProgressBar::new(len);
            if let Ok(style) = ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(
                path.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            );
            bar
        }
        _ => ProgressBar::hidden(),
    };
    let mut reader = BufReader::with_capacity(
        1 << 16,
        Finishing {
            inner: bar.wrap_read(file),
            bar,
        },
    );
    let head = reader.fill_buf().map_err(open_err)?;
    if head.starts_with(&ZSTD_MAGIC) {
        let decoder = zstd::stream::read::Decoder::with_buffer(reader).map_err(open_err)?;
        Ok(Box::new(BufReader::with_capacity(1 << 16, decoder)))
    } else {
        Ok(Box::new(reader))
    }
}

/// Clears the progress bar at end of file (or when dropped early).
struct Finishing<R> {
    inner: R,
    bar: ProgressBar,
}

impl<R: Read> Read for Finishing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.bar.finish_and_clear();
        }
        Ok(n)
    }
}

impl<R> Drop for Finishing<R> {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// The line-oriented readers' cursor: it numbers lines for error messages and
/// stops for good at the end of input or after the first error, so a reader
/// never carries on past a bad record into a silently short trace.
pub(crate) struct Lines {
    input: Box<dyn BufRead>,
    pub(crate) path: PathBuf,
    pub(crate) buf: Vec<u8>,
    pub(crate) line: u64,
    done: bool,
}

impl Lines {
    pub(crate) fn new(path: PathBuf, input: Box<dyn BufRead>) -> Self {
        Lines {
            input,
            path,
            buf: Vec::new(),
            line: 0,
            done: false,
        }
    }

    /// Reads the next line into `buf`: Ok(false) once the input is over.
    pub(crate) fn advance(&mut self) -> Result<bool, TraceError> {
        if self.done {
            return Ok(false);
        }
        self.line += 1;
        let more = read_line(&mut *self.input, &mut self.buf, &self.path, self.line);
        if !matches!(more, Ok(true)) {
            self.done = true;
        }
        more
    }

    /// The error for the current line; nothing more is read after it.
    pub(crate) fn fail(&mut self, reason: impl Into<String>) -> TraceError {
        self.done = true;
        line_error(&self.path, self.line, reason)
    }
}

/// One line of a block trace: `n` references to the blocks from `first` on.
pub(crate) struct Run {
    pub first: u64,
    pub n: u64,
    pub op: Op,
    pub time: u64,
}

/// A block trace's reader: each line (`parse` of it, `None` for a line without
/// references) expands to one reference per block of its [`Run`].
pub(crate) struct BlockRuns {
    lines: Lines,
    parse: fn(&Lines) -> Result<Option<Run>, String>,
    block_bytes: u32,
    run: Run,
}

impl BlockRuns {
    pub(crate) fn new(
        path: PathBuf,
        input: Box<dyn BufRead>,
        block_bytes: u32,
        parse: fn(&Lines) -> Result<Option<Run>, String>,
    ) -> Self {
        BlockRuns {
            lines: Lines::new(path, input),
            parse,
            block_bytes,
            run: Run {
                first: 0,
                n: 0,
                op: Op::Read,
                time: 0,
            },
        }
    }
}

impl Iterator for BlockRuns {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.run.n == 0 {
            match self.lines.advance() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
            match (self.parse)(&self.lines) {
                Ok(None) => {}
                Ok(Some(run)) => self.run = run,
                Err(reason) => return Some(Err(self.lines.fail(reason))),
            }
        }
        let key = self.run.first;
        self.run.first += 1;
        self.run.n -= 1;
        Some(Ok(Request {
            key,
            size: self.block_bytes,
            op: self.run.op,
            time: self.run.time,
        }))
    }
}

/// Read one line into `buf` (without the line ending). Returns false at end
/// of input; an I/O or decompression error names the line it was reading.
pub(crate) fn read_line(
    input: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    path: &Path,
    line: u64,
) -> Result<bool, TraceError> {
    buf.clear();
    let n = input
        .read_until(b'\n', buf)
        .map_err(|e| line_error(path, line, format!("read failed: {e}")))?;
    if n == 0 {
        return Ok(false);
    }
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
    Ok(true)
}

pub(crate) fn line_error(path: &Path, line: u64, reason: impl Into<String>) -> TraceError {
    TraceError::Line {
        path: path.to_path_buf(),
        line,
        reason: reason.into(),
    }
}

/// Parse a decimal field, naming it in the error.
pub(crate) fn field<T: std::str::FromStr>(s: Option<&[u8]>, name: &str) -> Result<T, String> {
    let s = s.ok_or_else(|| format!("missing field {name}"))?;
    let text = std::str::from_utf8(s)
        .map_err(|_| format!("field {name} is not text"))?
        .trim();
    text.parse()
        .map_err(|_| format!("field {name}: {text:?} is not a valid number"))
}
