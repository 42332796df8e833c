//! Forwarding to another agent's KV front end (a rule's `tcp://HOST:PORT` endpoint): the
//! command in its wire form, the reply read back whole and relayed. One connection per
//! remote address per client connection, opened on first use.

use std::collections::HashMap;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How a reply ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// One line.
    Line,
    /// `VALUE` blocks, then `END` (or an error line).
    Values,
    /// One meta line; `VA <n>` is followed by a data block.
    Meta,
}

/// Longest reply line read from a remote (its data blocks are sized by their header).
const MAX_LINE: u64 = 64 << 10;

#[derive(Default)]
pub struct Upstreams {
    conns: HashMap<String, BufReader<TcpStream>>,
    max_item: usize,
}

impl Upstreams {
    pub fn new(max_item: usize) -> Upstreams {
        Upstreams {
            conns: HashMap::new(),
            max_item,
        }
    }

    /// Sends `request` to `addr` and returns its reply. On an error the connection is
    /// dropped (the next request opens a new one).
    pub async fn exchange(
        &mut self,
        addr: &str,
        request: &[u8],
        kind: ReplyKind,
    ) -> Result<Vec<u8>, String> {
        let r = self.try_exchange(addr, request, kind).await;
        if r.is_err() {
            self.conns.remove(addr);
        }
        r.map_err(|e| format!("endpoint {addr}: {e}"))
    }

    async fn try_exchange(
        &mut self,
        addr: &str,
        request: &[u8],
        kind: ReplyKind,
    ) -> std::io::Result<Vec<u8>> {
        if !self.conns.contains_key(addr) {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            self.conns.insert(addr.to_string(), BufReader::new(s));
        }
        let max_item = self.max_item;
        let conn = self.conns.get_mut(addr).expect("inserted above");
        conn.get_mut().write_all(request).await?;
        let mut out = Vec::new();
        loop {
            let start = out.len();
            let n = (&mut *conn)
                .take(MAX_LINE)
                .read_until(b'\n', &mut out)
                .await?;
            if n == 0 || !out.ends_with(b"\n") {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "reply cut short",
                ));
            }
            let line = &out[start..out.len() - 2.min(out.len() - start)];
            let tokens: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let is_value = tokens.first() == Some(&&b"VALUE"[..]);
            let data: Option<Vec<u8>> = match (kind, tokens.first().copied()) {
                (ReplyKind::Values, Some(b"VALUE")) => tokens.get(3).map(|t| t.to_vec()),
                (ReplyKind::Meta, Some(b"VA")) => tokens.get(1).map(|t| t.to_vec()),
                _ => None,
            };
            if let Some(len) = data {
                let len: usize = std::str::from_utf8(&len)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .filter(|&l| l <= max_item)
                    .ok_or_else(|| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, "bad value length")
                    })?;
                let at = out.len();
                out.resize(at + len + 2, 0);
                conn.read_exact(&mut out[at..]).await?;
                if kind == ReplyKind::Values {
                    continue;
                }
            }
            if kind != ReplyKind::Values || !is_value {
                return Ok(out);
            }
        }
    }
}
