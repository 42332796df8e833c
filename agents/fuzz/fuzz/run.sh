#!/usr/bin/env bash
# Fuzz one target with libFuzzer for as long as asked, starting from its committed corpus.
#   ./run.sh TARGET [SECONDS]        (default 60; TARGET: see ../src/targets.rs)
# New inputs go to target/corpus-new/TARGET (the committed corpus is only read); a crash is
# written to artifacts/TARGET/. Needs `rustup toolchain install nightly` and
# `cargo install cargo-fuzz`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
[ $# -ge 1 ] || { echo "usage: $0 TARGET [SECONDS]" >&2; exit 2; }
target="$1" seconds="${2:-60}"
[ -d "../corpus/$target" ] || { echo "$0: no corpus for target '$target' (../corpus/)" >&2; exit 2; }
mkdir -p "target/corpus-new/$target"
exec cargo +nightly fuzz run --fuzz-dir . "$target" "target/corpus-new/$target" "../corpus/$target" \
  -- -max_total_time="$seconds" -rss_limit_mb=4096
