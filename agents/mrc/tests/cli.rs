//! The `lachesis-mrc` binary end to end.

mod common;

use std::process::Command;

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lachesis-mrc"))
}

/// Runs the command, fails the test with its stderr unless it succeeded, and returns stdout.
fn succeed(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn json_output_has_curves_and_errors_against_exact() {
    let stdout = succeed(
        cli()
            .arg(common::traces_dir().join("cloudPhysicsIO.oracleGeneral.bin"))
            .args([
                "-a",
                "exact,shards-fixed-rate,shards-fixed-size",
                "--rate",
                "0.1",
                "--sizes",
                "20",
                "-q",
            ]),
    );
    let v: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(v["references"], 113_872);
    assert_eq!(v["unique_keys"], 48_974);
    let curves = v["curves"].as_array().unwrap();
    assert_eq!(curves.len(), 3);
    assert_eq!(curves[0]["sizes"].as_array().unwrap().len(), 20);
    assert!(curves[1]["mae_vs_exact"].as_f64().unwrap() < 0.05);
}

#[test]
fn adj_all_runs_every_correction_side_by_side() {
    let stdout = succeed(
        cli()
            .arg(common::traces_dir().join("cloudPhysicsIO.oracleGeneral.bin"))
            .args([
                "-a",
                "exact,shards-fixed-rate",
                "--rate",
                "0.1",
                "--adj",
                "all",
            ])
            .args(["--sizes", "20", "--spacing", "linear", "-q"]),
    );
    let v: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    let curves = v["curves"].as_array().unwrap();
    let labels: Vec<&str> = curves
        .iter()
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels,
        [
            "exact",
            "shards-fixed-rate(R=0.1,adj)",
            "shards-fixed-rate(R=0.1,shards adj)",
            "shards-fixed-rate(R=0.1,no adj)"
        ]
    );
    let mae = |i: usize| curves[i]["mae_vs_exact"].as_f64().unwrap();
    // Three different estimates, the uncorrected one far off on this trace.
    assert!(mae(1) != mae(2) && mae(3) > 2.0 * mae(1), "{labels:?}");
}

#[test]
fn csv_output_with_explicit_sizes_and_policies() {
    let stdout = succeed(
        cli()
            .arg(common::traces_dir().join("cloudPhysicsIO.csv"))
            .args([
                "-a",
                "minisim,full-sim",
                "--policy",
                "fifo,s3fifo",
                "--rate",
                "0.1",
            ])
            .args([
                "--cache-sizes",
                "1K,4096,16K",
                "-o",
                "csv",
                "-q",
                "--unit",
                "objects",
            ]),
    );
    let text = String::from_utf8(stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].starts_with("size,") && lines[0].contains("full-sim(s3fifo)"),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("1024,") && lines[3].starts_with("16384,"));
}

#[test]
fn plot_writes_a_png() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("mrc.png");
    succeed(
        cli()
            .arg(common::traces_dir().join("cloudPhysicsIO.oracleGeneral.bin"))
            .args([
                "-a",
                "exact,shards-fixed-rate",
                "--rate",
                "0.1",
                "--sizes",
                "12",
                "-q",
                "--plot",
            ])
            .arg(&png),
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"));
}

#[test]
fn windows_with_decay_are_reported() {
    let stdout = succeed(
        cli()
            .arg(common::traces_dir().join("cloudPhysicsIO.oracleGeneral.bin"))
            .args([
                "-a",
                "shards-fixed-rate",
                "--rate",
                "0.1",
                "--cache-sizes",
                "1000,10000",
                "--window",
                "40000",
                "-q",
            ]),
    );
    let v: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    let w = v["windows"].as_array().unwrap();
    assert_eq!(w.len(), 3);
    assert_eq!(w[2]["end_reference"], 113_872);
}

#[test]
fn bad_trace_exits_2_naming_file_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("broken.oracleGeneral.bin");
    std::fs::write(&p, [0u8; 24 * 3 + 5]).unwrap();
    let out = cli()
        .arg(&p)
        .args(["--cache-sizes", "10", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken.oracleGeneral.bin") && err.contains("record 4"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no partial curve on stdout");
}

#[test]
fn bad_arguments_exit_2() {
    let t = common::traces_dir().join("cloudPhysicsIO.oracleGeneral.bin");
    for args in [
        vec![
            "--rate",
            "0",
            "-a",
            "shards-fixed-rate",
            "--cache-sizes",
            "10",
        ],
        vec!["--policy", "arc", "-a", "minisim", "--cache-sizes", "10"],
        vec!["--cache-sizes", "0"],
        vec!["--format", "tar"],
        vec!["-a", "nonsense"],
    ] {
        let out = cli().arg(&t).args(&args).arg("-q").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
    let out = cli().arg("/nonexistent.bin").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.bin"));
}
