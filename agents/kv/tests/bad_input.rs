//! Bad input over real sockets: junk, oversized keys and values, a half-sent value, a
//! client that never reads. Each gets memcached's error line (or a closed connection), the
//! server does not fall over, and another connection keeps being served throughout.

mod common;

use common::Server;

fn still_served(server: &Server) {
    let mut c = server.client();
    assert_eq!(c.set("alive", b"yes"), "STORED");
    assert_eq!(c.get("alive").as_deref(), Some(&b"yes"[..]));
}

#[test]
fn junk_and_malformed_commands_get_error_lines() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("bogus\r\n"), "ERROR");
    assert_eq!(c.cmd("\r\n"), "ERROR");
    c.send(&[0x80, 0x01, 0x00, 0x03, 0xff, 0xfe, b'\r', b'\n']);
    assert_eq!(c.line(), "ERROR");
    assert_eq!(
        c.cmd("set k x 0 1\r\n"),
        "CLIENT_ERROR bad command line format"
    );
    assert_eq!(
        c.cmd("set k 0 0 -1\r\n"),
        "CLIENT_ERROR bad command line format"
    );
    assert_eq!(
        c.cmd("incr k abc\r\n"),
        "CLIENT_ERROR invalid numeric delta argument"
    );
    assert_eq!(
        c.cmd("touch k x\r\n"),
        "CLIENT_ERROR invalid exptime argument"
    );
    assert_eq!(
        c.cmd("delete k 5\r\n"),
        "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
    );
    assert_eq!(c.cmd("mg k v v\r\n"), "CLIENT_ERROR duplicate flag");
    // A value not followed by \r\n: the declared bytes are taken, the rest is a (bad) line,
    // as memcached does.
    c.send(b"set k 0 0 2\r\nabcd\r\n");
    assert_eq!(c.line(), "CLIENT_ERROR bad data chunk");
    assert_eq!(c.line(), "ERROR");
    assert_eq!(c.set("k", b"v"), "STORED");
    assert_eq!(c.set("n", b"nope"), "STORED");
    assert_eq!(
        c.cmd("incr n 1\r\n"),
        "CLIENT_ERROR cannot increment or decrement non-numeric value"
    );
    // The connection is still in step.
    assert_eq!(c.get("k").as_deref(), Some(&b"v"[..]));
    // A line with no end: closed once it passes the longest line.
    let mut j = server.client();
    j.send(&vec![b'x'; 70 << 10]);
    assert_eq!(j.line(), "CLIENT_ERROR line too long");
    assert_eq!(j.line(), "", "closed after the error");
    still_served(&server);
    assert_eq!(
        c.stat("lachesis", "connections:closed_bad_input")
            .as_deref(),
        Some("1")
    );
}

#[test]
fn oversized_keys_and_values_are_refused_and_their_data_skipped() {
    let server = Server::start(&["--max-item", "1024", "--output-bound", "65536"]);
    let mut c = server.client();
    let long = "k".repeat(251);
    assert_eq!(
        c.cmd(&format!("get {long}\r\n")),
        "CLIENT_ERROR bad command line format"
    );
    // The value of a set with a bad key is skipped, not read as commands.
    c.send(format!("set {long} 0 0 5\r\nget x\r\n").as_bytes());
    assert_eq!(c.line(), "CLIENT_ERROR bad command line format");
    assert_eq!(c.set("big", b"old"), "STORED");
    // Too large: refused, its bytes swallowed as they come, the old value dropped.
    c.send(b"set big 0 0 5000\r\n");
    assert_eq!(c.line(), "SERVER_ERROR object too large for cache");
    c.send(&vec![b'z'; 3000]);
    c.send(&vec![b'z'; 2000]);
    c.send(b"\r\n");
    assert_eq!(
        c.get("big"),
        None,
        "a failed set drops the old value, as memcached"
    );
    c.send(b"ms big 5000 T0\r\n");
    assert_eq!(c.line(), "SERVER_ERROR object too large for cache");
    c.send(&vec![b'y'; 5002]);
    assert_eq!(c.set("fits", &[b'a'; 1024]), "STORED");
    assert_eq!(c.get("fits").map(|v| v.len()), Some(1024));
    still_served(&server);
}

#[test]
fn a_half_sent_value_waits_while_others_are_served() {
    let server = Server::start(&[]);
    let mut half = server.client();
    half.send(b"set h 0 0 10\r\nabcde");
    // Served meanwhile.
    still_served(&server);
    let mut c = server.client();
    assert_eq!(c.get("h"), None);
    half.send(b"fghij\r\n");
    assert_eq!(half.line(), "STORED");
    assert_eq!(c.get("h").as_deref(), Some(&b"abcdefghij"[..]));
}

#[test]
fn a_client_that_never_reads_is_closed_and_counted() {
    let server = Server::start(&["--max-item", "65536", "--output-bound", "262144"]);
    let mut c = server.client();
    assert_eq!(c.set("v", &vec![b'v'; 60000]), "STORED");
    // Asks for far more than the output bound plus what the kernel buffers, reads nothing.
    let mut greedy = server.client();
    let mut closed = false;
    for _ in 0..2000 {
        use std::io::Write;
        if greedy
            .r
            .get_mut()
            .write_all(b"get v v v v v v v v v v\r\n")
            .is_err()
        {
            closed = true;
            break;
        }
        // Counted poll: the server closes it once its unsent replies pass the bound.
        if c.stat("lachesis", "connections:closed_output_bound")
            .as_deref()
            == Some("1")
        {
            closed = true;
            break;
        }
    }
    assert!(closed, "the non-reading client was never closed");
    assert_eq!(
        c.stat("lachesis", "connections:closed_output_bound")
            .as_deref(),
        Some("1")
    );
    still_served(&server);
}
