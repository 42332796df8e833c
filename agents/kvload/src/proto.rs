//! The client side of the memcached text protocol that kvload speaks: `get`, `set` and
//! `stats`, requests written into a buffer (so several can be pipelined) and replies read one
//! at a time from a `BufRead`. A reply the protocol does not allow is an `InvalidData` error:
//! the run stops rather than count garbage.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Write};

/// What a `get` of one key found.
#[derive(Debug, PartialEq, Eq)]
pub enum GetReply {
    /// The value (its bytes are in the caller's buffer).
    Hit,
    Miss,
    /// `SERVER_ERROR ...` / `CLIENT_ERROR ...` / `ERROR`: the line.
    Error(String),
}

/// What a `set` did.
#[derive(Debug, PartialEq, Eq)]
pub enum SetReply {
    Stored,
    NotStored,
    Error(String),
}

pub fn write_get(buf: &mut Vec<u8>, key: &[u8]) {
    buf.extend_from_slice(b"get ");
    buf.extend_from_slice(key);
    buf.extend_from_slice(b"\r\n");
}

pub fn write_set(buf: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    buf.extend_from_slice(b"set ");
    buf.extend_from_slice(key);
    // Infallible: writing into a Vec.
    let _ = write!(buf, " 0 0 {}\r\n", value.len());
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// One reply line without its `\r\n`; end of stream is an error (the server went away).
fn read_line<R: BufRead>(r: &mut R, line: &mut Vec<u8>) -> io::Result<()> {
    line.clear();
    r.read_until(b'\n', line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "the server closed the connection mid-reply (read {:?})",
                String::from_utf8_lossy(line)
            ),
        ));
    }
    line.truncate(line.len() - 2);
    Ok(())
}

fn error_line(line: &[u8]) -> Option<String> {
    let is_error =
        line == b"ERROR" || line.starts_with(b"SERVER_ERROR") || line.starts_with(b"CLIENT_ERROR");
    is_error.then(|| String::from_utf8_lossy(line).into_owned())
}

/// Reads the reply to `get key`: `VALUE key flags bytes [cas]`, the data, `END`; or `END`.
/// The value's bytes go into `value`.
pub fn read_get<R: BufRead>(r: &mut R, key: &[u8], value: &mut Vec<u8>) -> io::Result<GetReply> {
    let mut line = Vec::with_capacity(64);
    read_line(r, &mut line)?;
    if line == b"END" {
        return Ok(GetReply::Miss);
    }
    if let Some(e) = error_line(&line) {
        return Ok(GetReply::Error(e));
    }
    let text = String::from_utf8_lossy(&line).into_owned();
    let mut words = text.split(' ');
    let bytes = match (words.next(), words.next(), words.next(), words.next()) {
        (Some("VALUE"), Some(k), Some(_flags), Some(n)) if k.as_bytes() == key => {
            n.parse::<usize>().ok()
        }
        _ => None,
    }
    .ok_or_else(|| {
        invalid(format!(
            "get {}: unexpected reply {text:?}",
            String::from_utf8_lossy(key)
        ))
    })?;
    value.resize(bytes + 2, 0);
    r.read_exact(value)?;
    if !value.ends_with(b"\r\n") {
        return Err(invalid(format!(
            "get: a {bytes}-byte value not followed by \\r\\n"
        )));
    }
    value.truncate(bytes);
    read_line(r, &mut line)?;
    if line != b"END" {
        return Err(invalid(format!(
            "get: {:?} after the value, expected END",
            String::from_utf8_lossy(&line)
        )));
    }
    Ok(GetReply::Hit)
}

pub fn read_set<R: BufRead>(r: &mut R) -> io::Result<SetReply> {
    let mut line = Vec::with_capacity(32);
    read_line(r, &mut line)?;
    match &line[..] {
        b"STORED" => Ok(SetReply::Stored),
        b"NOT_STORED" => Ok(SetReply::NotStored),
        l => error_line(l).map(SetReply::Error).ok_or_else(|| {
            invalid(format!(
                "set: unexpected reply {:?}",
                String::from_utf8_lossy(l)
            ))
        }),
    }
}

/// Reads a `stats [ARG]` reply: `STAT name value` lines up to `END`. `None` when the server
/// does not know the command (memcached answers `stats lachesis` with `ERROR`).
pub fn read_stats<R: BufRead>(r: &mut R) -> io::Result<Option<BTreeMap<String, String>>> {
    let mut stats = BTreeMap::new();
    let mut line = Vec::new();
    loop {
        read_line(r, &mut line)?;
        let text = String::from_utf8_lossy(&line);
        if text == "END" {
            return Ok(Some(stats));
        }
        if error_line(&line).is_some() {
            return Ok(None);
        }
        match text.strip_prefix("STAT ").and_then(|s| s.split_once(' ')) {
            Some((name, value)) => stats.insert(name.to_string(), value.to_string()),
            None => return Err(invalid(format!("stats: unexpected line {text:?}"))),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn requests_are_text_commands() {
        let mut b = Vec::new();
        write_get(&mut b, b"a:1");
        write_set(&mut b, b"a:1", b"xyz");
        assert_eq!(b, b"get a:1\r\nset a:1 0 0 3\r\nxyz\r\n");
    }

    #[test]
    fn get_replies() {
        let mut r = Cursor::new(&b"VALUE k 0 5\r\nab\r\nc\r\nEND\r\nEND\r\nVALUE k 0 2 77\r\nhi\r\nEND\r\nSERVER_ERROR out of memory\r\n"[..]);
        let mut v = Vec::new();
        assert_eq!(read_get(&mut r, b"k", &mut v).unwrap(), GetReply::Hit);
        assert_eq!(v, b"ab\r\nc", "a value may hold \\r\\n");
        assert_eq!(read_get(&mut r, b"k", &mut v).unwrap(), GetReply::Miss);
        assert_eq!(
            read_get(&mut r, b"k", &mut v).unwrap(),
            GetReply::Hit,
            "gets' cas field"
        );
        assert_eq!(v, b"hi");
        assert_eq!(
            read_get(&mut r, b"k", &mut v).unwrap(),
            GetReply::Error("SERVER_ERROR out of memory".into())
        );
        // The stream is exhausted: the server went away.
        let e = read_get(&mut r, b"k", &mut v).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn malformed_get_replies_are_errors() {
        for bad in [
            &b"VALUE other 0 2\r\nhi\r\nEND\r\n"[..],
            b"VALUE k 0 x\r\n",
            b"VALUE k 0 2\r\nhiXXEND\r\n",
            b"VALUE k 0 2\r\nhi\r\nSTORED\r\n",
            b"STORED\r\n",
            b"END",
            b"VALUE k 0 10\r\nshort",
        ] {
            let e = read_get(&mut Cursor::new(bad), b"k", &mut Vec::new()).unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
                ),
                "{:?}: {e}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn set_replies() {
        let mut r =
            Cursor::new(&b"STORED\r\nNOT_STORED\r\nCLIENT_ERROR bad data chunk\r\nVALUE\r\n"[..]);
        assert_eq!(read_set(&mut r).unwrap(), SetReply::Stored);
        assert_eq!(read_set(&mut r).unwrap(), SetReply::NotStored);
        assert_eq!(
            read_set(&mut r).unwrap(),
            SetReply::Error("CLIENT_ERROR bad data chunk".into())
        );
        assert_eq!(
            read_set(&mut r).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn stats_replies() {
        let mut r = Cursor::new(
            &b"STAT pid 7\r\nSTAT version 1.6.18 x\r\nEND\r\nERROR\r\nSTAT broken\r\n"[..],
        );
        let s = read_stats(&mut r).unwrap().unwrap();
        assert_eq!(s["pid"], "7");
        assert_eq!(s["version"], "1.6.18 x");
        assert_eq!(read_stats(&mut r).unwrap(), None, "an unknown stats group");
        assert_eq!(
            read_stats(&mut r).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
