//! The command line: help, exit 2 on bad arguments (nothing sent), exit 1 with a message when
//! the server is unreachable or answers outside the protocol.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use common::kvload;

#[test]
fn help_names_the_workload_flags() {
    let out = kvload(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--server",
        "--threads",
        "--pipeline",
        "--dist",
        "--value-size",
        "--mode",
        "--tenant",
        "--prefill",
        "--warmup",
        "--duration",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn bad_arguments_exit_2_with_the_flag_named() {
    // A listener that must see no connection: bad arguments send nothing.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let server = l.local_addr().unwrap().to_string();
    for (args, flag) in [
        (&["--threads", "0"][..], "--threads"),
        (&["--value-size", "300-50"], "--value-size"),
        (&["--dist", "zipf:x"], "--dist"),
        (&["--mode", "write-only"], "--mode"),
        (&["--tenant", "has space"], "--tenant"),
        (&["--get-ratio", "2"], "--get-ratio"),
        (&["--keys", "abc"], "--keys"),
    ] {
        let mut argv = vec!["--server", &server];
        argv.extend_from_slice(args);
        let out = kvload(&argv);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: no report");
    }
    assert!(l.accept().is_err(), "bad arguments connected to the server");
}

#[test]
fn an_unreachable_server_exits_1() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = format!("127.0.0.1:{port}");
    let out = kvload(&["--server", &server, "--requests", "1", "-q"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&server), "{err}");
}

#[test]
fn a_reply_outside_the_protocol_stops_the_run() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = l.local_addr().unwrap().to_string();
    // A fake server: answers `stats` like memcached and a get with a line no get allows.
    let (seen, commands) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming().map_while(Result::ok) {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut lines = BufReader::new(s.try_clone().unwrap()).lines();
                while let Some(Ok(line)) = lines.next() {
                    let reply: &[u8] = match line.as_str() {
                        "stats" => b"STAT pid 1\r\nEND\r\n",
                        "stats lachesis" => b"ERROR\r\n",
                        _ => b"STORED\r\n",
                    };
                    let _ = seen.send(line);
                    if (&s).write_all(reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let out = kvload(&["--server", &server, "--requests", "5", "-q"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unexpected reply"), "{err}");
    assert!(out.stdout.is_empty());
    let gets = commands
        .try_iter()
        .filter(|c| c.starts_with("get "))
        .count();
    assert_eq!(gets, 1, "the run stopped at the first bad reply");
}
