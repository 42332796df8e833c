//! Random edits of corpus seeds, as proptest strategies (so a failure shrinks to few edits).
//!
//! [`bytes_from`] edits bytes the way a mutational fuzzer does (flips, boundary numbers,
//! separators, cuts, copies, splices of two seeds); [`json_from`] edits a JSON document's
//! tree (replace a node with a boundary value, drop or add a key, graft one node over another,
//! nest deeply), which reaches the decoders' field checks instead of the JSON parser's.

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Map, Value};

use crate::corpus::Seed;
use crate::run::Input;

/// Byte strings that sit on the decoders' boundaries: numbers around u32/u64 and the trace
/// readers' block caps, separators, line ends, non-UTF-8, the zstd magic.
const TOKENS: &[&[u8]] = &[
    b"0",
    b"1",
    b"-1",
    b"4096",
    b"16777216",
    b"16777217",
    b"4294967295",
    b"4294967296",
    b"18446744073709551615",
    b"18446744073709551616",
    b"99999999999999999999999",
    b"1e3",
    b"0x28",
    b" ",
    b",",
    b"\t",
    b"\n",
    b"\r\n",
    b"\"",
    b"\0",
    b"\xff\xfe",
    b"\xc3",
    b"Read",
    b"Write",
    b"Timestamp,",
    b"version,time,op,size,lbn\n",
    b"\x28\xb5\x2f\xfd",
];

#[derive(Debug, Clone)]
enum ByteEdit {
    Flip(Index, u8),
    Set(Index, u8),
    Token(Index, Index),
    Insert(Index, Vec<u8>),
    Delete(Index, u8),
    Duplicate(Index, u8),
    Truncate(Index),
    /// The head of this seed up to a point, then another seed's tail from a point.
    Splice(Index, Index, Index),
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        1 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| ByteEdit::Flip(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::Set(i, b)),
        3 => (any::<Index>(), any::<Index>()).prop_map(|(i, t)| ByteEdit::Token(i, t)),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| ByteEdit::Insert(i, b)),
        1 => (any::<Index>(), 1u8..32).prop_map(|(i, n)| ByteEdit::Delete(i, n)),
        1 => (any::<Index>(), 1u8..64).prop_map(|(i, n)| ByteEdit::Duplicate(i, n)),
        1 => any::<Index>().prop_map(ByteEdit::Truncate),
        1 => (any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(s, a, b)| ByteEdit::Splice(s, a, b)),
    ]
}

fn at(i: &Index, len: usize) -> usize {
    // An index into `0..=len`, so an edit may also land at the end.
    i.index(len + 1)
}

fn apply(seeds: &[Vec<u8>], mut b: Vec<u8>, e: &ByteEdit) -> Vec<u8> {
    let len = b.len();
    match e {
        ByteEdit::Flip(i, bit) if len > 0 => b[i.index(len)] ^= 1 << bit,
        ByteEdit::Set(i, v) if len > 0 => b[i.index(len)] = *v,
        ByteEdit::Token(i, t) => {
            let p = at(i, len);
            b.splice(p..p, TOKENS[t.index(TOKENS.len())].iter().copied());
        }
        ByteEdit::Insert(i, bytes) => {
            let p = at(i, len);
            b.splice(p..p, bytes.iter().copied());
        }
        ByteEdit::Delete(i, n) => {
            let p = at(i, len);
            b.drain(p..(p + *n as usize).min(len));
        }
        ByteEdit::Duplicate(i, n) => {
            let p = at(i, len);
            let copy = b[p..(p + *n as usize).min(len)].to_vec();
            b.splice(p..p, copy);
        }
        ByteEdit::Truncate(i) => b.truncate(at(i, len)),
        ByteEdit::Splice(s, from, to) => {
            let other = &seeds[s.index(seeds.len())];
            b.truncate(at(to, len));
            b.extend_from_slice(&other[at(from, other.len())..]);
        }
        ByteEdit::Flip(..) | ByteEdit::Set(..) => {}
    }
    b
}

/// A seed with up to eight byte edits (none: the seed itself, so every seed is tried whole).
pub fn bytes_from(seeds: &[Seed]) -> impl Strategy<Value = Input> {
    assert!(!seeds.is_empty(), "no seeds to edit");
    let seeds: Vec<Vec<u8>> = seeds.iter().map(|s| s.bytes.clone()).collect();
    (any::<Index>(), prop::collection::vec(byte_edit(), 0..8)).prop_map(move |(s, edits)| {
        let start = seeds[s.index(seeds.len())].clone();
        Input(edits.iter().fold(start, |b, e| apply(&seeds, b, e)))
    })
}

#[derive(Debug, Clone)]
enum JsonEdit {
    Replace(Index, Value),
    Remove(Index),
    AddKey(Index, String, Value),
    /// Copy the node at the first index over the node at the second (other shapes where this
    /// one is expected: a rule where a match is, a stage's field in a rule...).
    Graft(Index, Index),
    Nudge(Index, i8),
    Nest(Index, u8),
}

/// Values at the schemas' edges.
fn boundary_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec![
            json!(0),
            json!(1),
            json!(-1),
            json!(63),
            json!(64),
            json!(4095),
            json!(4096),
            json!(1_000_000),
            json!(1_000_001),
            json!(u16::MAX),
            json!(u16::MAX as u64 + 1),
            json!(u32::MAX),
            json!(u32::MAX as u64 + 1),
            json!(i64::MIN),
            json!(u64::MAX),
            json!(1u64 << 50),
            json!((1u64 << 50) + 1),
            json!(0.5),
            json!(-0.0),
            json!(1e308),
            json!(18446744073709551616.0),
        ]),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(vec![
            "",
            "a",
            "t",
            "-a",
            "a-",
            "A",
            "host-a",
            "cache/t",
            "cache/",
            "/",
            "/tmp/x",
            "..",
            "../x",
            "/a/../b",
            "read",
            "write",
            "io",
            "stage",
            "file",
            "controller",
            "cache",
            "ratelimit",
            "log",
            "dram",
            "loc",
            "kangaroo",
            "klog",
            "set-assoc",
            "back",
            "quiesce",
            "install",
            "applied",
            "rejected",
            "proceed",
            "deny",
            "2026-11-21T10:00:00Z",
            "2026-13-41T25:61:61Z",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "lachesis.desired-state/v1",
            "lachesis.ack/v1",
            "a\u{0}b",
            "é/ü",
            "a b",
        ])
        .prop_map(|s| Value::String(s.into())),
        "\\PC{0,24}".prop_map(Value::String),
        (1usize..6000).prop_map(|n| Value::String("a".repeat(n))),
        Just(json!([])),
        Just(json!({})),
    ]
}

fn json_edit() -> impl Strategy<Value = JsonEdit> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "name",
            "priority",
            "match",
            "detours",
            "tenant",
            "ops",
            "path_prefix",
            "range",
            "stages",
            "rules",
            "next",
            "size_bytes",
            "phase",
            "quiesce",
            "caches",
            "extra",
        ])
        .prop_map(String::from),
        "[a-z_]{1,12}",
    ];
    prop_oneof![
        4 => (any::<Index>(), boundary_value()).prop_map(|(i, v)| JsonEdit::Replace(i, v)),
        2 => any::<Index>().prop_map(JsonEdit::Remove),
        1 => (any::<Index>(), key, boundary_value()).prop_map(|(i, k, v)| JsonEdit::AddKey(i, k, v)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| JsonEdit::Graft(a, b)),
        2 => (any::<Index>(), any::<i8>()).prop_map(|(i, d)| JsonEdit::Nudge(i, d)),
        1 => (any::<Index>(), 1u8..=200).prop_map(|(i, d)| JsonEdit::Nest(i, d)),
    ]
}

#[derive(Debug, Clone)]
enum Step {
    Key(String),
    At(usize),
}

/// Every node's path, in pre-order (the root first).
fn paths(v: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                here.push(Step::Key(k.clone()));
                paths(c, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                here.push(Step::At(i));
                paths(c, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn node<'a>(v: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(v, |v, s| match s {
        Step::Key(k) => &mut v[k.as_str()],
        Step::At(i) => &mut v[*i],
    })
}

fn pick(v: &Value, i: &Index) -> Vec<Step> {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    all.swap_remove(i.index(all.len()))
}

/// The node `i` picks, for editing.
fn node_at<'a>(v: &'a mut Value, i: &Index) -> &'a mut Value {
    let p = pick(v, i);
    node(v, &p)
}

fn apply_json(mut v: Value, e: &JsonEdit) -> Value {
    match e {
        JsonEdit::Replace(i, new) => *node_at(&mut v, i) = new.clone(),
        JsonEdit::Remove(i) => {
            let mut p = pick(&v, i);
            if let Some(last) = p.pop() {
                match (node(&mut v, &p), last) {
                    (Value::Object(m), Step::Key(k)) => {
                        m.remove(&k);
                    }
                    (Value::Array(a), Step::At(j)) => {
                        a.remove(j);
                    }
                    _ => {}
                }
            }
        }
        JsonEdit::AddKey(i, k, new) => {
            if let Value::Object(m) = node_at(&mut v, i) {
                m.insert(k.clone(), new.clone());
            }
        }
        JsonEdit::Graft(from, to) => {
            let copy = node_at(&mut v, from).clone();
            *node_at(&mut v, to) = copy;
        }
        JsonEdit::Nudge(i, d) => {
            let n = node_at(&mut v, i);
            if let Some(x) = n.as_u64() {
                *n = json!(x.wrapping_add_signed(*d as i64));
            } else if let Some(x) = n.as_i64() {
                *n = json!(x.wrapping_add(*d as i64));
            } else if let Some(x) = n.as_f64() {
                *n = json!(x * 2f64.powi(*d as i32));
            }
        }
        JsonEdit::Nest(i, depth) => {
            let n = node_at(&mut v, i);
            let mut inner = n.take();
            for level in 0..*depth {
                inner = if level % 2 == 0 {
                    Value::Array(vec![inner])
                } else {
                    Value::Object(Map::from_iter([("k".to_string(), inner)]))
                };
            }
            *n = inner;
        }
    }
    v
}

/// A JSON seed with one to three tree edits, as text. Seeds that are not JSON are left out;
/// there must be some that are.
pub fn json_from(seeds: &[Seed]) -> impl Strategy<Value = Input> {
    let docs: Vec<Value> = seeds
        .iter()
        .filter_map(|s| serde_json::from_slice(&s.bytes).ok())
        .collect();
    assert!(!docs.is_empty(), "no JSON seeds to edit");
    (any::<Index>(), prop::collection::vec(json_edit(), 1..4)).prop_map(move |(s, edits)| {
        let doc = edits
            .iter()
            .fold(docs[s.index(docs.len())].clone(), apply_json);
        // serde_json writes a nest deeper than its own reader takes; the decoder must refuse it.
        Input(serde_json::to_vec(&doc).expect("a Value serializes"))
    })
}
