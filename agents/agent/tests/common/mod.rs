//! Shared by the tests that run the agent binary against a real redis-server: finding and
//! starting redis-server, the agent child with its log, counted polls, reading streams.
#![allow(dead_code)] // each test uses its part

pub mod openmetrics;

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

use serde_json::Value;

/// `$REDIS_SERVER`, `/usr/bin/redis-server` or the first on `PATH`.
pub fn find_redis_server() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REDIS_SERVER") {
        return Some(PathBuf::from(p));
    }
    let fixed = Path::new("/usr/bin/redis-server");
    if fixed.exists() {
        return Some(fixed.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("redis-server"))
            .find(|p| p.exists())
    })
}

/// Whether a test missing `what` may skip: not under `CI=true`, where that fails it.
pub fn may_skip(what: &str) -> bool {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "missing prerequisite under CI: {what}"
    );
    eprintln!("SKIPPED: missing prerequisite: {what}");
    true
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server child on a free port, killed on drop.
pub struct Redis {
    child: Child,
    pub url: String,
}

impl Redis {
    /// On a free port. Tests run in parallel and each picks a port by binding port 0 and
    /// letting it go, so two servers can be handed the same one: the second cannot bind and
    /// exits while the first answers. Another port is tried then (counted, not timed).
    pub fn start(bin: &Path, dir: &Path) -> Redis {
        for _ in 0..20 {
            if let Some(r) = Self::try_start_on(bin, free_port(), dir) {
                return r;
            }
        }
        panic!("redis-server did not start on any of 20 free ports");
    }

    /// On `port` (a restart keeps its clients' URL).
    pub fn start_on(bin: &Path, port: u16, dir: &Path) -> Redis {
        Self::try_start_on(bin, port, dir)
            .unwrap_or_else(|| panic!("another process holds port {port}"))
    }

    /// None when the server that answers on `port` is not this child.
    fn try_start_on(bin: &Path, port: u16, dir: &Path) -> Option<Redis> {
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let mut r = Redis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        let pid = wait_for("redis-server to answer or exit", || {
            if r.child.try_wait().ok()?.is_some() {
                return Some(None); // it could not bind
            }
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query(&mut connect(&r.url)?)
                .ok()?;
            info.lines()
                .find_map(|l| l.strip_prefix("process_id:"))
                .and_then(|p| p.trim().parse::<u32>().ok())
                .map(Some)
        });
        (pid == Some(r.child.id())).then_some(r)
    }
}

impl Redis {
    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent child; killed on drop, its stderr kept in a file for failure messages.
pub struct AgentProc {
    pub child: Child,
    pub log: PathBuf,
}

impl AgentProc {
    /// `lachesis-agent run ARGS` with its output in `log`.
    pub fn run(args: &[&str], log: PathBuf) -> AgentProc {
        let out = fs::File::create(&log).expect("agent log");
        let child = Command::new(env!("CARGO_BIN_EXE_lachesis-agent"))
            .arg("run")
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("start lachesis-agent");
        AgentProc { child, log }
    }

    pub fn logs(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return self.report();
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        // SIGTERM lets a mounting agent unmount; a bounded number of polls, then SIGKILL.
        for _ in 0..200 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.report();
    }
}

impl AgentProc {
    fn report(&self) {
        if std::thread::panicking() {
            eprintln!("--- agent log ---\n{}", self.logs());
        }
    }
}

/// Polls `probe`; a bounded number of polls (a minute's worth) only turns a hang into a failure.
pub fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    const POLLS: u32 = 1_200;
    for _ in 0..POLLS {
        if let Some(v) = probe() {
            return v;
        }
        sleep(Duration::from_millis(50));
    }
    panic!("never after {POLLS} polls: {what}");
}

pub fn connect(url: &str) -> Option<redis::Connection> {
    redis::Client::open(url)
        .ok()?
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()
}

/// All messages of a stream, parsed.
pub fn stream_messages(url: &str, key: &str) -> Vec<Value> {
    let Some(mut con) = connect(url) else {
        return vec![];
    };
    let reply: redis::streams::StreamRangeReply = match redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(&mut con)
    {
        Ok(r) => r,
        Err(_) => return vec![],
    };
    reply
        .ids
        .iter()
        .filter_map(|e| e.get::<String>("msg"))
        .map(|s| serde_json::from_str(&s).expect("stream message is JSON"))
        .collect()
}

/// `lachesis-agent run ARGS` against a Redis where nothing listens: (exit code, stderr).
pub fn run_agent_offline(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lachesis-agent"))
        .arg("run")
        .args(args)
        // Nothing listens here: a bad flag must be refused before any connection attempt.
        .args([
            "--host-id",
            "cli-test",
            "--redis-url",
            "redis://127.0.0.1:1/",
            "--no-ebpf",
        ])
        .output()
        .expect("run lachesis-agent");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Publishes as the controller does: the desired key and the inbox, in one transaction.
pub fn publish(url: &str, host: &str, msg: &Value) {
    let mut c = connect(url).expect("connect to redis");
    let text = msg.to_string();
    let _: () = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(format!("lachesis:agent:{host}:desired"))
        .arg(&text)
        .ignore()
        .cmd("XADD")
        .arg(format!("lachesis:agent:{host}:inbox"))
        .arg("*")
        .arg("msg")
        .arg(&text)
        .ignore()
        .query(&mut c)
        .expect("publish desired state");
}
