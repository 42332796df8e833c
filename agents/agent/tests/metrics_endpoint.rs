//! `--metrics-listen`: the agent binary, a real redis-server and a real FUSE mount. IO through
//! the mount moves the scraped cache-stage, device and curve metrics; a scrape shows exactly
//! the numbers of the telemetry report it says it is (the one on the telemetry stream); bad
//! values of the flag exit 2 naming it.
//!
//! The scrape is parsed strictly ([`parse`]: OpenMetrics text, every sample under its family's
//! HELP/TYPE, counters ending `_total`, `# EOF` last).
//!
//! Needs `redis-server`, root and `/dev/fuse` for the mount test. Without them it is skipped
//! with a message, except under `CI=true`, where it fails.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;

use common::openmetrics::{parse, Scrape};
use common::{
    find_redis_server, may_skip, publish, run_agent_offline, stream_messages, wait_for, AgentProc,
    Redis,
};
use serde_json::{json, Value};

const HOST: &str = "metrics-host";
const STAGE: &str = "cache/web";

/// The test's stage and device.
trait Ours {
    fn stage(&self, name: &str) -> Option<f64>;
    fn device(&self, name: &str) -> Option<f64>;
}

impl Ours for Scrape {
    fn stage(&self, name: &str) -> Option<f64> {
        self.get(name, &[("stage", STAGE), ("host", HOST)])
    }

    fn device(&self, name: &str) -> Option<f64> {
        self.get(name, &[("device", "flash0"), ("host", HOST)])
    }
}

/// `GET path` over HTTP/1.1: (status, content type, body).
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let ctype = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    Some((status, ctype, body.to_string()))
}

fn scrape(addr: SocketAddr) -> Scrape {
    let (status, ctype, body) = http_get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "{body}");
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// The address the agent logged it serves metrics on.
fn metrics_addr(agent: &AgentProc) -> SocketAddr {
    wait_for("the agent to log its metrics address", || {
        let logs = agent.logs();
        let line = logs
            .lines()
            .find(|l| l.contains("serving Prometheus metrics"))?;
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))?
            .parse()
            .ok()
    })
}

fn desired(generation: u64) -> Value {
    json!({
        "schema": "lachesis.desired-state/v1", "host_id": HOST, "generation": generation,
        "rollout_id": format!("rollout-{generation}"), "issued_at": "2026-11-25T01:00:00Z",
        "traceparent": null,
        // The test runs as root: its IO through the mount is web's.
        "tenants": [{"name": "web", "classifiers": [{"kind": "uid", "value": "0"}]}],
        "rules": [{"name": "web-cached", "priority": 10, "match": {"tenant": "web"},
                   "detours": [{"what": "io", "to": {"kind": "stage", "target": STAGE}}]}],
        "stages": [{"kind": "cache", "name": STAGE, "owner": "web", "engine": "loc",
                    "size_bytes": 16 << 20, "write_mode": "through", "eviction": "lru",
                    "max_dirty_bytes": 1 << 20, "device": "flash0",
                    "placement": [{"part": "loc", "handle": 2}], "next": null}],
    })
}

#[test]
fn metrics_move_with_io_through_the_mount_and_are_the_telemetry_reports_numbers() {
    let Some(bin) = find_redis_server() else {
        may_skip("redis-server");
        return;
    };
    if !nix::unistd::geteuid().is_root() || !Path::new("/dev/fuse").exists() {
        may_skip("root and /dev/fuse (a FUSE mount)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (backing, mnt) = (tmp.path().join("data"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let redis = Redis::start(&bin, tmp.path());
    let flash = format!("flash0={}:64MiB", tmp.path().join("flash0.img").display());
    let mount = format!("{}:{}", backing.display(), mnt.display());
    let agent = AgentProc::run(
        &[
            "--host-id",
            HOST,
            "--redis-url",
            &redis.url,
            "--no-ebpf",
            "--metrics-listen",
            "127.0.0.1:0",
            "--telemetry-interval-ms",
            "100",
            "--device",
            &flash,
            "--mount",
            &mount,
        ],
        tmp.path().join("agent.log"),
    );
    let addr = metrics_addr(&agent);
    let (status, _, _) = http_get(addr, "/other").expect("GET /other");
    assert_eq!(status, 404);

    publish(&redis.url, HOST, &desired(1));
    let before = wait_for(
        "the stage installed and generation 1 applied and desired",
        || {
            let s = scrape(addr);
            let host = [("host", HOST)];
            (s.stage("lachesis_stage_size_bytes") == Some((16 << 20) as f64)
                && s.get("lachesis_bus_applied_generation", &host) == Some(1.0)
                && s.get("lachesis_bus_desired_generation", &host) == Some(1.0))
            .then_some(s)
        },
    );
    assert_eq!(before.get("lachesis_bus_up", &[]), Some(1.0));
    assert_eq!(
        before.get("lachesis_bus_inbox_backlog_entries", &[]),
        Some(0.0)
    );
    assert!(before
        .get("lachesis_bus_desired_read_age_seconds", &[])
        .is_some());

    // A file put in the backing directory behind the switch's back is read through the mount
    // cold: every block misses the stage, which fills it on the device. Another is written
    // through the mount (write-through: onto the device too).
    let cold: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(backing.join("cold.bin"), &cold).unwrap();
    assert_eq!(std::fs::read(mnt.join("cold.bin")).unwrap(), cold);
    let mut f = std::fs::File::create(mnt.join("hot.bin")).unwrap();
    f.write_all(&cold[..256 << 10]).unwrap();
    f.sync_all().unwrap();
    drop(f);

    let grew = |s: &Scrape, get: &dyn Fn(&Scrape) -> Option<f64>| {
        get(s).unwrap_or(0.0) > get(&before).unwrap_or(0.0)
    };
    let after = wait_for("the IO to show in the metrics", || {
        let s = scrape(addr);
        (grew(&s, &|x| x.stage("lachesis_stage_misses_total"))
            && grew(&s, &|x| x.stage("lachesis_stage_written_bytes_total"))
            && grew(&s, &|x| {
                x.device("lachesis_device_host_written_bytes_total")
            })
            && grew(&s, &|x| {
                x.get(
                    "lachesis_tenant_curve_references_total",
                    &[("tenant", "web")],
                )
            }))
        .then_some(s)
    });
    assert!(
        after.stage("lachesis_stage_misses_total").unwrap() >= 256.0,
        "1 MiB read cold: 256 blocks missed"
    );
    let media = after
        .device("lachesis_device_media_written_bytes_total")
        .unwrap();
    let host = after
        .device("lachesis_device_host_written_bytes_total")
        .unwrap();
    assert_eq!(after.device("lachesis_device_dlwa"), Some(media / host));
    let h2 = after.get(
        "lachesis_device_handle_host_written_bytes_total",
        &[("device", "flash0"), ("handle", "2")],
    );
    assert!(h2.unwrap() > 0.0, "the stage writes with handle 2");

    // The scrape is report number n: the n-th message on the telemetry stream, to the byte.
    let n = after.get("lachesis_telemetry_reports_total", &[]).unwrap() as usize;
    let msgs = stream_messages(&redis.url, &format!("lachesis:agent:{HOST}:telemetry"));
    let report = &msgs[n - 1];
    let stage = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == STAGE)
        .unwrap();
    for (metric, field) in [
        ("lachesis_stage_hits_total", "hits"),
        ("lachesis_stage_misses_total", "misses"),
        ("lachesis_stage_read_hit_bytes_total", "bytes_read_hit"),
        ("lachesis_stage_read_miss_bytes_total", "bytes_read_miss"),
        ("lachesis_stage_written_bytes_total", "bytes_written"),
        ("lachesis_stage_installed_bytes", "installed_bytes"),
        ("lachesis_stage_evictions_total", "evictions"),
        ("lachesis_stage_dirty_bytes", "dirty_bytes"),
    ] {
        assert_eq!(
            after.stage(metric),
            stage[field].as_f64(),
            "{metric} vs report {n}'s {field}"
        );
    }
    let dev = &report["devices"][0];
    assert_eq!(
        after.device("lachesis_device_host_written_bytes_total"),
        dev["host_bytes_written"].as_f64()
    );
    assert_eq!(
        after.device("lachesis_device_media_written_bytes_total"),
        dev["media_bytes_written"].as_f64()
    );
    let web = report["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "web")
        .unwrap();
    assert_eq!(
        after.get(
            "lachesis_tenant_curve_references_total",
            &[("tenant", "web")]
        ),
        web["curve"]["references"].as_f64()
    );
    assert_eq!(
        after.get(
            "lachesis_tenant_io_ops_total",
            &[("tenant", "web"), ("op", "read")]
        ),
        web["ops_read"].as_f64()
    );
}

#[test]
fn a_bad_metrics_address_is_a_usage_error() {
    for bad in ["9464", "localhost:9464", "127.0.0.1:99999", ""] {
        let (code, err) = run_agent_offline(&["--metrics-listen", bad]);
        assert_eq!(code, Some(2), "{bad:?}: {err}");
        assert!(
            err.contains("--metrics-listen") && err.contains("IP:PORT"),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn a_taken_metrics_port_is_a_usage_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = run_agent_offline(&["--metrics-listen", &addr]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&format!("--metrics-listen {addr}")), "{err}");
}
