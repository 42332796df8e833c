//! The memcached text protocol: an incremental parser over a byte buffer ([`parse`]), the
//! commands it yields ([`Command`]), their wire form ([`encode`], used to forward a command
//! to another front end and by the round-trip tests) and the reply lines ([`reply`]).
//!
//! The parser never allocates more than the command in front of it needs: a line is looked
//! for within [`Limits::max_line`] bytes, a value is waited for only up to its declared
//! length, and a value larger than [`Limits::max_item`] is not buffered at all (the caller
//! skips its bytes as they arrive: [`Parse::Swallow`]).

mod encode;
mod meta;
pub mod reply;
mod text;

pub use encode::encode;
pub use meta::{Meta, MetaFlag, MetaKind};

/// Longest key memcached accepts.
pub const MAX_KEY: usize = 250;

/// What the parser may buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest value a storage command may carry.
    pub max_item: usize,
    /// Longest command line (a multi-key get is one line).
    pub max_line: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_item: 1 << 20,
            max_line: 64 << 10,
        }
    }
}

/// Which storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// Compare and swap with this unique.
    Cas(u64),
}

impl StoreMode {
    pub fn name(self) -> &'static str {
        match self {
            StoreMode::Set => "set",
            StoreMode::Add => "add",
            StoreMode::Replace => "replace",
            StoreMode::Append => "append",
            StoreMode::Prepend => "prepend",
            StoreMode::Cas(_) => "cas",
        }
    }
}

/// One parsed command. Keys are raw bytes (memcached keys need not be UTF-8); `exptime` is as
/// the client sent it (relative seconds, absolute unix time above 30 days, negative: expired).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `get`/`gets` (`cas`: with the unique), `gat`/`gats` (`touch`: the new exptime).
    Get {
        keys: Vec<Vec<u8>>,
        cas: bool,
        touch: Option<i64>,
    },
    Store {
        mode: StoreMode,
        key: Vec<u8>,
        flags: u32,
        exptime: i64,
        data: Vec<u8>,
        noreply: bool,
    },
    Delete {
        key: Vec<u8>,
        noreply: bool,
    },
    Touch {
        key: Vec<u8>,
        exptime: i64,
        noreply: bool,
    },
    Arith {
        incr: bool,
        key: Vec<u8>,
        delta: u64,
        noreply: bool,
    },
    FlushAll {
        delay: i64,
        noreply: bool,
    },
    Stats {
        arg: Option<String>,
    },
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Version,
    Quit,
    Meta(Meta),
}

impl Command {
    /// The keys the command names (none for the others).
    pub fn keys(&self) -> Vec<&[u8]> {
        match self {
            Command::Get { keys, .. } => keys.iter().map(Vec::as_slice).collect(),
            Command::Store { key, .. }
            | Command::Delete { key, .. }
            | Command::Touch { key, .. }
            | Command::Arith { key, .. } => vec![key.as_slice()],
            Command::Meta(m) if m.kind != MetaKind::Noop => vec![m.key.as_slice()],
            _ => Vec::new(),
        }
    }

    /// Whether the client asked for no reply on success.
    pub fn noreply(&self) -> bool {
        match self {
            Command::Store { noreply, .. }
            | Command::Delete { noreply, .. }
            | Command::Touch { noreply, .. }
            | Command::Arith { noreply, .. }
            | Command::FlushAll { noreply, .. }
            | Command::Verbosity { noreply, .. } => *noreply,
            _ => false,
        }
    }
}

/// The outcome of parsing the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parse {
    /// More bytes are needed; `need` is how many in all, when the line says (a value).
    Incomplete { need: Option<usize> },
    /// A command, taking the first `used` bytes.
    Command { cmd: Command, used: usize },
    /// A bad command: send `reply`, drop the first `used` bytes, and close the connection
    /// when `close` (the stream cannot be resynchronised).
    Error {
        reply: &'static str,
        used: usize,
        close: bool,
    },
    /// A storage command whose value is refused unread (too large, bad key): send `reply`,
    /// drop the line's `used` bytes and then the next `skip` bytes, wherever they arrive.
    /// `unlink`: the key whose old value must go (memcached drops it when a set of a too
    /// large value fails, so no stale value outlives the set).
    Swallow {
        reply: &'static str,
        used: usize,
        skip: usize,
        unlink: Option<Vec<u8>>,
    },
}

/// Parses the command at the start of `buf`.
pub fn parse(buf: &[u8], limits: &Limits) -> Parse {
    let Some(nl) = memchr::memchr(b'\n', &buf[..buf.len().min(limits.max_line)]) else {
        if buf.len() >= limits.max_line {
            return Parse::Error {
                reply: reply::LINE_TOO_LONG,
                used: buf.len(),
                close: true,
            };
        }
        return Parse::Incomplete { need: None };
    };
    let end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    let line = &buf[..end];
    let used = nl + 1;
    let tokens: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let Some((&name, args)) = tokens.split_first() else {
        return error(reply::ERROR, used);
    };
    match name {
        b"mg" | b"ms" | b"md" | b"mn" => meta::parse(name, args, buf, used, limits),
        _ => text::parse(name, args, buf, used, limits),
    }
}

fn error(reply: &'static str, used: usize) -> Parse {
    Parse::Error {
        reply,
        used,
        close: false,
    }
}

/// Whether `key` is a key memcached accepts: 1 to 250 bytes, no control characters or
/// spaces (the tokenizer already split on spaces).
fn valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY && key.iter().all(|&b| b > b' ' && b != 0x7f)
}

/// A decimal number as memcached's `safe_strto*` reads it: digits only, in range.
fn num<T: std::str::FromStr>(t: &[u8]) -> Option<T> {
    let s = std::str::from_utf8(t).ok()?;
    if s.is_empty() || !(s.bytes().all(|b| b.is_ascii_digit()) || s.starts_with('-')) {
        return None;
    }
    s.parse().ok()
}

/// The value of a storage command: `data` bytes after the line, then `\r\n`.
fn value(buf: &[u8], used: usize, len: usize) -> Result<Option<(Vec<u8>, usize)>, Parse> {
    let total = used + len + 2;
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[used + len..total] != b"\r\n" {
        return Err(error(reply::BAD_CHUNK, total));
    }
    Ok(Some((buf[used..used + len].to_vec(), total)))
}

#[cfg(test)]
mod tests;
