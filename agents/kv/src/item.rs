//! What a key's engine value holds: memcached's per-item metadata (client flags, expiry time,
//! CAS unique) in a small header before the data, so a value read back from flash carries
//! them. The engines checksum the whole value, so a header that decodes is the one written.

/// Format byte; a value with another first byte is not an item (read as a miss).
const FORMAT: u8 = 1;
/// format u8 | flags u32 | exptime u64 | cas u64, little-endian.
pub const HEADER: usize = 1 + 4 + 8 + 8;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The client's opaque flags.
    pub flags: u32,
    /// Absolute unix time (seconds) it expires at; 0: never.
    pub exptime: u64,
    pub cas: u64,
    pub data: Vec<u8>,
}

impl Item {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + self.data.len());
        v.push(FORMAT);
        v.extend_from_slice(&self.flags.to_le_bytes());
        v.extend_from_slice(&self.exptime.to_le_bytes());
        v.extend_from_slice(&self.cas.to_le_bytes());
        v.extend_from_slice(&self.data);
        v
    }

    pub fn decode(mut v: Vec<u8>) -> Option<Item> {
        if v.len() < HEADER || v[0] != FORMAT {
            return None;
        }
        let flags = u32::from_le_bytes(v[1..5].try_into().ok()?);
        let exptime = u64::from_le_bytes(v[5..13].try_into().ok()?);
        let cas = u64::from_le_bytes(v[13..21].try_into().ok()?);
        v.drain(..HEADER);
        Some(Item {
            flags,
            exptime,
            cas,
            data: v,
        })
    }

    /// Whether it has expired at unix time `now`.
    pub fn expired(&self, now: u64) -> bool {
        self.exptime != 0 && self.exptime <= now
    }
}

/// Relative expiry times above this are absolute unix times (memcached's rule).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// The absolute expiry of a client's `exptime` at `now`: `Some(0)` never, `None` already
/// expired (negative, or an absolute time not after now).
pub fn deadline(exptime: i64, now: u64) -> Option<u64> {
    match exptime {
        0 => Some(0),
        e if e < 0 => None,
        e if e <= REALTIME_MAXDELTA => Some(now + e as u64),
        e if (e as u64) <= now => None,
        e => Some(e as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_expiry() {
        let i = Item {
            flags: 7,
            exptime: 99,
            cas: 1 << 40,
            data: b"hello".to_vec(),
        };
        assert_eq!(Item::decode(i.encode()), Some(i.clone()));
        assert_eq!(Item::decode(vec![0; HEADER]), None);
        assert_eq!(Item::decode(i.encode()[..HEADER - 1].to_vec()), None);
        assert!(!i.expired(98) && i.expired(99));
        let now = 1_800_000_000;
        assert_eq!(deadline(0, now), Some(0));
        assert_eq!(deadline(-1, now), None);
        assert_eq!(deadline(10, now), Some(now + 10));
        assert_eq!(
            deadline(REALTIME_MAXDELTA, now),
            Some(now + REALTIME_MAXDELTA as u64)
        );
        assert_eq!(
            deadline(REALTIME_MAXDELTA + 1, now),
            None,
            "an absolute time long past"
        );
        assert_eq!(deadline(now as i64 + 5, now), Some(now + 5));
    }
}
