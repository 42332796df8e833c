//! Mutual authentication of forwarding connections with a shared key: an HMAC-SHA256
//! challenge-response at connect, in both directions, before any frame.
//!
//! ```text
//! client -> server   MAGIC | Nc                     (32-byte random nonce)
//! server -> client   Ns | HMAC(key, "server" | Nc | Ns)
//! client -> server   HMAC(key, "client" | Nc | Ns)
//! server -> client   1 (accepted) or 0 (refused, then close)
//! ```
//!
//! Each side proves it holds the key over the other side's fresh nonce, so a recorded
//! handshake cannot be replayed; the labels keep one side's answer from being reflected as
//! the other's. MACs are compared in constant time (`verify_slice`). The key never crosses
//! the wire. Frames after the handshake keep their crc32c (see the README on integrity).

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const MAGIC: &[u8; 8] = b"LFSAUTH1";
const NONCE: usize = 32;
const MAC: usize = 32;
/// Shorter keys are refused: the key is the only secret.
pub const MIN_KEY: usize = 16;

/// The shared forwarding key (Debug does not print it).
#[derive(Clone)]
pub struct Key(Arc<[u8]>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({} bytes)", self.0.len())
    }
}

impl Key {
    pub fn from_bytes(b: &[u8]) -> Result<Key, String> {
        if b.len() < MIN_KEY {
            return Err(format!(
                "the key has {} bytes, at least {MIN_KEY} are needed",
                b.len()
            ));
        }
        Ok(Key(b.into()))
    }

    /// Reads a key file (its bytes, without a trailing newline); the error names the file.
    pub fn load(path: &Path) -> Result<Key, String> {
        let b = std::fs::read(path).map_err(|e| format!("key file {}: {e}", path.display()))?;
        let b = b.strip_suffix(b"\n").unwrap_or(&b);
        Key::from_bytes(b).map_err(|e| format!("key file {}: {e}", path.display()))
    }

    fn mac(&self, label: &[u8], nc: &[u8], ns: &[u8]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(label);
        m.update(nc);
        m.update(ns);
        m
    }
}

fn refused(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, msg.into())
}

fn nonce() -> io::Result<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n).map_err(|e| io::Error::other(format!("random nonce: {e}")))?;
    Ok(n)
}

/// Reads exactly `buf`, saying that the peer hung up during the handshake if it did.
fn read_handshake(s: &mut impl Read, buf: &mut [u8], hint: &str) -> io::Result<()> {
    s.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => refused(format!(
            "the peer closed the connection during authentication ({hint})"
        )),
        _ => e,
    })
}

/// The connecting side. Fails (PermissionDenied) unless both sides hold the same key.
pub fn client(s: &mut (impl Read + Write), key: &Key) -> io::Result<()> {
    let nc = nonce()?;
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&nc);
    s.write_all(&hello)?;
    let mut answer = [0u8; NONCE + MAC];
    read_handshake(s, &mut answer, "does it run with a forwarding key?")?;
    let (ns, mac_s) = answer.split_at(NONCE);
    key.mac(b"server", &nc, ns)
        .verify_slice(mac_s)
        .map_err(|_| {
            refused("the peer failed authentication: it does not hold our forwarding key")
        })?;
    s.write_all(&key.mac(b"client", &nc, ns).finalize().into_bytes())?;
    let mut verdict = [0u8; 1];
    read_handshake(s, &mut verdict, "it refused our key")?;
    if verdict[0] != 1 {
        return Err(refused("the peer refused our forwarding key"));
    }
    Ok(())
}

/// The accepting side. Fails (PermissionDenied) for a peer without the key, having told it
/// so; nothing of the peer's is read as a frame before this returns Ok.
pub fn server(s: &mut (impl Read + Write), key: &Key) -> io::Result<()> {
    let mut hello = [0u8; MAGIC.len() + NONCE];
    read_handshake(s, &mut hello, "no handshake")?;
    if &hello[..MAGIC.len()] != MAGIC {
        return Err(refused(
            "the peer did not authenticate (is it forwarding without a key?)",
        ));
    }
    let nc = &hello[MAGIC.len()..];
    let ns = nonce()?;
    let mut answer = ns.to_vec();
    answer.extend_from_slice(&key.mac(b"server", nc, &ns).finalize().into_bytes());
    s.write_all(&answer)?;
    let mut mac_c = [0u8; MAC];
    read_handshake(
        s,
        &mut mac_c,
        "it found our answer wrong: the forwarding keys differ",
    )?;
    if key.mac(b"client", nc, &ns).verify_slice(&mac_c).is_err() {
        let _ = s.write_all(&[0]);
        return Err(refused("the peer's forwarding key is wrong"));
    }
    s.write_all(&[1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn pair(ck: &Key, sk: &Key) -> (io::Result<()>, io::Result<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let sk = sk.clone();
        let srv = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            server(&mut s, &sk)
        });
        let mut c = TcpStream::connect(a).unwrap();
        let cr = client(&mut c, ck);
        drop(c);
        (cr, srv.join().unwrap())
    }

    #[test]
    fn same_key_passes_wrong_key_is_refused_on_both_sides() {
        let k = Key::from_bytes(b"0123456789abcdef-shared").unwrap();
        let (c, s) = pair(&k, &k);
        c.unwrap();
        s.unwrap();
        let other = Key::from_bytes(b"0123456789abcdef-other!").unwrap();
        let (c, s) = pair(&other, &k);
        let (c, s) = (c.unwrap_err(), s.unwrap_err());
        assert_eq!(c.kind(), io::ErrorKind::PermissionDenied);
        assert!(
            c.to_string().contains("does not hold our forwarding key"),
            "{c}"
        );
        assert!(s.to_string().contains("the forwarding keys differ"), "{s}");
    }

    #[test]
    fn a_peer_without_the_handshake_is_refused() {
        let k = Key::from_bytes(&[7u8; 32]).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let srv = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            server(&mut s, &k)
        });
        let mut c = TcpStream::connect(a).unwrap();
        c.write_all(&[0u8; 40]).unwrap();
        let e = srv.join().unwrap().unwrap_err();
        assert!(e.to_string().contains("did not authenticate"), "{e}");
    }

    #[test]
    fn short_or_missing_key_files_are_refused_with_the_file_name() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k");
        std::fs::write(&p, "short\n").unwrap();
        let e = Key::load(&p).unwrap_err();
        assert!(e.contains("k: the key has 5 bytes"), "{e}");
        assert!(Key::load(&d.path().join("none")).is_err());
        std::fs::write(&p, "a-long-enough-shared-key\n").unwrap();
        assert_eq!(format!("{:?}", Key::load(&p).unwrap()), "Key(24 bytes)");
    }
}
