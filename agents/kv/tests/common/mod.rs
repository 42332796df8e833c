//! The `lachesis-kv` binary as a real process, and a blocking memcached text client.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// A running `lachesis-kv`; killed when dropped.
pub struct Server {
    pub child: Child,
    /// Every address it listens on, in the order printed (the main one first).
    pub addrs: Vec<String>,
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        let listeners = 1 + args.iter().filter(|a| a.contains("=port:")).count();
        let mut child = Command::new(env!("CARGO_BIN_EXE_lachesis-kv"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start lachesis-kv");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut addrs = Vec::new();
        while addrs.len() < listeners {
            let mut line = String::new();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "lachesis-kv exited before listening"
            );
            if let Some(a) = line.trim().strip_prefix("listening on ") {
                addrs.push(a.to_string());
            }
        }
        Server { child, addrs }
    }

    pub fn port(&self) -> u16 {
        self.addrs[0].rsplit_once(':').unwrap().1.parse().unwrap()
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.addrs[0])
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Client {
    pub r: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(addr: &str) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        Client {
            r: BufReader::new(s),
        }
    }

    pub fn send(&mut self, b: &[u8]) {
        self.r.get_mut().write_all(b).unwrap();
    }

    /// One reply line, without its `\r\n` ("" at end of stream).
    pub fn line(&mut self) -> String {
        let mut v = Vec::new();
        self.r.read_until(b'\n', &mut v).unwrap();
        String::from_utf8_lossy(&v)
            .trim_end_matches("\r\n")
            .to_string()
    }

    pub fn cmd(&mut self, b: &str) -> String {
        self.send(b.as_bytes());
        self.line()
    }

    pub fn set(&mut self, key: &str, value: &[u8]) -> String {
        self.send(format!("set {key} 0 0 {}\r\n", value.len()).as_bytes());
        self.send(value);
        self.send(b"\r\n");
        self.line()
    }

    /// The value of `key`, or `None` on a miss.
    pub fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.send(format!("get {key}\r\n").as_bytes());
        let l = self.line();
        if l == "END" {
            return None;
        }
        let n: usize = l
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{l}"));
        let mut v = vec![0; n + 2];
        self.r.read_exact(&mut v).unwrap();
        v.truncate(n);
        assert_eq!(self.line(), "END");
        Some(v)
    }

    /// The `STAT` lines of `stats [arg]` as (name, value).
    pub fn stats(&mut self, arg: &str) -> Vec<(String, String)> {
        self.send(format!("stats {arg}\r\n").trim_end().as_bytes());
        self.send(b"\r\n");
        let mut out = Vec::new();
        loop {
            let l = self.line();
            if l == "END" || l.is_empty() {
                return out;
            }
            let mut p = l.splitn(3, ' ');
            p.next();
            out.push((
                p.next().unwrap().to_string(),
                p.next().unwrap_or("").to_string(),
            ));
        }
    }

    pub fn stat(&mut self, arg: &str, name: &str) -> Option<String> {
        self.stats(arg)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
}

/// Whether a tool is on PATH; under `CI=true` a missing one fails the test.
pub fn have(tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{tool} is not installed (CI=true: a missing prerequisite fails); ./lachesis installs it"
        );
        eprintln!("SKIPPED: {tool} is not installed");
    }
    found
}
