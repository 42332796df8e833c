//! `lachesis-cachebench --engine fairywren` end to end: the same command and JSON report as
//! for Kangaroo, so one command compares both; bad FairyWREN flags exit 2 naming the flag.

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
    let kangaroo = json(&[SMALL, &["--engine", "kangaroo"]].concat());
    let fairywren = json(&[SMALL, &["--engine", "fairywren"]].concat());
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
    // The shared knobs reach both engines.
    let k10 = json(&[SMALL, &["--engine", "kangaroo", "--log-fraction", "0.1"]].concat());
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
