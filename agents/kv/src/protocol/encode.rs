//! A command's wire form: what a client would send for it. Forwarding to another front end
//! sends this; `parse(encode(c))` is `c` again (the round-trip test).

use super::{Command, MetaKind, StoreMode};

fn noreply(out: &mut Vec<u8>, nr: bool) {
    if nr {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

fn key_line(out: &mut Vec<u8>, name: &str, key: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
}

pub fn encode(cmd: &Command) -> Vec<u8> {
    let mut out = Vec::new();
    match cmd {
        Command::Get { keys, cas, touch } => {
            let name = match (touch.is_some(), cas) {
                (false, false) => "get",
                (false, true) => "gets",
                (true, false) => "gat",
                (true, true) => "gats",
            };
            out.extend_from_slice(name.as_bytes());
            if let Some(t) = touch {
                out.extend_from_slice(format!(" {t}").as_bytes());
            }
            for k in keys {
                out.push(b' ');
                out.extend_from_slice(k);
            }
            out.extend_from_slice(b"\r\n");
        }
        Command::Store {
            mode,
            key,
            flags,
            exptime,
            data,
            noreply: nr,
        } => {
            key_line(&mut out, mode.name(), key);
            out.extend_from_slice(format!(" {flags} {exptime} {}", data.len()).as_bytes());
            if let StoreMode::Cas(c) = mode {
                out.extend_from_slice(format!(" {c}").as_bytes());
            }
            noreply(&mut out, *nr);
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        Command::Delete { key, noreply: nr } => {
            key_line(&mut out, "delete", key);
            noreply(&mut out, *nr);
        }
        Command::Touch {
            key,
            exptime,
            noreply: nr,
        } => {
            key_line(&mut out, "touch", key);
            out.extend_from_slice(format!(" {exptime}").as_bytes());
            noreply(&mut out, *nr);
        }
        Command::Arith {
            incr,
            key,
            delta,
            noreply: nr,
        } => {
            key_line(&mut out, if *incr { "incr" } else { "decr" }, key);
            out.extend_from_slice(format!(" {delta}").as_bytes());
            noreply(&mut out, *nr);
        }
        Command::FlushAll { delay, noreply: nr } => {
            out.extend_from_slice(format!("flush_all {delay}").as_bytes());
            noreply(&mut out, *nr);
        }
        Command::Stats { arg } => {
            out.extend_from_slice(b"stats");
            if let Some(a) = arg {
                out.push(b' ');
                out.extend_from_slice(a.as_bytes());
            }
            out.extend_from_slice(b"\r\n");
        }
        Command::Verbosity { level, noreply: nr } => {
            out.extend_from_slice(format!("verbosity {level}").as_bytes());
            noreply(&mut out, *nr);
        }
        Command::Version => out.extend_from_slice(b"version\r\n"),
        Command::Quit => out.extend_from_slice(b"quit\r\n"),
        Command::Meta(m) => {
            out.extend_from_slice(m.kind.name().as_bytes());
            if m.kind != MetaKind::Noop {
                out.push(b' ');
                out.extend_from_slice(&m.key);
            }
            if m.kind == MetaKind::Set {
                out.extend_from_slice(format!(" {}", m.data.len()).as_bytes());
            }
            for f in &m.flags {
                out.push(b' ');
                out.push(f.flag);
                out.extend_from_slice(&f.token);
            }
            out.extend_from_slice(b"\r\n");
            if m.kind == MetaKind::Set {
                out.extend_from_slice(&m.data);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
    out
}
