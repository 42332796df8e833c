//! Two-phase rollouts at the agent, against a real redis-server, with IO in flight through
//! the in-process [`InFlightGate`]: the quiesce ack waits until the flow's in-flight IO has
//! finished, new IO of the flow is held back until the install resumes it, and a drain that
//! does not finish in time is refused.
//!
//! Needs `redis-server` (`$REDIS_SERVER`, `/usr/bin/redis-server`, or on `PATH`). Without it
//! the test is skipped with a message, except under `CI=true`, where it fails.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use lachesis_agent::flow_gate::{FlowControl, InFlightGate};
use lachesis_agent::runner::{Agent, Config};
use lachesis_switch::{IoHeader, Op};
use serde_json::{json, Value};

const HOST: &str = "phase-host";
/// Bounds waits that only turn a hang into a failure.
const DEADLINE: Duration = Duration::from_secs(60);

fn find_redis_server() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REDIS_SERVER") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain([PathBuf::from("/usr/bin")])
            .map(|d| d.join("redis-server"))
            .find(|p| p.exists())
    })
}

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis(bin: &Path) -> (Redis, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(bin)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let url = format!("redis://127.0.0.1:{port}");
    // A bounded number of polls (a minute's worth) only turns a hang into a failure.
    let mut polls = 0u32;
    while con(&url).is_none() {
        polls += 1;
        assert!(
            polls < 1_200,
            "redis-server did not start after {polls} polls"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (Redis(child), url)
}

fn con(url: &str) -> Option<redis::Connection> {
    let mut c = redis::Client::open(url)
        .ok()?
        .get_connection_with_timeout(Duration::from_millis(200))
        .ok()?;
    redis::cmd("PING").query::<String>(&mut c).ok()?;
    Some(c)
}

/// Publishes as the controller does: the latest state in the desired key and every
/// generation on the inbox, in one transaction, so an agent that is still starting up picks
/// the message up from the key instead of missing it on the stream.
fn publish(url: &str, msg: &Value) {
    let mut c = con(url).unwrap();
    let text = msg.to_string();
    let _: () = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(format!("lachesis:agent:{HOST}:desired"))
        .arg(&text)
        .ignore()
        .cmd("XADD")
        .arg(format!("lachesis:agent:{HOST}:inbox"))
        .arg("*")
        .arg("msg")
        .arg(&text)
        .ignore()
        .query(&mut c)
        .unwrap();
}

fn acks(url: &str) -> Vec<Value> {
    let mut c = con(url).unwrap();
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(format!("lachesis:agent:{HOST}:acks"))
        .arg("-")
        .arg("+")
        .query(&mut c)
        .unwrap();
    reply
        .ids
        .iter()
        .filter_map(|e| e.get::<String>("msg"))
        .map(|s| serde_json::from_str(&s).unwrap())
        .collect()
}

async fn wait_ack(url: &str, generation: u64, phase: Option<&str>) -> Value {
    // A bounded number of polls (a minute's worth) only turns a hang into a failure.
    const POLLS: u32 = 3_000;
    for _ in 0..POLLS {
        let found = acks(url).into_iter().find(|a| {
            a["generation"] == generation && a.get("phase").and_then(Value::as_str) == phase
        });
        if let Some(a) = found {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no ack for generation {generation} phase {phase:?} after {POLLS} polls");
}

fn desired(generation: u64, phase: Option<&str>, detour: &str) -> Value {
    let mut m = json!({
        "schema": "lachesis.desired-state/v1", "host_id": HOST, "generation": generation,
        "rollout_id": format!("rollout-{generation}"), "issued_at": "2026-11-22T01:00:00Z",
        "traceparent": null,
        "tenants": [{"name": "web", "classifiers": [{"kind": "uid", "value": "1001"}]}],
        "rules": [{"name": "web-reads", "priority": 10, "match": {"tenant": "web", "ops": ["read"]},
                   "detours": [{"what": "io", "to": {"kind": "stage", "target": detour}}]}],
    });
    if let Some(p) = phase {
        m["phase"] = json!(p);
        if p == "quiesce" {
            m["quiesce"] = json!([{"tenant": "web", "ops": ["read"]}]);
        }
    }
    m
}

fn web_read() -> IoHeader<'static> {
    IoHeader::new(Op::Read)
        .tenant("web")
        .path("/srv/web/a")
        .at(0, 4096)
}

/// Polls `done` until it holds; a bounded number of polls (a minute's worth) only turns a
/// hang into a failure.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    const POLLS: u32 = 12_000;
    for _ in 0..POLLS {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never after {POLLS} polls: {what}");
}

/// A redis-server and an agent following it with `gate` as its data path; `None` (test
/// skipped) without redis-server.
struct Running {
    _redis: Redis,
    url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    agent: tokio::task::JoinHandle<()>,
}

fn start_agent(gate: &Arc<InFlightGate>, drain_timeout: Duration) -> Option<Running> {
    let Some(bin) = find_redis_server() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "redis-server missing under CI"
        );
        eprintln!("skipped: redis-server not found");
        return None;
    };
    let (redis, url) = start_redis(&bin);
    let mut cfg = Config::new(HOST);
    cfg.block = Duration::from_millis(200);
    cfg.drain_timeout = drain_timeout;
    let agent = Agent::new(
        cfg,
        redis::Client::open(url.as_str()).unwrap(),
        lachesis_agent::registration(HOST, vec![]),
    )
    .with_flow_control(Arc::clone(gate) as Arc<_>);
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(agent.run(async move {
        let _ = stop_rx.await;
    }));
    Some(Running {
        _redis: redis,
        url,
        stop,
        agent,
    })
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(DEADLINE, self.agent)
            .await
            .expect("agent stops")
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiesce_waits_for_in_flight_io_and_install_resumes() {
    let gate = InFlightGate::new();
    // The drain waits as long as the test holds the IO (the timeout is a hang guard here).
    let Some(run) = start_agent(&gate, DEADLINE) else {
        return;
    };
    let url = run.url.clone();

    publish(&url, &desired(1, None, "cache/web"));
    wait_ack(&url, 1, None).await;

    // A read of the flow is in flight when the quiesce arrives.
    let in_flight = gate.admit(&web_read()).expect("not quiesced yet");
    publish(&url, &desired(2, Some("quiesce"), "cache/web-2"));
    wait_until("the agent to quiesce the flow", || gate.is_quiesced()).await;
    assert!(
        gate.admit(&web_read()).is_none(),
        "new IO of the flow admitted while quiesced"
    );
    let other = IoHeader::new(Op::Read).tenant("db");
    assert!(gate.admit(&other).is_some(), "IO of another flow held back");
    assert!(
        acks(&url).iter().all(|a| a["generation"] != 2),
        "acked the quiesce before the in-flight IO finished"
    );
    drop(in_flight);
    let ack = wait_ack(&url, 2, Some("quiesce")).await;
    assert_eq!(ack["status"], "applied");
    // The drain began with the read in flight and ended only once none was: the ack
    // came after the read finished.
    assert_eq!(ack["drained"], 1);
    assert_eq!(ack["rules_installed"], 1);

    // A reader that waits for the flow gets through once the install resumes it.
    let g = Arc::clone(&gate);
    let waiter = tokio::spawn(async move {
        drop(g.admit_wait(&web_read()).await);
    });
    wait_until("the reader to wait at the gate", || gate.waiting() == 1).await;
    assert!(!waiter.is_finished());
    publish(&url, &desired(2, Some("install"), "cache/web-2"));
    let ack = wait_ack(&url, 2, Some("install")).await;
    assert_eq!(ack["status"], "applied");
    tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("resumed")
        .unwrap();
    assert!(!gate.is_quiesced());
    assert_eq!(gate.waiting(), 0);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_never_finishes_refuses_the_quiesce_and_the_rollback_resumes() {
    let gate = InFlightGate::new();
    // The IO below never finishes, so the drain times out whatever its timeout: a short
    // one only keeps the test short.
    let Some(run) = start_agent(&gate, Duration::from_millis(200)) else {
        return;
    };
    let url = run.url.clone();
    publish(&url, &desired(2, None, "cache/web-2"));
    wait_ack(&url, 2, None).await;

    let stuck = gate.admit(&web_read()).unwrap();
    publish(&url, &desired(3, Some("quiesce"), "cache/web-3"));
    let ack = wait_ack(&url, 3, Some("quiesce")).await;
    assert_eq!(ack["status"], "rejected");
    let reason = ack["reason"].as_str().unwrap();
    assert!(
        reason.contains("drain timed out") && reason.contains("1 operation"),
        "{reason}"
    );
    // Refused, but still quiesced: the rollback's install resumes the flow.
    assert!(gate.is_quiesced());
    // The controller rolls back with a newer generation; its install resumes the flow.
    let mut back = desired(4, Some("install"), "cache/web-2");
    back["restores"] = json!(2);
    publish(&url, &back);
    wait_ack(&url, 4, Some("install")).await;
    assert!(!gate.is_quiesced());
    drop(stuck);
    run.stop().await;
}

/// Records every install with how many registrations the bus had seen then.
struct Recorder {
    url: String,
    installs: std::sync::Mutex<Vec<(u64, usize, usize)>>,
}

impl lachesis_agent::runner::Installer for Recorder {
    fn install(&self, applied: &lachesis_agent::state::Applied) -> Result<(), String> {
        let mut c = con(&self.url).unwrap();
        let registrations: usize = redis::cmd("XLEN")
            .arg(format!("lachesis:agent:{HOST}:registrations"))
            .query(&mut c)
            .unwrap();
        self.installs.lock().unwrap().push((
            applied.generation,
            applied.table.len(),
            registrations,
        ));
        Ok(())
    }
}

/// An agent that keeps its state in `dir`, installing into `rec`.
fn spawn_persistent(url: &str, dir: &Path, rec: &Arc<Recorder>) -> Running2 {
    let mut cfg = Config::new(HOST);
    cfg.block = Duration::from_millis(200);
    let agent = Agent::new(
        cfg,
        redis::Client::open(url).unwrap(),
        lachesis_agent::registration(HOST, vec![]),
    )
    .with_installer(Arc::clone(rec) as Arc<_>)
    .with_persistence(lachesis_agent::persist::Persisted::open(dir).unwrap());
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(agent.run(async move {
        let _ = stop_rx.await;
    }));
    Running2 { stop, agent }
}

struct Running2 {
    stop: tokio::sync::oneshot::Sender<()>,
    agent: tokio::task::JoinHandle<()>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_installs_its_last_acked_state_before_it_resyncs() {
    let Some(bin) = find_redis_server() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "redis-server missing under CI"
        );
        eprintln!("skipped: redis-server not found");
        return;
    };
    let (_redis, url) = start_redis(&bin);
    let dir = tempfile::tempdir().unwrap();
    let rec = Arc::new(Recorder {
        url: url.clone(),
        installs: Default::default(),
    });

    let first = spawn_persistent(&url, dir.path(), &rec);
    publish(&url, &desired(3, None, "cache/a"));
    wait_ack(&url, 3, None).await;
    // A pending two-phase rollout: generation 4 is quiesced, not installed, when it dies.
    publish(&url, &desired(4, Some("quiesce"), "cache/b"));
    wait_ack(&url, 4, Some("quiesce")).await;
    first.agent.abort();
    let _ = first.agent.await;
    drop(first.stop);
    assert_eq!(*rec.installs.lock().unwrap(), [(3, 1, 1)]);
    let heartbeat = format!("lachesis:agent:{HOST}:heartbeat");
    let mut c = con(&url).unwrap();
    let _: () = redis::cmd("DEL").arg(&heartbeat).query(&mut c).unwrap();

    let second = spawn_persistent(&url, dir.path(), &rec);
    // It resyncs from the desired key (generation 4, quiesce) and acks that phase again.
    let quiesce_acks = |url: &str| {
        acks(url)
            .iter()
            .filter(|a| a["generation"] == 4 && a["phase"] == "quiesce")
            .count()
    };
    wait_until(
        "the restarted agent acks generation 4's quiesce again",
        || quiesce_acks(&url) == 2,
    )
    .await;
    // Generation 3 was installed again from disk before the agent registered a second time,
    // and not installed by the resync (only quiesced for 4).
    assert_eq!(*rec.installs.lock().unwrap(), [(3, 1, 1), (3, 1, 1)]);
    // Its heartbeat reports the restored generation.
    let mut hb = None;
    wait_until("the restarted agent's heartbeat", || {
        hb = redis::cmd("GET")
            .arg(&heartbeat)
            .query::<Option<String>>(&mut c)
            .unwrap();
        hb.is_some()
    })
    .await;
    let hb: Value = serde_json::from_str(&hb.unwrap()).unwrap();
    assert_eq!(hb["generation"], 3);

    // The install phase then installs 4, and 4 is what a third start restores.
    publish(&url, &desired(4, Some("install"), "cache/b"));
    wait_ack(&url, 4, Some("install")).await;
    let _ = second.stop.send(());
    tokio::time::timeout(DEADLINE, second.agent)
        .await
        .expect("agent stops")
        .unwrap();
    let saved = lachesis_agent::persist::Persisted::open(dir.path())
        .unwrap()
        .load()
        .unwrap()
        .unwrap();
    assert_eq!((saved.generation, saved.phase), (4, None));
}
