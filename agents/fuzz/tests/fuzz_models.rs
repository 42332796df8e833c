//! Generated well-formed inputs read back as what they were written from: each trace format
//! against a model of its expansion (plain and zstd-compressed), forwarding frames through
//! their encoder, rules files through serde. Bounded, derandomized cases
//! (`lachesis_fuzz::run::fuzz`).

use std::io::Write;

use lachesis_fs::config::parse;
use lachesis_fs::remote::frame::{Frame, Op as FrameOp};
use lachesis_fuzz::run::fuzz;
use lachesis_mrc::hash::key_of_bytes;
use lachesis_mrc::trace::{self, Format, Progress, Request};
use lachesis_mrc::Op;
use lachesis_switch::{
    ByteRange, CacheConfig, CacheEngine, Detour, DetourKind, DetourWhat, Eviction, Match, Nullable,
    Op as IoOp, Rule, StageConfig, WriteMode,
};
use proptest::prelude::*;

/// Reads `text` as a trace of `format`, once as written and once zstd-compressed.
fn read_back(format: Format, text: &[u8]) -> Vec<Request> {
    let mut out = Vec::new();
    for compressed in [false, true] {
        let bytes = if compressed {
            zstd::encode_all(text, 3).unwrap()
        } else {
            text.to_vec()
        };
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&bytes).unwrap();
        let got = trace::read_all(f.path(), format, Progress::Hidden)
            .unwrap_or_else(|e| panic!("{format:?} (zstd: {compressed}): {e}"));
        if compressed {
            assert_eq!(got, out, "{format:?}: compressed and plain differ");
        } else {
            out = got;
        }
    }
    out
}

fn sep() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![" ", "  ", "\t", " \t"])
}

#[test]
fn arc_lines_expand_to_their_blocks() {
    let line = (
        0u64..1 << 40,
        0u64..40,
        any::<u64>(),
        any::<u64>(),
        sep(),
        any::<bool>(),
    );
    fuzz(
        "model_arc",
        128,
        prop::collection::vec(line, 0..20),
        |lines| {
            let mut text = String::new();
            let mut want = Vec::new();
            for (start, n, ignore, req, s, blank) in lines {
                if *blank {
                    text.push('\n');
                }
                text.push_str(&format!("{start}{s}{n}{s}{ignore}{s}{req}\r\n"));
                want.extend((*start..start + n).map(|key| Request {
                    key,
                    size: 512,
                    op: Op::Read,
                    time: *req,
                }));
            }
            assert_eq!(read_back(Format::Arc, text.as_bytes()), want);
        },
    );
}

#[test]
fn msr_rows_expand_to_their_4k_blocks() {
    let row = (
        any::<u64>(),
        "[a-z]{1,6}",
        0u8..10,
        prop::sample::select(vec![
            ("Read", Op::Read),
            ("Write", Op::Write),
            ("read", Op::Read),
            ("WRITE", Op::Write),
        ]),
        0u64..1 << 44,
        0u64..200_000,
        any::<u32>(),
    );
    fuzz(
        "model_msr",
        128,
        (any::<bool>(), prop::collection::vec(row, 0..12)),
        |(header, rows)| {
            let mut text = String::new();
            if *header {
                text.push_str("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n");
            }
            let mut want = Vec::new();
            for (ts, host, disk, (ty, op), offset, size, resp) in rows {
                text.push_str(&format!("{ts},{host},{disk},{ty},{offset},{size},{resp}\n"));
                let first = offset / 4096;
                let last = if *size == 0 {
                    first
                } else {
                    (offset + size - 1) / 4096
                };
                want.extend((first..=last).map(|key| Request {
                    key,
                    size: 4096,
                    op: *op,
                    time: *ts,
                }));
            }
            assert_eq!(read_back(Format::Msr, text.as_bytes()), want);
        },
    );
}

#[test]
fn cloudphysics_rows_are_one_request_each() {
    let op = prop::sample::select(vec![
        (0x28u8, Op::Read),
        (0x88, Op::Read),
        (0x2a, Op::Write),
        (0xaa, Op::Write),
        (0x35, Op::Other),
        (0x00, Op::Other),
    ]);
    let row = (
        any::<u8>(),
        any::<u64>(),
        op,
        any::<u32>(),
        any::<u64>(),
        any::<bool>(),
    );
    fuzz(
        "model_cloudphysics",
        128,
        prop::collection::vec(row, 0..16),
        |rows| {
            let mut text = String::from("version,time,op,size,lbn\n");
            let mut want = Vec::new();
            for (version, time, (code, op), size, lbn, upper) in rows {
                let code = if *upper {
                    format!("{code:X}")
                } else {
                    format!("{code:x}")
                };
                text.push_str(&format!("{version},{time},{code},{size},{lbn}\n"));
                want.push(Request {
                    key: *lbn,
                    size: *size,
                    op: *op,
                    time: *time,
                });
            }
            assert_eq!(read_back(Format::CloudPhysics, text.as_bytes()), want);
        },
    );
}

#[test]
fn oracle_records_read_as_written() {
    let rec = (any::<u32>(), any::<u64>(), any::<u32>(), any::<i64>());
    fuzz(
        "model_oracle",
        128,
        prop::collection::vec(rec, 0..32),
        |recs| {
            let mut bytes = Vec::new();
            let mut want = Vec::new();
            for (time, id, size, next) in recs {
                bytes.extend_from_slice(&time.to_le_bytes());
                bytes.extend_from_slice(&id.to_le_bytes());
                bytes.extend_from_slice(&size.to_le_bytes());
                bytes.extend_from_slice(&next.to_le_bytes());
                want.push(Request {
                    key: *id,
                    size: *size,
                    op: Op::Read,
                    time: *time as u64,
                });
            }
            assert_eq!(read_back(Format::Oracle, &bytes), want);
        },
    );
}

#[test]
fn lines_keys_are_numbers_or_hashes() {
    let key = prop_oneof![
        any::<u64>().prop_map(|k| k.to_string()),
        "[a-z:/._-][a-z0-9:/._-]{0,15}",
    ];
    let sep = prop::sample::select(vec![" ", "\t", ","]);
    let line = (key, prop::option::of((sep, any::<u32>())), any::<bool>());
    fuzz(
        "model_lines",
        128,
        prop::collection::vec(line, 0..24),
        |lines| {
            let mut text = String::new();
            let mut want = Vec::new();
            for (key, size, blank) in lines {
                if *blank {
                    text.push_str("  \n");
                }
                match size {
                    Some((s, n)) => text.push_str(&format!("{key}{s}{n}\n")),
                    None => text.push_str(&format!("{key}\n")),
                }
                // The reader numbers requests by their line.
                let time = text.lines().count() as u64;
                let k = key
                    .parse::<u64>()
                    .unwrap_or_else(|_| key_of_bytes(key.as_bytes()));
                want.push(Request {
                    key: k,
                    size: size.map_or(1, |(_, n)| n),
                    op: Op::Read,
                    time,
                });
            }
            assert_eq!(read_back(Format::Lines, text.as_bytes()), want);
        },
    );
}

fn frame() -> impl Strategy<Value = Frame> {
    let op = prop::sample::select(vec![
        FrameOp::Read,
        FrameOp::Write,
        FrameOp::Fsync,
        FrameOp::Truncate,
        FrameOp::Getattr,
        FrameOp::Rename,
        FrameOp::Reply,
    ]);
    (
        any::<u64>(),
        op,
        any::<i32>(),
        any::<u64>(),
        any::<u64>(),
        "\\PC{0,64}",
        prop::collection::vec(any::<u8>(), 0..2048),
    )
        .prop_map(|(id, op, status, offset, len, path, data)| Frame {
            id,
            op,
            status,
            offset,
            len,
            path,
            data,
        })
}

#[test]
fn frames_stream_back_as_encoded() {
    fuzz(
        "model_frame",
        256,
        prop::collection::vec(frame(), 1..6),
        |frames| {
            let stream: Vec<u8> = frames.iter().flat_map(|f| f.encode()).collect();
            let mut r = &stream[..];
            for f in frames {
                assert_eq!(&Frame::read_from(&mut r).unwrap(), f);
            }
            let end = Frame::read_from(&mut r).unwrap_err();
            assert_eq!(end.kind(), std::io::ErrorKind::UnexpectedEof);
        },
    );
}

fn nullable<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Nullable<T>> {
    prop_oneof![
        Just(Nullable::Absent),
        Just(Nullable::Null),
        s.prop_map(Nullable::Value)
    ]
    .boxed()
}

fn a_match() -> impl Strategy<Value = Match> {
    (
        nullable("[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?"),
        prop::option::of(prop::sample::subsequence(IoOp::ALL.to_vec(), 0..=4)),
        nullable("/\\PC{0,12}"),
        nullable("\\PC{1,12}"),
        nullable((any::<u64>(), 1u64..1 << 20).prop_map(|(s, n)| {
            let s = s >> 1;
            ByteRange::new(s, s + n)
        })),
    )
        .prop_map(|(tenant, ops, path_prefix, key_prefix, range)| Match {
            tenant,
            ops,
            path_prefix,
            key_prefix,
            range,
        })
}

fn cache(name: String) -> impl Strategy<Value = StageConfig> {
    (
        prop::sample::select(vec![
            CacheEngine::Dram,
            CacheEngine::Loc,
            CacheEngine::Kangaroo,
            CacheEngine::Hybrid,
            CacheEngine::Fairywren,
            CacheEngine::HybridFairywren,
        ]),
        0u64..1 << 40,
        prop::sample::select(vec![WriteMode::Through, WriteMode::Back, WriteMode::Around]),
        prop::sample::select(vec![Eviction::Lru, Eviction::Fifo]),
        4096u64..1 << 30,
    )
        .prop_map(
            move |(engine, size_bytes, write_mode, eviction, max_dirty_bytes)| {
                StageConfig::Cache(CacheConfig {
                    name: name.clone(),
                    owner: None,
                    engine,
                    size_bytes,
                    write_mode,
                    eviction,
                    max_dirty_bytes,
                    device: None,
                    placement: vec![],
                    next: None,
                    serves: None,
                    exclusive: false,
                })
            },
        )
}

/// Rules with unique names whose stage detours name declared stages, and those stages.
fn rules_file() -> impl Strategy<Value = (Vec<Rule>, Vec<StageConfig>)> {
    (1usize..4).prop_flat_map(|n_stages| {
        let stages: Vec<_> = (0..n_stages)
            .map(|i| cache(format!("cache/s{i}")))
            .collect();
        let detour = prop_oneof![
            (0..n_stages).prop_map(|i| Detour::new(
                DetourWhat::Io,
                DetourKind::Stage,
                format!("cache/s{i}")
            )),
            "/[a-z]{1,8}".prop_map(|t| Detour::new(DetourWhat::Io, DetourKind::File, t)),
            Just(Detour::new(
                DetourWhat::Header,
                DetourKind::Controller,
                "controller"
            )),
        ];
        let rule = (
            0u32..=1_000_000,
            a_match(),
            prop::collection::vec(detour, 1..3),
        );
        (prop::collection::vec(rule, 0..8), stages).prop_map(|(rules, stages)| {
            let rules = rules
                .into_iter()
                .enumerate()
                .map(|(i, (p, m, d))| Rule::new(format!("r{i}"), p, m, d))
                .collect();
            (rules, stages)
        })
    })
}

#[test]
fn rules_files_read_back_as_written() {
    fuzz("model_rules_file", 256, rules_file(), |(rules, stages)| {
        let text = serde_json::json!({"rules": rules, "stages": stages}).to_string();
        let f = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!((&f.rules, &f.stages), (rules, stages));
        let plain = serde_json::to_string(rules).unwrap();
        let with_stage = rules
            .iter()
            .any(|r| r.detours.iter().any(|d| d.to.kind == DetourKind::Stage));
        // Without its stages, a file whose rules name one is refused, by rule and stage.
        match parse(&plain) {
            Ok(f) => assert!(!with_stage && f.rules == *rules),
            Err(e) => assert!(with_stage && e.contains("is not declared"), "{e}"),
        }
    });
}

/// Well-formed desired states (generated rules, stages and match lists, either phase) through
/// the desired-state target's property: decoded, handled by a fresh agent twice and by a
/// stranger, acked right.
#[test]
fn desired_states_are_applied_or_refused_whole() {
    let phase = prop::sample::select(vec![None, Some("install"), Some("quiesce")]);
    let quiesce = prop::collection::vec(a_match(), 0..3);
    fuzz(
        "model_desired_state",
        256,
        (rules_file(), 1u64..1 << 40, phase, quiesce, any::<bool>()),
        |((rules, stages), generation, phase, quiesce, with_stages)| {
            let mut v = serde_json::json!({
                "schema": "lachesis.desired-state/v1", "host_id": "host-a",
                "generation": generation, "rollout_id": null,
                "issued_at": "2026-11-24T00:00:00Z", "traceparent": null,
                "tenants": [{"name": "t", "classifiers": [{"kind": "uid", "value": "1"}]}],
                "rules": rules,
            });
            if *with_stages {
                v["stages"] = serde_json::json!(stages);
            }
            if let Some(p) = phase {
                v["phase"] = serde_json::json!(p);
                if *p == "quiesce" {
                    v["quiesce"] = serde_json::json!(quiesce);
                }
            }
            let text = v.to_string();
            // The schema's rules and stages decode; whether they build is the agent's call.
            assert!(
                serde_json::from_str::<lachesis_agent::bus::DesiredState>(&text).is_ok(),
                "{text}"
            );
            lachesis_fuzz::props::bus::desired_state(text.as_bytes());
        },
    );
}
