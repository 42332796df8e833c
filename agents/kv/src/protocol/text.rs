//! The classic text commands (`get`, `set`, ..., `quit`), argument by argument as memcached
//! 1.6's `proto_text.c` checks them.

use super::{error, num, reply, valid_key, value, Command, Limits, Parse, StoreMode};

/// Whether the last token is `noreply`; the arguments without it.
fn noreply<'a, 'b>(args: &'a [&'b [u8]]) -> (bool, &'a [&'b [u8]]) {
    match args.split_last() {
        Some((&b"noreply", rest)) => (true, rest),
        _ => (false, args),
    }
}

fn key(t: &[u8]) -> Option<Vec<u8>> {
    valid_key(t).then(|| t.to_vec())
}

pub(super) fn parse(
    name: &[u8],
    args: &[&[u8]],
    buf: &[u8],
    used: usize,
    limits: &Limits,
) -> Parse {
    let done = |cmd| Parse::Command { cmd, used };
    let bad_format = || error(reply::BAD_FORMAT, used);
    match name {
        b"get" | b"gets" | b"gat" | b"gats" => {
            let touch = name.starts_with(b"gat");
            let (touch, keys) = if touch {
                let Some((t, keys)) = args.split_first() else {
                    return error(reply::ERROR, used);
                };
                match num::<i64>(t) {
                    Some(e) => (Some(e), keys),
                    None => return error(reply::INVALID_EXPTIME, used),
                }
            } else {
                (None, args)
            };
            if keys.is_empty() {
                return error(reply::ERROR, used);
            }
            let Some(keys) = keys.iter().map(|k| key(k)).collect::<Option<Vec<_>>>() else {
                return bad_format();
            };
            done(Command::Get {
                keys,
                cas: name.ends_with(b"s"),
                touch,
            })
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let (nr, rest) = noreply(args);
            let want = if name == b"cas" { 5 } else { 4 };
            if rest.len() != want {
                return error(reply::ERROR, used);
            }
            let (flags, exptime, len) = (
                num::<u32>(rest[1]),
                num::<i64>(rest[2]),
                num::<i32>(rest[3]),
            );
            let cas = if name == b"cas" {
                num::<u64>(rest[4])
            } else {
                Some(0)
            };
            let (Some(flags), Some(exptime), Some(len), Some(cas)) = (flags, exptime, len, cas)
            else {
                return bad_format();
            };
            let Ok(len) = usize::try_from(len) else {
                return bad_format();
            };
            let Some(k) = key(rest[0]) else {
                // The length is known: the value is skipped rather than read as commands.
                return Parse::Swallow {
                    reply: reply::BAD_FORMAT,
                    used,
                    skip: len + 2,
                    unlink: None,
                };
            };
            if len > limits.max_item {
                return Parse::Swallow {
                    reply: reply::TOO_LARGE,
                    used,
                    skip: len + 2,
                    unlink: (name == b"set" || name == b"cas").then_some(k),
                };
            }
            let mode = match name {
                b"set" => StoreMode::Set,
                b"add" => StoreMode::Add,
                b"replace" => StoreMode::Replace,
                b"append" => StoreMode::Append,
                b"prepend" => StoreMode::Prepend,
                _ => StoreMode::Cas(cas),
            };
            match value(buf, used, len) {
                Err(e) => e,
                Ok(None) => Parse::Incomplete {
                    need: Some(used + len + 2),
                },
                Ok(Some((data, used))) => Parse::Command {
                    cmd: Command::Store {
                        mode,
                        key: k,
                        flags,
                        exptime,
                        data,
                        noreply: nr,
                    },
                    used,
                },
            }
        }
        b"delete" => {
            let Some((k, more)) = args.split_first() else {
                return error(reply::ERROR, used);
            };
            let nr = more.last() == Some(&&b"noreply"[..]);
            let zero = more.first() == Some(&&b"0"[..]);
            let ok = match more.len() {
                0 => true,
                1 => zero || nr,
                2 => zero && nr,
                _ => false,
            };
            if !ok {
                return error(reply::BAD_DELETE, used);
            }
            match key(k) {
                Some(key) => done(Command::Delete { key, noreply: nr }),
                None => bad_format(),
            }
        }
        b"touch" => {
            let (nr, rest) = noreply(args);
            if rest.len() != 2 {
                return error(reply::ERROR, used);
            }
            let Some(k) = key(rest[0]) else {
                return bad_format();
            };
            match num::<i64>(rest[1]) {
                Some(exptime) => done(Command::Touch {
                    key: k,
                    exptime,
                    noreply: nr,
                }),
                None => error(reply::INVALID_EXPTIME, used),
            }
        }
        b"incr" | b"decr" => {
            let (nr, rest) = noreply(args);
            if rest.len() != 2 {
                return error(reply::ERROR, used);
            }
            let Some(k) = key(rest[0]) else {
                return bad_format();
            };
            match num::<u64>(rest[1]) {
                Some(delta) => done(Command::Arith {
                    incr: name == b"incr",
                    key: k,
                    delta,
                    noreply: nr,
                }),
                None => error(reply::INVALID_DELTA, used),
            }
        }
        b"flush_all" => {
            let (nr, rest) = noreply(args);
            match rest {
                [] => done(Command::FlushAll {
                    delay: 0,
                    noreply: nr,
                }),
                [d] => match num::<i64>(d) {
                    Some(delay) => done(Command::FlushAll { delay, noreply: nr }),
                    None => bad_format(),
                },
                _ => error(reply::ERROR, used),
            }
        }
        b"stats" => match args {
            [] => done(Command::Stats { arg: None }),
            [a] => done(Command::Stats {
                arg: Some(String::from_utf8_lossy(a).into_owned()),
            }),
            _ => error(reply::ERROR, used),
        },
        b"verbosity" => match args {
            // memcached reads the level leniently (strtoul: junk is 0), and `verbosity
            // noreply` is level 0 without a reply.
            [l] | [l, _] => done(Command::Verbosity {
                level: num::<u32>(l).unwrap_or(0),
                noreply: args.last() == Some(&&b"noreply"[..]),
            }),
            _ => error(reply::ERROR, used),
        },
        // memcached answers `version` whatever follows it.
        b"version" => done(Command::Version),
        b"quit" if args.is_empty() => done(Command::Quit),
        _ => error(reply::ERROR, used),
    }
}
