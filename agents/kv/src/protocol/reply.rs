//! Reply lines, byte for byte as memcached 1.6 writes them.

pub const ERROR: &str = "ERROR\r\n";
pub const STORED: &str = "STORED\r\n";
pub const NOT_STORED: &str = "NOT_STORED\r\n";
pub const EXISTS: &str = "EXISTS\r\n";
pub const NOT_FOUND: &str = "NOT_FOUND\r\n";
pub const DELETED: &str = "DELETED\r\n";
pub const TOUCHED: &str = "TOUCHED\r\n";
pub const OK: &str = "OK\r\n";
pub const END: &str = "END\r\n";
pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format\r\n";
pub const BAD_DELETE: &str =
    "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
pub const BAD_CHUNK: &str = "CLIENT_ERROR bad data chunk\r\n";
pub const LINE_TOO_LONG: &str = "CLIENT_ERROR line too long\r\n";
pub const INVALID_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument\r\n";
pub const INVALID_DELTA: &str = "CLIENT_ERROR invalid numeric delta argument\r\n";
pub const NON_NUMERIC: &str = "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
pub const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format\r\n";
pub const INVALID_FLAG: &str = "CLIENT_ERROR invalid flag\r\n";
pub const DUPLICATE_FLAG: &str = "CLIENT_ERROR duplicate flag\r\n";
pub const TOO_LARGE: &str = "SERVER_ERROR object too large for cache\r\n";
pub const OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory storing object\r\n";
/// The tenant's rate limit refused the request (Lachesis only; see the crate README).
pub const RATE_LIMITED: &str = "SERVER_ERROR rate limited\r\n";
/// The key belongs to no tenant while tenants are declared (Lachesis only).
pub const NO_TENANT: &str = "CLIENT_ERROR key matches no tenant\r\n";
/// The version line: memcached's protocol level, then what answers.
pub const VERSION: &str = "VERSION 1.6.21-lachesis\r\n";

/// Appends a `VALUE` line and its data block.
pub fn value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    // Written in place: a formatted String per value was an allocation per hit.
    use std::io::Write as _;
    let _ = match cas {
        Some(c) => write!(out, " {flags} {} {c}\r\n", data.len()),
        None => write!(out, " {flags} {}\r\n", data.len()),
    };
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends `SERVER_ERROR <why>`, the message on one line.
pub fn server_error(out: &mut Vec<u8>, why: &str) {
    out.extend_from_slice(b"SERVER_ERROR ");
    out.extend(
        why.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}
