//! The Grafana dashboard of the chart (`charts/lachesis/files/grafana-agent-dashboard.json`)
//! against what the agent serves: every `lachesis_` metric a panel or variable queries is in a
//! scrape of the telemetry fixtures of `api-schemas/` (between them every field is set), the
//! `$host` and `$tenant` variables exist, and the scrape carries the fixtures' numbers.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use common::openmetrics::{parse, Scrape};
use lachesis_agent::metrics_exposition::{render, BusLag};
use lachesis_agent::telemetry::Telemetry;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn fixture(name: &str) -> Telemetry {
    let path = root().join("api-schemas/fixtures/telemetry").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn scrape(report: Telemetry) -> Scrape {
    let bus = BusLag {
        since_last_read_s: Some(0.5),
        inbox_backlog: Some(2),
        desired_generation: Some(8),
        applied_generation: 7,
        redis_up: true,
    };
    let text = render("host-a", Some((3, Arc::new(report))), bus);
    parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Every string under `key`, anywhere in `v`.
fn strings_under<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::String(s) if k == key => out.push(s),
                    _ => strings_under(x, key, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| strings_under(x, key, out)),
        _ => {}
    }
}

/// The `lachesis_` names in a PromQL expression.
fn metric_names(expr: &str) -> impl Iterator<Item = String> + '_ {
    expr.match_indices("lachesis_").map(move |(i, _)| {
        expr[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    })
}

#[test]
fn every_metric_the_dashboard_queries_is_served() {
    let path = root().join("charts/lachesis/files/grafana-agent-dashboard.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut exprs = vec![];
    strings_under(&dash["panels"], "expr", &mut exprs);
    strings_under(&dash["templating"], "definition", &mut exprs);
    let queried: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    assert!(queried.len() >= 20, "{queried:?}");

    let a = scrape(fixture("valid-cache-hits.json"));
    let b = scrape(fixture("valid-stages-and-measured-device.json"));
    let served: BTreeSet<&str> = a.names().union(&b.names()).copied().collect();
    let missing: Vec<&String> = queried
        .iter()
        .filter(|m| !served.contains(m.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "queried but not served: {missing:?}\nserved: {served:?}"
    );

    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(
        vars.contains(&"host") && vars.contains(&"tenant"),
        "{vars:?}"
    );
    let ids: Vec<u64> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        ids.len(),
        ids.iter().collect::<BTreeSet<_>>().len(),
        "panel ids repeat: {ids:?}"
    );
}

#[test]
fn a_scrape_carries_the_reports_numbers() {
    let report = fixture("valid-cache-hits.json");
    let web = report
        .tenants
        .iter()
        .find(|t| t.name == "web")
        .unwrap()
        .clone();
    let s = scrape(report.clone());
    let t = |op| [("host", "host-a"), ("tenant", "web"), ("op", op)];
    assert_eq!(
        s.get("lachesis_tenant_io_bytes_total", &t("read")),
        Some(web.bytes_read as f64)
    );
    assert_eq!(
        s.get("lachesis_tenant_io_ops_total", &t("write")),
        Some(web.ops_written as f64)
    );
    // The p99 series follows the report: a sample for each op the report has a p99 of, none
    // for the others (its value is a duration, which tests do not compare).
    let p99 = web.latency_us_p99.unwrap();
    let exposed = |op| {
        s.get("lachesis_tenant_io_latency_p99_seconds", &t(op))
            .is_some()
    };
    assert_eq!(
        (exposed("read"), exposed("write")),
        (p99.read.is_some(), p99.write.is_some())
    );
    assert!(
        p99.read.is_some() && p99.write.is_none(),
        "the fixture has a read p99 only"
    );
    let cache = web.cache.unwrap();
    assert_eq!(
        s.get(
            "lachesis_tenant_shadow_cache_hits_total",
            &[("tenant", "web")]
        ),
        Some(cache.hits as f64)
    );
    assert_eq!(
        s.get(
            "lachesis_tenant_shadow_cache_size_bytes",
            &[("tenant", "web")]
        ),
        Some(cache.size_bytes as f64)
    );
    let dev = &report.devices[0];
    let d = [("device", dev.name.as_str())];
    let media = dev.media_bytes_written.unwrap() as f64;
    assert_eq!(
        s.get("lachesis_device_media_written_bytes_total", &d),
        Some(media)
    );
    assert_eq!(
        s.get("lachesis_device_dlwa", &d),
        Some(media / dev.host_bytes_written as f64)
    );
    // A device that does not measure media bytes has neither them nor a DLWA.
    let plain = [("device", report.devices[1].name.as_str())];
    assert!(s
        .get("lachesis_device_host_written_bytes_total", &plain)
        .is_some());
    assert_eq!(s.get("lachesis_device_dlwa", &plain), None);
    assert_eq!(s.get("lachesis_telemetry_reports_total", &[]), Some(3.0));
    assert_eq!(s.get("lachesis_bus_inbox_backlog_entries", &[]), Some(2.0));
    assert_eq!(s.get("lachesis_bus_desired_generation", &[]), Some(8.0));

    let staged = scrape(fixture("valid-stages-and-measured-device.json"));
    let st = [("stage", "cache/alpha"), ("tenant", "alpha")];
    assert!(staged.get("lachesis_stage_hits_total", &st).is_some());
    // Rate-limit stages have no cache counters.
    assert!(staged
        .samples
        .keys()
        .all(|(_, l)| l.get("stage").map(String::as_str) != Some("qos/alpha")));
    let h = [("device", "flash0"), ("handle", "2")];
    assert!(staged
        .get("lachesis_device_handle_host_written_bytes_total", &h)
        .is_some());
}
