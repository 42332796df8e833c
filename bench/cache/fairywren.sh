#!/usr/bin/env bash
# FairyWREN vs Kangaroo (same traces, flash, device and run): Markdown on stdout, PNGs in
# docs/benchmarks/; docs/benchmarks/fairywren.md holds a copy of one run.
#
#   bench/cache/fairywren.sh               # tiny, whole and trace (SCALE=0.5 RUNS=3: about 30 minutes on 2 shared cores)
#   SCALE=0.25 RUNS=1 bench/cache/fairywren.sh tiny
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
for w in "$@"; do
  case "$w" in tiny|whole|trace) ;; *) echo "fairywren.sh: unknown benchmark '$w' (tiny, whole, trace)" >&2; exit 2 ;; esac
done
cd "$ROOT/agents"
cargo build --release -q -p lachesis-cache --bin lachesis-cachebench -j "${CARGO_JOBS:-2}" >&2
TARGET="${CARGO_TARGET_DIR:-$ROOT/agents/target}"
echo "## Run $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "- machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1); load at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- $(rustc --version); SCALE=${SCALE:-1} RUNS=${RUNS:-3}"
echo
CACHEBENCH="$TARGET/release/lachesis-cachebench" ROOT="$ROOT" python3 "$ROOT/bench/cache/fairywren.py" "$@"
