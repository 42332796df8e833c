//! The on-flash form of one object, checksummed so that a corrupted page reads as a miss.
//!
//! Layout (little-endian): `crc32c u32 | key_len u16 | value_len u32 | key | value`; the
//! checksum covers everything after itself. A zeroed (trimmed or never written) area parses as
//! "no object", never as an empty one, because an all-zero header fails its checksum.

use xxhash_rust::xxh3::xxh3_64;

/// Bytes before the key.
pub const HEADER: usize = 10;

/// Largest key an object may have.
pub const MAX_KEY: usize = u16::MAX as usize;

/// 64-bit hash of a key: the DRAM indexes and bucket choice use it, the full key is on flash.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// Bytes an object takes on flash.
#[inline]
pub fn encoded_len(key: &[u8], value: &[u8]) -> usize {
    HEADER + key.len() + value.len()
}

/// Appends the encoded object to `out`. Keys longer than [`MAX_KEY`] or values over 4 GiB are
/// rejected by the engines before they get here.
pub fn encode(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// One decoded object, borrowing from the buffer it was read from.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// Bytes the object took.
    pub len: usize,
}

/// Why bytes did not decode as an object.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The header claims more bytes than the buffer has (a torn or corrupted header).
    Truncated,
    /// The lengths fit but the checksum does not match.
    Checksum,
}

/// Decodes the object at the start of `buf`.
pub fn decode(buf: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    if buf.len() < HEADER {
        return Err(DecodeError::Truncated);
    }
    let crc = u32::from_le_bytes(buf[0..4].try_into().unwrap());
    let key_len = u16::from_le_bytes(buf[4..6].try_into().unwrap()) as usize;
    let value_len = u32::from_le_bytes(buf[6..10].try_into().unwrap()) as usize;
    let len = HEADER
        .checked_add(key_len)
        .and_then(|l| l.checked_add(value_len))
        .ok_or(DecodeError::Truncated)?;
    if len > buf.len() {
        return Err(DecodeError::Truncated);
    }
    if crc32c::crc32c(&buf[4..len]) != crc {
        return Err(DecodeError::Checksum);
    }
    Ok(Decoded {
        key: &buf[HEADER..HEADER + key_len],
        value: &buf[HEADER + key_len..len],
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let mut buf = Vec::new();
        encode(b"key", b"value", &mut buf);
        assert_eq!(buf.len(), encoded_len(b"key", b"value"));
        let d = decode(&buf).unwrap();
        assert_eq!(
            (d.key, d.value, d.len),
            (&b"key"[..], &b"value"[..], buf.len())
        );
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "flipped byte {i} still decoded");
        }
        assert_eq!(decode(&[0; 64]), Err(DecodeError::Checksum));
        assert_eq!(decode(&buf[..buf.len() - 1]), Err(DecodeError::Truncated));
    }
}
