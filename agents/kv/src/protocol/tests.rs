use proptest::prelude::*;

use super::*;

fn limits() -> Limits {
    Limits {
        max_item: 1024,
        max_line: 4096,
    }
}

fn one(input: &[u8]) -> Parse {
    parse(input, &limits())
}

fn cmd(input: &[u8]) -> Command {
    match one(input) {
        Parse::Command { cmd, used } => {
            assert_eq!(used, input.len(), "{:?}", String::from_utf8_lossy(input));
            cmd
        }
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
    }
}

fn err(input: &[u8]) -> &'static str {
    match one(input) {
        Parse::Error { reply, .. } => reply,
        Parse::Swallow { reply, .. } => reply,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
    }
}

#[test]
fn text_commands_parse_as_memcached_reads_them() {
    assert_eq!(
        cmd(b"gets a bb\r\n"),
        Command::Get {
            keys: vec![b"a".to_vec(), b"bb".to_vec()],
            cas: true,
            touch: None
        }
    );
    assert_eq!(
        cmd(b"gat 10 a\r\n"),
        Command::Get {
            keys: vec![b"a".to_vec()],
            cas: false,
            touch: Some(10)
        }
    );
    assert_eq!(
        cmd(b"cas k 5 -1 3 99 noreply\r\nabc\r\n"),
        Command::Store {
            mode: StoreMode::Cas(99),
            key: b"k".to_vec(),
            flags: 5,
            exptime: -1,
            data: b"abc".to_vec(),
            noreply: true
        }
    );
    assert_eq!(
        cmd(b"delete k 0 noreply\r\n"),
        Command::Delete {
            key: b"k".to_vec(),
            noreply: true
        }
    );
    assert_eq!(
        cmd(b"incr k 18446744073709551615\n"),
        Command::Arith {
            incr: true,
            key: b"k".to_vec(),
            delta: u64::MAX,
            noreply: false
        }
    );
    assert_eq!(
        cmd(b"flush_all 30\r\n"),
        Command::FlushAll {
            delay: 30,
            noreply: false
        }
    );
    assert_eq!(
        cmd(b"stats lachesis\r\n"),
        Command::Stats {
            arg: Some("lachesis".into())
        }
    );
    assert_eq!(cmd(b"version x\r\n"), Command::Version);
    assert_eq!(
        cmd(b"verbosity noreply\r\n"),
        Command::Verbosity {
            level: 0,
            noreply: true
        }
    );
    let Command::Meta(m) = cmd(b"mg key v c t Oab T30\r\n") else {
        panic!()
    };
    assert_eq!((m.kind, m.key.as_slice()), (MetaKind::Get, &b"key"[..]));
    assert_eq!(m.token(b'O'), Some(&b"ab"[..]));
    assert_eq!(m.number::<i64>(b'T'), Ok(Some(30)));
    let Command::Meta(m) = cmd(b"ms key 2 T0 F3\r\nhi\r\n") else {
        panic!()
    };
    assert_eq!(m.data, b"hi");
    assert_eq!(cmd(b"mn\r\n").keys().len(), 0);
}

#[test]
fn incomplete_input_waits_for_exactly_what_it_declared() {
    assert_eq!(one(b"get a"), Parse::Incomplete { need: None });
    assert_eq!(
        one(b"set k 0 0 10\r\nabc"),
        Parse::Incomplete {
            need: Some(14 + 12)
        }
    );
    assert_eq!(
        one(b"set k 0 0 3\r\nabc\r"),
        Parse::Incomplete { need: Some(13 + 5) }
    );
    // Two commands: the first is taken alone.
    match one(b"get a\r\nget b\r\n") {
        Parse::Command { used, .. } => assert_eq!(used, 7),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_input_gets_memcached_error_lines() {
    assert_eq!(err(b"nonsense\r\n"), reply::ERROR);
    assert_eq!(err(b"\r\n"), reply::ERROR);
    assert_eq!(err(b"get\r\n"), reply::ERROR);
    assert_eq!(
        err(&[b"get ".to_vec(), vec![b'k'; 251], b"\r\n".to_vec()].concat()),
        reply::BAD_FORMAT
    );
    assert_eq!(err(b"set k 0 0 x\r\n"), reply::BAD_FORMAT);
    assert_eq!(err(b"set k 0 0 2\r\nabc\r\n"), reply::BAD_CHUNK);
    assert_eq!(err(b"incr k -1\r\n"), reply::INVALID_DELTA);
    assert_eq!(err(b"touch k z\r\n"), reply::INVALID_EXPTIME);
    assert_eq!(err(b"delete k 1\r\n"), reply::BAD_DELETE);
    assert_eq!(err(b"mg k 1\r\n"), reply::INVALID_FLAG);
    assert_eq!(err(b"ms k\r\n"), reply::BAD_FORMAT);
    assert_eq!(
        one(b"set k 0 0 2000\r\n"),
        Parse::Swallow {
            reply: reply::TOO_LARGE,
            used: 16,
            skip: 2002,
            unlink: Some(b"k".to_vec())
        }
    );
    match one(&vec![b'x'; 5000]) {
        Parse::Error {
            reply, close: true, ..
        } => assert_eq!(reply, reply::LINE_TOO_LONG),
        other => panic!("{other:?}"),
    }
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0x21u8..0x7f, 1..=MAX_KEY)
}

fn command() -> impl Strategy<Value = Command> {
    let data = proptest::collection::vec(any::<u8>(), 0..64);
    let mode = prop_oneof![
        Just(StoreMode::Set),
        Just(StoreMode::Add),
        Just(StoreMode::Replace),
        Just(StoreMode::Append),
        Just(StoreMode::Prepend),
        any::<u64>().prop_map(StoreMode::Cas),
    ];
    let flag = (
        prop_oneof![
            Just(b'v'),
            Just(b'k'),
            Just(b'c'),
            Just(b'f'),
            Just(b'T'),
            Just(b'O'),
            Just(b'q')
        ],
        proptest::collection::vec(0x21u8..0x7f, 0..5),
    );
    prop_oneof![
        (
            proptest::collection::vec(key(), 1..4),
            any::<bool>(),
            proptest::option::of(any::<i64>())
        )
            .prop_map(|(keys, cas, touch)| Command::Get { keys, cas, touch }),
        (
            mode,
            key(),
            any::<u32>(),
            any::<i64>(),
            data.clone(),
            any::<bool>()
        )
            .prop_map(
                |(mode, key, flags, exptime, data, noreply)| Command::Store {
                    mode,
                    key,
                    flags,
                    exptime,
                    data,
                    noreply
                }
            ),
        (key(), any::<bool>()).prop_map(|(key, noreply)| Command::Delete { key, noreply }),
        (key(), any::<i64>(), any::<bool>()).prop_map(|(key, exptime, noreply)| Command::Touch {
            key,
            exptime,
            noreply
        }),
        (any::<bool>(), key(), any::<u64>(), any::<bool>()).prop_map(
            |(incr, key, delta, noreply)| Command::Arith {
                incr,
                key,
                delta,
                noreply
            }
        ),
        (any::<i64>(), any::<bool>())
            .prop_map(|(delay, noreply)| Command::FlushAll { delay, noreply }),
        Just(Command::Version),
        Just(Command::Quit),
        (
            prop_oneof![
                Just(MetaKind::Get),
                Just(MetaKind::Set),
                Just(MetaKind::Delete)
            ],
            key(),
            proptest::collection::vec(flag, 0..4),
            data
        )
            .prop_map(|(kind, key, flags, data)| {
                let mut seen = Vec::new();
                let flags = flags
                    .into_iter()
                    .filter(|(f, _)| {
                        let new = !seen.contains(f);
                        seen.push(*f);
                        new
                    })
                    .map(|(flag, token)| MetaFlag { flag, token })
                    .collect();
                let data = if kind == MetaKind::Set {
                    data
                } else {
                    Vec::new()
                };
                Command::Meta(Meta {
                    kind,
                    key,
                    flags,
                    data,
                })
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A command's wire form parses back to the command, byte for byte consumed, and so
    /// does every prefix wait for more.
    #[test]
    fn encode_then_parse_is_the_command(c in command(), cut in any::<prop::sample::Index>()) {
        let wire = encode(&c);
        let l = Limits { max_item: 1 << 20, max_line: 64 << 10 };
        prop_assert_eq!(parse(&wire, &l), Parse::Command { cmd: c, used: wire.len() });
        let at = cut.index(wire.len());
        let incomplete = matches!(parse(&wire[..at], &l), Parse::Incomplete { .. });
        prop_assert!(incomplete, "prefix of {} bytes", at);
    }
}
