//! One property per fuzz target: `check(data)` panics if the decoder under test panics,
//! returns something it cannot write back the same, or allocates more than the input
//! justifies. Both drivers (the suite's proptest runs and cargo-fuzz) call these.

pub mod bus;
pub mod frame;
pub mod kv_protocol;
pub mod rules_file;
pub mod switch;
pub mod traces;

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The largest block a JSON decoder may allocate for `len` input bytes: a small multiple of
/// the input (serde's vectors double as they grow, a struct outweighs its text) and never a
/// size read from it.
pub fn json_alloc_bound(len: usize) -> usize {
    64 * len + (64 << 10)
}

/// Decodes `data` as `T` with allocation checked against [`json_alloc_bound`]; a decoded
/// value must survive encode and decode unchanged, and encode to the same text twice.
pub fn decode_json<T>(what: &str, data: &[u8]) -> Option<T>
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let (decoded, largest) = crate::alloc::largest_during(|| serde_json::from_slice::<T>(data));
    assert!(
        largest <= json_alloc_bound(data.len()),
        "{what}: decoding {} bytes allocated a block of {largest} bytes",
        data.len()
    );
    let v = match decoded {
        Ok(v) => v,
        Err(e) => {
            assert!(
                !e.to_string().is_empty(),
                "{what}: an error without a message"
            );
            return None;
        }
    };
    json_round_trip(what, &v);
    Some(v)
}

/// `v` encodes, decodes to itself, and encodes to the same text again.
pub fn json_round_trip<T>(what: &str, v: &T)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let text =
        serde_json::to_string(v).unwrap_or_else(|e| panic!("{what}: cannot encode {v:?}: {e}"));
    let back: T = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{what}: what it encodes does not decode: {e}\n{text}"));
    assert_eq!(&back, v, "{what}: round trip changed the value ({text})");
    assert_eq!(
        serde_json::to_string(&back).unwrap(),
        text,
        "{what}: encoding is not stable"
    );
}
