//! Shared by kvload's tests: the binary, a real memcached on a free port, a fake server.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub fn kvload(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lachesis-kvload"))
        .args(args)
        .output()
        .expect("run lachesis-kvload")
}

/// Runs kvload, expects success, returns its JSON report.
pub fn report(args: &[&str]) -> serde_json::Value {
    let out = kvload(args);
    assert!(
        out.status.success(),
        "kvload {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

/// `$MEMCACHED`, `/usr/bin/memcached` or the first on `PATH`. `./lachesis` installs it, so a
/// missing memcached fails the test rather than skipping it.
fn memcached_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("MEMCACHED") {
        return p.into();
    }
    let fixed = Path::new("/usr/bin/memcached");
    if fixed.exists() {
        return fixed.into();
    }
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("memcached"))
                .find(|c| c.exists())
        })
        .expect("memcached is not installed (./lachesis installs the Debian package)")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A memcached child, killed on drop.
pub struct Memcached {
    child: Child,
    pub addr: String,
}

impl Memcached {
    /// `extra`: more flags, e.g. `-I 1k` for a small item limit.
    ///
    /// Tests run in parallel and each picks a free port by binding port 0 and letting it go,
    /// so two memcacheds can be handed the same port: the second fails to bind and exits while
    /// the first answers its connect. A server is only ours when its `stats` reports our
    /// child's pid; otherwise the start is retried on another port (counted, not timed).
    pub fn start(mib: u32, extra: &[&str]) -> Memcached {
        for _ in 0..20 {
            if let Some(m) = Self::try_start(mib, extra) {
                return m;
            }
        }
        panic!("memcached did not start on any of 20 free ports");
    }

    fn try_start(mib: u32, extra: &[&str]) -> Option<Memcached> {
        let port = free_port();
        let child = Command::new(memcached_binary())
            .args(["-u", "root", "-l", "127.0.0.1", "-t", "2", "-U", "0"])
            .args(["-p", &port.to_string(), "-m", &mib.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start memcached");
        let mut m = Memcached {
            child,
            addr: format!("127.0.0.1:{port}"),
        };
        // Counted poll: memcached listens within a few tries.
        for _ in 0..200 {
            if m.child.try_wait().expect("wait on memcached").is_some() {
                return None; // it could not bind: the port was taken
            }
            if let Some(pid) = server_pid(&m.addr) {
                return (pid == m.child.id()).then_some(m);
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("memcached did not listen on {}", m.addr);
    }
}

/// The pid the memcached listening on `addr` reports in `stats`, or None if none answers.
fn server_pid(addr: &str) -> Option<u32> {
    use std::io::{BufRead, BufReader, Write};
    let mut s = TcpStream::connect(addr).ok()?;
    s.write_all(b"stats\r\n").ok()?;
    for line in BufReader::new(s).lines() {
        let line = line.ok()?;
        if let Some(pid) = line.strip_prefix("STAT pid ") {
            return pid.trim().parse().ok();
        }
        if line.starts_with("END") {
            return None;
        }
    }
    None
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn u(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64().unwrap_or_else(|| {
        x.as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{path:?}: {x}"))
    })
}
