//! The BPF program's splitmix64 (`ebpf/hash.h`, the header `lachesis.bpf.c` includes) compiled
//! for user space with the host's C compiler and run on the shared fixture
//! `api-schemas/fixtures/hash/splitmix64.json`, the cases `lachesis_mrc::hash::mix64` runs too:
//! the kernel's sampling decisions are the ones user space recomputes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (in, out) pairs of the fixture, as the decimal strings it holds.
fn cases() -> Vec<(String, String)> {
    let path = repo().join("api-schemas/fixtures/hash/splitmix64.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    let field = |c: &serde_json::Value, f: &str| {
        let s = c[f]
            .as_str()
            .unwrap_or_else(|| panic!("{f} of {c} is not a string"));
        s.parse::<u64>()
            .unwrap_or_else(|e| panic!("{f} of {c}: {e}"));
        s.to_string()
    };
    doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| (field(c, "in"), field(c, "out")))
        .collect()
}

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <linux/types.h>
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#include "hash.h"

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		printf("%llu\n", (unsigned long long)lx_mix64(strtoull(argv[i], NULL, 10)));
	return 0;
}
"#;

#[test]
fn the_bpf_programs_mix64_matches_the_shared_fixture() {
    let cases = cases();
    assert!(cases.len() >= 12, "{} cases", cases.len());
    let dir = tempfile::tempdir().expect("temp dir");
    let (src, exe) = (dir.path().join("mix64.c"), dir.path().join("mix64"));
    std::fs::write(&src, PROGRAM).expect("write the C program");
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=gnu11", "-O2", "-Wall", "-Werror", "-I"])
        .arg(repo().join("ebpf"))
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler {cc:?} (set CC): {e}"));
    assert!(
        built.status.success(),
        "{cc:?} failed on ebpf/hash.h: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe)
        .args(cases.iter().map(|(i, _)| i))
        .output()
        .expect("run the compiled check");
    assert!(run.status.success());
    let got: Vec<String> = String::from_utf8(run.stdout)
        .expect("UTF-8")
        .lines()
        .map(str::to_string)
        .collect();
    let want: Vec<String> = cases.iter().map(|(_, o)| o.clone()).collect();
    assert_eq!(got.len(), want.len());
    for ((input, want), got) in cases.iter().map(|(i, _)| i).zip(&want).zip(&got) {
        assert_eq!(got, want, "lx_mix64({input})");
    }
}
