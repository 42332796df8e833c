//! lachesis-cachebench end to end: a small synthetic run and a real trace through real engines
//! on the simulated SSD, and bad input answered with exit code 2 and a message. The short runs
//! check behaviour, not figures, and pass --allow-transient (they never reach steady state);
//! `steady_state_*` check the steady-state judgement itself.

use std::path::PathBuf;
use std::process::Command;

fn cachebench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lachesis-cachebench"))
        .args(args)
        .output()
        .expect("run lachesis-cachebench")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = cachebench(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

const SMALL: &[&str] = &[
    "--json",
    "-q",
    "--allow-transient",
    "--objects",
    "40000",
    "--requests",
    "120000",
    "--flash-mib",
    "16",
    "--ru-kib",
    "128",
];

#[test]
fn synthetic_runs_report_sane_figures() {
    let engines: &[&[&str]] = &[
        &["--engine", "set-assoc"],
        &["--engine", "loc"],
        &["--engine", "log-only"],
        &["--engine", "hybrid"],
        &["--engine", "hybrid", "--small-engine", "kangaroo"],
        &["--engine", "kangaroo"],
    ];
    for flags in engines {
        let engine = flags.join(" ");
        let mut args = SMALL.to_vec();
        args.extend(*flags);
        args.extend(["--small-fraction", "0.5", "--dram-mib", "1"]);
        let r = json(&args);
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{engine}: no {k}"));
        assert_eq!(r["wrong_values"], 0, "{engine}");
        let mr = f("miss_ratio");
        assert!(mr > 0.0 && mr < 1.0, "{engine}: miss ratio {mr}");
        assert!(f("gets") > 50_000.0, "{engine}");
        assert!(
            f("dlwa") >= 1.0 && f("dlwa") < 20.0,
            "{engine}: DLWA {}",
            f("dlwa")
        );
        assert!(f("alwa") >= 0.9, "{engine}: ALWA {}", f("alwa"));
        assert!(f("dram_bits_per_object") > 0.0, "{engine}");
        assert!(
            f("ops_per_s") > 0.0 && f("device_bytes_per_request") > 0.0,
            "{engine}"
        );
    }
    // A set-associative cache rewrites a 4 KiB bucket per insert; the log packs objects.
    let sa = json(&[SMALL, &["--engine", "set-assoc"]].concat());
    let log = json(&[SMALL, &["--engine", "log-only"]].concat());
    assert!(sa["alwa"].as_f64().unwrap() > 5.0 * log["alwa"].as_f64().unwrap());
}

#[test]
fn admission_by_reuse_sets_fewer_objects_and_reports_its_table() {
    let mut plain = SMALL.to_vec();
    plain.extend(["--engine", "kangaroo"]);
    let mut reuse = plain.clone();
    reuse.extend(["--admit-reuse", "4096"]);
    let (p, r) = (json(&plain), json(&reuse));
    assert_eq!(p["admission_dram_bytes"], 0);
    assert_eq!(r["admission_dram_bytes"], 4096);
    assert_eq!(r["wrong_values"], 0);
    // Only a key's second miss is set: one-hit wonders never reach flash.
    let sets = |v: &serde_json::Value| v["sets"].as_u64().expect("sets");
    assert!(
        sets(&r) < sets(&p),
        "sets {} with reuse, {} without",
        sets(&r),
        sets(&p)
    );
}

#[test]
fn replays_a_real_trace() {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/cloudPhysicsIO.oracleGeneral.bin");
    if !trace.exists() {
        assert!(
            std::env::var("CI").is_err(),
            "{} is missing (CI must have shared/ beside the repository)",
            trace.display()
        );
        eprintln!("skipped: {} is missing", trace.display());
        return;
    }
    let t = trace.to_str().unwrap();
    let r = json(&[
        "--json",
        "-q",
        "--allow-transient",
        "--trace",
        t,
        "--sizes",
        "meta",
        "--engine",
        "set-assoc",
        "--flash-mib",
        "8",
        "--ru-kib",
        "64",
    ]);
    assert_eq!(r["requests"], 113_872);
    assert_eq!(r["wrong_values"], 0);
    let mr = r["miss_ratio"].as_f64().unwrap();
    assert!(mr > 0.05 && mr < 1.0, "miss ratio {mr}");
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["--utilization", "1.5"], "--utilization"),
        (&["--sizes", "huge"], "--sizes"),
        (
            &["--trace", "/nonexistent/trace.bin"],
            "/nonexistent/trace.bin",
        ),
        (&["--trace", "x.csv", "--format", "nope"], "--format nope"),
        (&["--flash-mib", "4", "--ru-kib", "1024"], "--flash-mib"),
        (&["--engine", "nope"], "nope"),
    ];
    for (args, needle) in cases {
        let out = cachebench(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

// FairyWREN: the same command and JSON report as for Kangaroo, so one command compares both.

const FW_SMALL: &[&str] = &[
    "--json",
    "-q",
    "--allow-transient",
    "--objects",
    "40000",
    "--requests",
    "150000",
    "--flash-mib",
    "16",
    "--ru-kib",
    "128",
    "--sizes",
    "meta",
];

#[test]
fn fairywren_reports_what_kangaroo_reports_and_never_makes_the_device_relocate() {
    let kangaroo = json(&[FW_SMALL, &["--engine", "kangaroo"]].concat());
    let fairywren = json(&[FW_SMALL, &["--engine", "fairywren"]].concat());
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&kangaroo), keys(&fairywren));
    assert_eq!(fairywren["engine"], "fairywren");
    assert_eq!(fairywren["wrong_values"], 0);
    let miss = fairywren["miss_ratio"].as_f64().unwrap();
    assert!(miss > 0.0 && miss < 1.0, "{miss}");
    // Erase units written whole and trimmed whole: media bytes equal host bytes.
    assert_eq!(fairywren["dlwa"].as_f64().unwrap(), 1.0);
    assert!(fairywren["alwa"].as_f64().unwrap() >= 1.0);
    assert!(fairywren["objects"].as_u64().unwrap() > 0);
    assert!(fairywren["dram_bits_per_object"].as_f64().unwrap() > 0.0);
    // FwSets' sizes and the counters that say where its pages go.
    let layout = &fairywren["layout"];
    assert!(layout["sets"].as_u64().unwrap() > 0, "{layout}");
    assert!(layout["spare_pages"].is_u64(), "{layout}");
    let c = &fairywren["counters"];
    for k in [
        "hot_page_writes",
        "cold_page_writes",
        "hot_victim_live_pages",
        "cold_victim_live_pages",
        "gc_cold_repacks",
        "objects_packed_by_log",
        "set_incoming_objects",
        "set_incoming_bytes",
        "set_written_bytes",
        "set_evicted_bytes",
        "set_evicted_incoming_bytes",
        "resplit_evicted_bytes",
    ] {
        assert!(c[k].is_u64(), "{k}: {c}");
    }
    assert_eq!(
        c["hot_page_writes"].as_u64().unwrap() + c["cold_page_writes"].as_u64().unwrap(),
        c["set_page_writes"].as_u64().unwrap()
    );
    let fifo = json(
        &[
            FW_SMALL,
            &["--engine", "fairywren", "--fwsets-victims", "fifo-plus"],
        ]
        .concat(),
    );
    assert_ne!(fifo["counters"], fairywren["counters"]);
    // The shared knobs reach both engines.
    let k10 = json(&[FW_SMALL, &["--engine", "kangaroo", "--log-fraction", "0.1"]].concat());
    let f10 = json(
        &[
            SMALL,
            &[
                "--engine",
                "fairywren",
                "--log-fraction",
                "0.1",
                "--cold-every",
                "3",
            ],
        ]
        .concat(),
    );
    assert_ne!(k10["alwa"], kangaroo["alwa"]);
    assert_ne!(f10["alwa"], fairywren["alwa"]);
}

#[test]
fn bad_fairywren_flags_exit_2_naming_the_flag() {
    for (flags, named) in [
        (&["--log-fraction", "0.9"][..], "--log-fraction"),
        (&["--threshold", "0"][..], "--threshold"),
        (&["--cold-every", "0"][..], "--cold-every"),
        (&["--cold-pages", "0"][..], "--cold-pages"),
        (&["--fwsets-op", "0.6"][..], "--fwsets-op"),
        (&["--fwsets-victims", "lru"][..], "--fwsets-victims"),
        // Eight 512 KiB units (the device has spare units for its own needs): too few erase
        // units for FwLog and FwSets.
        (&["--flash-mib", "4", "--op", "1.0"][..], "erase units"),
    ] {
        let mut args = vec![
            "-q",
            "--engine",
            "fairywren",
            "--requests",
            "10",
            "--ru-kib",
            "512",
        ];
        args.extend_from_slice(flags);
        let out = cachebench(&args);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{flags:?}: {err}");
    }
}

/// The keys of the JSON report, which scripts read (bench/cache/*.py): every engine's report
/// has exactly these.
const REPORT_KEYS: &[&str] = &[
    "admission_dram_bytes",
    "alwa",
    "corrupt_reads",
    "counters",
    "deletes",
    "device_bytes_per_request",
    "device_write_mb_s",
    "dlwa",
    "dram_bits_per_object",
    "dram_bytes",
    "engine",
    "flash_bytes",
    "gets",
    "gets_per_s",
    "handles",
    "layout",
    "measured_requests",
    "media_bytes_per_request",
    "miss_ratio",
    "misses",
    "objects",
    "ops_per_s",
    "overprovisioning",
    "parts",
    "requests",
    "sets",
    "sets_per_s",
    "steady",
    "steady_state",
    "utilization",
    "wall_s",
    "warmup_requests",
    "workload",
    "wren_span",
    "wrong_values",
];

// Steady state: Kangaroo on a conventional SSD (one handle, no discard), 30k objects per MiB.
const STEADY: &[&str] = &[
    "--json",
    "-q",
    "--engine",
    "kangaroo",
    "--handles",
    "shared",
    "--no-discard",
    "--objects",
    "120000",
    "--requests",
    "600000",
    "--flash-mib",
    "4",
    "--ru-kib",
    "32",
];

#[test]
fn steady_state_runs_report_the_counts_they_were_judged_on() {
    let r = json(STEADY);
    assert_eq!(keys(&r), REPORT_KEYS);
    assert_eq!(r["steady_state"], true, "{r}");
    let s = &r["steady"];
    assert_eq!(s["failures"].as_array().unwrap().len(), 0);
    // The device rounds its capacity up to whole reclaim units the cache does not use.
    assert!(s["written_fraction"].as_f64().unwrap() > 0.99, "{s}");
    assert!(s["device_writes"].as_f64().unwrap() >= 10.0, "{s}");
    let logs = s["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0]["name"], "klog");
    assert!(logs[0]["wraps"].as_f64().unwrap() >= 3.0);
    assert!(logs[0]["evictions"].as_u64().unwrap() > 0);
    let (d1, d2) = (
        s["dlwa_first_half"].as_f64().unwrap(),
        s["dlwa_second_half"].as_f64().unwrap(),
    );
    assert!(d1 > 1.0 && (d1 - d2).abs() <= 0.05 * d1.max(d2), "{s}");
    // The parts' bytes are the engine's host writes of the window.
    let parts = r["parts"].as_array().unwrap();
    let names: Vec<&str> = parts.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["klog", "kset"]);
    let sum: f64 = parts
        .iter()
        .map(|p| p["bytes_per_request"].as_f64().unwrap())
        .sum();
    let host = r["device_bytes_per_request"].as_f64().unwrap();
    assert!((sum - host).abs() <= 1e-6 * host, "{sum} vs {host}");
    assert!(r["warmup_requests"].as_u64().unwrap() >= 150_000);
    // Kangaroo's own counters, over the window: the KSet writes it reports are the part's.
    let sets = r["counters"]["kset_set_writes"].as_u64().unwrap();
    let kset = parts[1]["bytes_written"].as_u64().unwrap();
    assert_eq!(sets * 4096, kset);
    // What KSet's rewrites took in from KLog, wrote and evicted, as FairyWREN reports its
    // sets': every object moved came in, and what was evicted of it is part of both.
    let c = &r["counters"];
    let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k}: {c}"));
    assert!(n("set_incoming_objects") >= n("objects_moved"), "{c}");
    assert!(
        n("set_evicted_incoming_objects") <= n("set_incoming_objects"),
        "{c}"
    );
    assert!(
        n("set_evicted_incoming_objects") <= n("set_evicted_objects"),
        "{c}"
    );
    assert!(n("set_written_bytes") <= sets * 4094, "{c}");
    assert!(
        n("objects_dropped_bytes") >= n("objects_dropped") * 11,
        "{c}"
    );
}

#[test]
fn steady_state_refused_prints_no_figure_and_exits_3() {
    // Too few requests: addresses never written, KLog barely evicting.
    let mut args = STEADY.to_vec();
    let at = args.iter().position(|a| *a == "600000").unwrap();
    args[at] = "30000";
    let out = cachebench(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains("not at steady state, no figure printed"),
        "{err}"
    );
    assert!(err.contains("device pages never written"), "{err}");
    // Allowed, the same run prints its figures marked as not steady.
    args.push("--allow-transient");
    let r = json(&args);
    assert_eq!(r["steady_state"], false);
    assert!(!r["steady"]["failures"].as_array().unwrap().is_empty());
}

fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

// The whole cache as FairyWREN's paper runs it (Table 4): the log for objects of 2 KiB and
// more, the small-object engine on 10% of the flash, sizes with large objects (meta-whole).
const WHOLE: &[&str] = &[
    "--json",
    "-q",
    "--allow-transient",
    "--engine",
    "hybrid",
    "--objects",
    "50000",
    "--requests",
    "250000",
    "--flash-mib",
    "16",
    "--ru-kib",
    "40",
    "--dram-mib",
    "1",
    "--sizes",
    "meta-whole",
    "--small-fraction",
    "0.1",
];

#[test]
fn whole_cache_runs_each_small_engine_on_one_or_separate_handles() {
    let run = |small: &str, handles: &str| {
        json(&[WHOLE, &["--small-engine", small, "--handles", handles]].concat())
    };
    let fw = run("fairywren", "separate");
    let fw_one = run("fairywren", "shared");
    let kangaroo = run("kangaroo", "separate");
    let lbad = run("kangaroo", "shared");
    for (name, r) in [
        ("fairywren", &fw),
        ("fairywren shared", &fw_one),
        ("kangaroo", &kangaroo),
        ("kangaroo shared", &lbad),
    ] {
        assert_eq!(keys(r), REPORT_KEYS, "{name}");
        assert_eq!(r["engine"], "hybrid", "{name}");
        assert_eq!(r["wrong_values"], 0, "{name}");
        assert_eq!(r["corrupt_reads"], 0, "{name}");
        let miss = r["miss_ratio"].as_f64().unwrap();
        assert!(miss > 0.0 && miss < 1.0, "{name}: {miss}");
    }
    // FairyWREN's erase units are reclaim units (its span aligned to them) and the log's
    // regions are too, each written whole: on their own handles the device relocates
    // nothing. On one handle the streams' writes interleave in the open unit, so a unit may
    // hold pages of two streams; the trims still leave little for GC to move.
    assert_eq!(fw["dlwa"].as_f64().unwrap(), 1.0);
    let shared = fw_one["dlwa"].as_f64().unwrap();
    assert!((1.0..=1.01).contains(&shared), "{fw_one}");
    // Kangaroo's KLog and KSet on their own handles, the log on a third: its trimmed units
    // hold nothing of KSet's; on one handle (a conventional SSD) the device relocates KSet's
    // pages out of units the log trimmed.
    assert_eq!(kangaroo["dlwa"].as_f64().unwrap(), 1.0);
    assert!(lbad["dlwa"].as_f64().unwrap() > 1.0, "{lbad}");
    // The same workload reaches both small engines: the log's share is the same, the rest not.
    assert_eq!(kangaroo["miss_ratio"], lbad["miss_ratio"]);
    assert_ne!(fw["alwa"], kangaroo["alwa"]);
}

#[test]
fn without_discard_the_engines_do_the_same_and_the_device_relocates_more() {
    // A conventional SSD never told what the cache dropped (KLog's flushed segments,
    // FairyWREN's reclaimed units): the engine's figures are the same, its DLWA higher.
    for engine in ["kangaroo", "fairywren"] {
        let one = [FW_SMALL, &["--engine", engine, "--handles", "shared"]].concat();
        let told = json(&one);
        let kept = json(&[&one[..], &["--no-discard"]].concat());
        assert_eq!(keys(&kept), REPORT_KEYS);
        assert_eq!(kept["miss_ratio"], told["miss_ratio"], "{engine}");
        assert_eq!(kept["alwa"], told["alwa"], "{engine}");
        assert_eq!(kept["wrong_values"], 0, "{engine}");
        assert!(
            kept["dlwa"].as_f64().unwrap() > told["dlwa"].as_f64().unwrap(),
            "{engine}: {kept} {told}"
        );
    }
}

#[test]
fn fairywren_keeps_the_report_keys() {
    let r = json(&[FW_SMALL, &["--engine", "fairywren"]].concat());
    assert_eq!(keys(&r), REPORT_KEYS);
}

#[test]
fn wren_span_gives_fairywren_the_device_over_provisioning_on_the_same_flash() {
    // The device is the one --flash-mib and --op give a conventional SSD (16 MiB, 7%, 128 KiB
    // units: 138 units); with --wren-span the cache spans all of them but the 7 the device
    // keeps for its three handles, its garbage collection and its reserve.
    let fdp = [FW_SMALL, &["--engine", "fairywren"]].concat();
    let plain = json(&fdp);
    let wren = json(&[&fdp[..], &["--wren-span"]].concat());
    assert_eq!(keys(&wren), REPORT_KEYS);
    assert_eq!(plain["wren_span"], false);
    assert_eq!(wren["wren_span"], true);
    assert_eq!(plain["flash_bytes"].as_u64().unwrap(), 16 << 20);
    assert_eq!(
        wren["flash_bytes"].as_u64().unwrap(),
        (138 - 7) * (128 << 10)
    );
    assert_eq!(wren["dlwa"].as_f64().unwrap(), 1.0);
    assert_eq!(wren["wrong_values"], 0);
    let l = &wren["layout"];
    assert!(l["fwsets_eus"].as_u64() > plain["layout"]["fwsets_eus"].as_u64());
    // What the cache holds, read from flash: the objects reported are the held ones.
    let held = ["held_hot_objects", "held_cold_objects", "held_log_objects"]
        .iter()
        .map(|k| l[k].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(held, wren["objects"].as_u64().unwrap(), "{l}");
    let pages = l["held_hot_pages"].as_u64().unwrap() + l["held_cold_pages"].as_u64().unwrap();
    assert!(pages <= l["subset_pages"].as_u64().unwrap());
    let bytes = l["held_hot_bytes"].as_u64().unwrap() + l["held_cold_bytes"].as_u64().unwrap();
    assert!(bytes > 0 && bytes <= pages * 4096, "{l}");
    // Kangaroo reports what it holds the same way.
    let k = json(&[FW_SMALL, &["--engine", "kangaroo"]].concat());
    let kl = &k["layout"];
    assert_eq!(
        kl["held_set_objects"].as_u64().unwrap() + kl["held_log_objects"].as_u64().unwrap(),
        k["objects"].as_u64().unwrap(),
        "{kl}"
    );
    assert!(kl["held_set_pages"].as_u64() <= kl["sets"].as_u64());
    // It needs the whole device's handles apart and the whole logical space.
    for bad in [&["--handles", "shared"][..], &["--utilization", "0.9"][..]] {
        let out = cachebench(&[&fdp[..], &["--wren-span"], bad].concat());
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--wren-span"));
    }
}

// --fill-objects: new keys until the engine holds the target, on a cache that holds more.
const FILL: &[&str] = &[
    "--json",
    "-q",
    "--flash-mib",
    "16",
    "--ru-kib",
    "128",
    "--sizes",
    "fixed:200",
];

#[test]
fn fill_stops_at_the_target_and_reports_dram_by_structure() {
    for engine in ["kangaroo", "fairywren"] {
        let r = json(&[FILL, &["--engine", engine, "--fill-objects", "20000"]].concat());
        let fill = &r["fill"];
        assert_eq!(fill["target_objects"], 20_000, "{engine}");
        assert_eq!(fill["reached"], true, "{engine}");
        let objects = r["objects"].as_u64().unwrap();
        // Checked every 1,024 sets: at most that many past the target.
        assert!(
            (20_000..20_000 + 1_024).contains(&objects),
            "{engine}: {objects}"
        );
        let keys_set = fill["keys_set"].as_u64().unwrap();
        assert!(
            keys_set >= objects,
            "{engine}: {keys_set} keys for {objects}"
        );
        assert_eq!(r["sets"].as_u64().unwrap(), keys_set, "{engine}");
        // The keys read back that are still held carry their own values.
        assert_eq!(r["wrong_values"], 0, "{engine}");
        assert_eq!(fill["readback"], r["gets"], "{engine}");
        let hits = fill["readback_hits"].as_u64().unwrap();
        assert_eq!(
            hits + r["misses"].as_u64().unwrap(),
            r["gets"].as_u64().unwrap()
        );
        assert!(hits > 0, "{engine}: nothing read back");
        // The per-structure bytes add up to the total the bits per object come from.
        let layout = r["layout"].as_object().unwrap();
        let parts: u64 = layout
            .iter()
            .filter(|(k, _)| k.starts_with("dram_"))
            .map(|(_, v)| v.as_u64().unwrap())
            .sum();
        let dram = r["dram_bytes"].as_u64().unwrap();
        assert!(
            layout.len() > 5 && parts == dram,
            "{engine}: {parts} vs {dram}"
        );
        let bits = r["dram_bits_per_object"].as_f64().unwrap();
        assert_eq!(bits, dram as f64 * 8.0 / objects as f64, "{engine}");
    }
}

#[test]
fn fill_past_what_the_cache_holds_stops_when_the_count_stops_growing() {
    // 16 MiB of 200-byte objects holds well under 200,000.
    let r = json(&[FILL, &["--engine", "kangaroo", "--fill-objects", "200000"]].concat());
    let fill = &r["fill"];
    assert_eq!(fill["reached"], false);
    let objects = r["objects"].as_u64().unwrap();
    assert!(objects > 0 && objects < 200_000, "{objects}");
    // It stopped after a whole cache's worth of keys without 0.1% growth, having set at
    // least as many keys as it held before that.
    let keys_set = fill["keys_set"].as_u64().unwrap();
    assert!(
        keys_set as f64 > 1.99 * objects as f64,
        "{keys_set} for {objects}"
    );
}

#[test]
fn fill_objects_with_a_trace_exits_2() {
    let out = cachebench(&["--fill-objects", "10", "--trace", "/nonexistent.csv"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fill-objects"));
}
