//! Rules of a KV tenant, in process: a key-prefix rule sends keys to another front end (a
//! real `lachesis-kv` process) and relays its replies, another sends them through a rate
//! limit; a bad desired state is refused whole and the one in place keeps serving.

mod common;

use std::sync::Arc;

use common::{Client, Server};
use lachesis_kv::{Service, ServiceConfig};
use lachesis_stages::stage::space::Devices;
use lachesis_switch::{
    Classifier, ClassifierKind, Detour, DetourKind, DetourWhat, Match, Priority, RateLimitConfig,
    Rule, StageConfig, Tenant,
};

fn tenant() -> Vec<Tenant> {
    vec![Tenant {
        name: "t".into(),
        classifiers: vec![Classifier {
            kind: ClassifierKind::KeyPrefix,
            value: "t:".into(),
        }],
    }]
}

fn rules(remote: &str, limit_stage: &str) -> Vec<Rule> {
    vec![
        Rule::new(
            "remote",
            1,
            Match::any().key_prefix("t:r:"),
            vec![Detour::new(
                DetourWhat::Io,
                DetourKind::File,
                format!("tcp://{remote}"),
            )],
        ),
        Rule::new(
            "slow",
            2,
            Match::any().key_prefix("t:l:"),
            vec![Detour::new(DetourWhat::Io, DetourKind::Stage, limit_stage)],
        ),
    ]
}

fn limit() -> Vec<StageConfig> {
    vec![StageConfig::RateLimit(RateLimitConfig {
        name: "qos/t".into(),
        owner: Some("t".into()),
        iops: Some(5),
        bytes_per_s: None,
        min_bytes_per_s: None,
        priority: None,
    })]
}

/// Serves `service` on a free port from a runtime of its own; the address.
fn serve(
    service: Arc<Service>,
) -> (
    String,
    tokio::runtime::Runtime,
    tokio::sync::watch::Sender<bool>,
) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    l.set_nonblocking(true).unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let workers = lachesis_kv::server::Workers::start(2, "kv-test").unwrap();
    rt.spawn(async move {
        let l = tokio::net::TcpListener::from_std(l).unwrap();
        lachesis_kv::server::serve_listener(l, service, rx, workers).await
    });
    (addr, rt, tx)
}

#[test]
fn rules_forward_to_a_remote_front_end_and_rate_limit() {
    let remote = Server::start(&[]);
    let service = Arc::new(Service::new(ServiceConfig::new(Devices::default())).unwrap());
    service
        .apply(tenant(), rules(&remote.addrs[0], "qos/t"), limit())
        .unwrap();
    let (addr, _rt, _tx) = serve(service.clone());
    let mut c = Client::connect(&addr);
    // memcached's `threads`: the connection threads serving (two here).
    assert_eq!(c.stat("", "threads").as_deref(), Some("2"));

    // Forwarded: stored in the remote front end, read back through this one.
    assert_eq!(c.set("t:r:1", b"far"), "STORED");
    assert_eq!(c.get("t:r:1").as_deref(), Some(&b"far"[..]));
    assert_eq!(remote.client().get("t:r:1").as_deref(), Some(&b"far"[..]));
    assert!(c
        .cmd("delete t:r:1 noreply\r\nversion\r\n")
        .starts_with("VERSION"));
    assert_eq!(remote.client().get("t:r:1"), None);
    c.send(b"mg t:r:1 v q\r\nmn\r\n");
    assert_eq!(
        c.line(),
        "MN",
        "a quiet miss stays quiet through the forward"
    );
    // Local keys stay here.
    assert_eq!(c.set("t:x", b"near"), "STORED");
    assert_eq!(remote.client().get("t:x"), None);

    // Rate limited: 5 operations a second, no burst: each after the first waits its turn
    // (counted).
    for i in 0..8 {
        assert_eq!(c.set(&format!("t:l:{i}"), b"v"), "STORED");
    }
    let s = service.stats();
    let t = &s.tenants["t"];
    assert!(t.rate_limited >= 2, "{t:?}");
    assert_eq!(t.forwarded, 4);

    // A bad desired state (a rule naming no stage) changes nothing.
    let e = service
        .apply(tenant(), rules(&remote.addrs[0], "qos/none"), limit())
        .unwrap_err();
    assert!(e.contains("slow") && e.contains("qos/none"), "{e}");
    assert_eq!(c.set("t:r:2", b"still"), "STORED");
    assert_eq!(remote.client().get("t:r:2").as_deref(), Some(&b"still"[..]));
    // A local directory is no KV endpoint.
    let mut bad = rules(&remote.addrs[0], "qos/t");
    bad[0].detours[0].to.target = "/srv/data".into();
    let e = service.apply(tenant(), bad, limit()).unwrap_err();
    assert!(e.contains("tcp://HOST:PORT"), "{e}");
}

/// Two tenants by key prefix, each through a qos stage: while both tenants' requests wait at
/// the front end's scheduler, the high one's go first, 16 for each low one (weights 32:2,
/// asserted at least 4:1), and the low one is not starved. Decided by the scheduler's counts.
#[test]
fn a_high_tenant_goes_ahead_of_a_low_one() {
    let tenants: Vec<Tenant> = ["hi", "lo"]
        .iter()
        .map(|t| Tenant {
            name: t.to_string(),
            classifiers: vec![Classifier {
                kind: ClassifierKind::KeyPrefix,
                value: format!("{t}:"),
            }],
        })
        .collect();
    let rules = ["hi", "lo"]
        .iter()
        .map(|t| {
            Rule::new(
                format!("{t}-io"),
                1,
                Match::any().tenant(*t),
                vec![Detour::new(
                    DetourWhat::Io,
                    DetourKind::Stage,
                    format!("qos/{t}"),
                )],
            )
        })
        .collect();
    let stages = [("hi", Priority::High), ("lo", Priority::Low)]
        .iter()
        .map(|(t, p)| {
            StageConfig::RateLimit(RateLimitConfig {
                name: format!("qos/{t}"),
                owner: Some(t.to_string()),
                iops: None,
                bytes_per_s: None,
                min_bytes_per_s: None,
                priority: Some(*p),
            })
        })
        .collect();
    let service = Arc::new(Service::new(ServiceConfig::new(Devices::default())).unwrap());
    service.apply(tenants, rules, stages).unwrap();
    let (addr, _rt, _tx) = serve(service.clone());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let (addr, stop) = (addr.clone(), stop.clone());
            let t = if i % 2 == 0 { "hi" } else { "lo" };
            std::thread::spawn(move || {
                let mut c = Client::connect(&addr);
                let value = vec![b'v'; 4096];
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    assert_eq!(c.set(&format!("{t}:{i}:{}", n % 64), &value), "STORED");
                    n += 1;
                }
            })
        })
        .collect();
    let contended = |s: &str| service.qos_counters(s).map_or(0, |c| c.contended);
    // Until the counts are there, however long that takes on this machine.
    while contended("qos/hi") < 400 || contended("qos/lo") < 1 {
        std::thread::yield_now();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let (hi, lo) = (
        service.qos_counters("qos/hi").unwrap(),
        service.qos_counters("qos/lo").unwrap(),
    );
    assert!(hi.contended >= 4 * lo.contended, "{hi:?} {lo:?}");
    assert!(lo.dispatched > 0 && lo.contended > 0, "{lo:?}");
    assert_eq!(
        hi.reserved_bytes + lo.reserved_bytes + hi.limited + lo.limited,
        0
    );
}

/// A change refused after its new qos stage was built (a later stage names no device) leaves
/// the scheduler's class as it was; made, it takes the new priority.
#[test]
fn a_refused_change_leaves_a_qos_class_as_it_was() {
    let tenants = vec![Tenant {
        name: "hi".into(),
        classifiers: vec![Classifier {
            kind: ClassifierKind::KeyPrefix,
            value: "hi:".into(),
        }],
    }];
    let rules = vec![Rule::new(
        "hi-io",
        1,
        Match::any().tenant("hi"),
        vec![Detour::new(DetourWhat::Io, DetourKind::Stage, "qos/hi")],
    )];
    let qos = |p: Priority| {
        StageConfig::RateLimit(RateLimitConfig {
            name: "qos/hi".into(),
            owner: Some("hi".into()),
            iops: None,
            bytes_per_s: None,
            min_bytes_per_s: None,
            priority: Some(p),
        })
    };
    let no_device: StageConfig = serde_json::from_value(serde_json::json!({
        "kind": "cache", "name": "cache/hi", "owner": "hi", "engine": "loc", "size_bytes": 1 << 20,
        "write_mode": "through", "eviction": "lru", "max_dirty_bytes": 1 << 20,
        "device": "nope", "placement": [], "next": null,
    }))
    .unwrap();
    let service = Service::new(ServiceConfig::new(Devices::default())).unwrap();
    service
        .apply(tenants.clone(), rules.clone(), vec![qos(Priority::Low)])
        .unwrap();
    let low = service.qos_params("qos/hi").expect("in force");
    let e = service
        .apply(
            tenants.clone(),
            rules.clone(),
            vec![qos(Priority::High), no_device],
        )
        .unwrap_err();
    assert!(e.contains("nope"), "{e}");
    assert_eq!(
        service.qos_params("qos/hi"),
        Some(low),
        "refused: as it was"
    );
    service
        .apply(tenants, rules, vec![qos(Priority::High)])
        .unwrap();
    assert!(service.qos_params("qos/hi").unwrap().weight > low.weight);
}
