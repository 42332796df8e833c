//! kvload against a real memcached: what it counts agrees with what the server counted, and
//! with what the workload implies (a prefilled DRAM-resident key space never misses; a cold
//! look-aside run sets every miss; an object over the server's limit is a counted error).

mod common;

use common::{report, u, Memcached};

#[test]
fn a_prefilled_working_set_only_hits_and_the_server_agrees() {
    let m = Memcached::start(64, &[]);
    let r = report(&[
        "--server",
        &m.addr,
        "-q",
        "--prefill",
        "--keys",
        "3000",
        "--tenant",
        "a:",
        "--tenant",
        "b:",
        "--threads",
        "2",
        "--warmup-requests",
        "500",
        "--requests",
        "4000",
    ]);
    assert_eq!(u(&r, &["prefill_sets"]), 2 * 3000);
    assert_eq!(u(&r, &["warmup_requests"]), 2 * 500);
    assert_eq!(u(&r, &["requests"]), 2 * 4000);
    assert_eq!(u(&r, &["misses"]), 0);
    assert_eq!(u(&r, &["hits"]), 8000);
    assert_eq!(u(&r, &["wrong_values"]), 0);
    assert_eq!(u(&r, &["get", "count"]), 8000);
    assert!(r["get"]["p50_us"].as_f64().unwrap() <= r["get"]["p99_us"].as_f64().unwrap());
    let (a, b) = (
        u(&r, &["per_tenant", "a:", "gets"]),
        u(&r, &["per_tenant", "b:", "gets"]),
    );
    assert_eq!(a + b, 8000);
    assert!(a > 0 && b > 0);
    // The server saw every key once and exactly the measured gets between the snapshots.
    assert_eq!(u(&r, &["stats_after", "stats", "curr_items"]), 6000);
    let hits = |s: &str| u(&r, &[s, "stats", "get_hits"]);
    assert_eq!(hits("stats_after") - hits("stats_before"), 8000);
    assert!(
        r["stats_after"]["lachesis"].is_null(),
        "memcached has no `stats lachesis`"
    );
    assert!(r["ops_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn look_aside_sets_every_miss_and_pipelining_counts_the_same() {
    let m = Memcached::start(64, &[]);
    let args = |pipeline: &'static str| {
        vec![
            "-q",
            "--keys",
            "500",
            "--dist",
            "uniform",
            "--requests",
            "3000",
            "--pipeline",
            pipeline,
        ]
    };
    let mut a = args("1");
    a.extend(["--server", &m.addr]);
    let cold = report(&a);
    let misses = u(&cold, &["misses"]);
    assert!(misses > 0 && misses <= 500, "{misses} misses over 500 keys");
    assert_eq!(u(&cold, &["set", "count"]), misses);
    assert_eq!(u(&cold, &["ops"]), 3000 + misses);
    assert_eq!(u(&cold, &["stats_after", "stats", "curr_items"]), misses);

    // A second run, 16 requests in flight, hits wherever the first one set: a lower miss
    // ratio, and its misses set too.
    let mut a = args("16");
    a.extend(["--server", &m.addr, "--seed", "9"]);
    let warm = report(&a);
    let stored = u(&cold, &["stats_after", "stats", "curr_items"]);
    assert_eq!(u(&warm, &["set", "count"]), u(&warm, &["misses"]));
    assert!(u(&warm, &["misses"]) < misses);
    let now = u(&warm, &["stats_after", "stats", "curr_items"]);
    assert!(stored <= now && now <= 500, "{stored} then {now} items");
    assert_eq!(u(&warm, &["get", "count"]), 3000);
    assert_eq!(u(&warm, &["wrong_values"]), 0);
}

#[test]
fn mixed_gets_and_sets_follow_the_ratio() {
    let m = Memcached::start(64, &[]);
    let r = report(&[
        "--server",
        &m.addr,
        "-q",
        "--mode",
        "mix",
        "--get-ratio",
        "0.5",
        "--keys",
        "1000",
        "--requests",
        "4000",
        "--value-size",
        "100",
    ]);
    let (gets, sets) = (u(&r, &["get", "count"]), u(&r, &["set", "count"]));
    assert_eq!(gets + sets, 4000);
    assert!(
        (1600..2400).contains(&gets),
        "{gets} gets at a ratio of 0.5"
    );
    assert_eq!(u(&r, &["ops"]), 4000, "a mix does not set its misses");
    let sets_seen = |s: &str| u(&r, &[s, "stats", "cmd_set"]);
    assert_eq!(sets_seen("stats_after") - sets_seen("stats_before"), sets);
}

#[test]
fn objects_over_the_server_limit_are_counted_errors() {
    // memcached with a 2 KiB item limit refuses 3 KB values with SERVER_ERROR.
    let m = Memcached::start(64, &["-I", "2k", "-o", "slab_chunk_max=1024"]);
    let r = report(&[
        "--server",
        &m.addr,
        "-q",
        "--keys",
        "50",
        "--value-size",
        "3000",
        "--requests",
        "200",
    ]);
    assert_eq!(u(&r, &["hits"]), 0);
    assert_eq!(u(&r, &["server_errors"]), u(&r, &["set", "count"]));
    assert!(u(&r, &["server_errors"]) > 0);
    let first = r["first_server_error"].as_str().unwrap();
    assert!(first.starts_with("SERVER_ERROR"), "{first}");
}
