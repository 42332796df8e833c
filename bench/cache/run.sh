#!/usr/bin/env bash
# Flash cache benchmarks: set-associative vs Kangaroo vs log-only (equal DRAM, equal device
# write rate), DLWA with shared vs separate placement handles, gets/sets per core. Prints
# Markdown on stdout (progress on stderr); docs/benchmarks/cache.md holds a copy of one run.
#
#   bench/cache/run.sh                       # everything (about 25 minutes on 2 cores)
#   bench/cache/run.sh tiny handles          # a subset: tiny, trace, handles, throughput
#
# Environment: SCALE (default 1: workload and cache sizes; 0.25 for a quick look), RUNS
# (throughput repetitions, default 3), CARGO_JOBS (default 2).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
JOBS="${CARGO_JOBS:-2}"
for w in "$@"; do
  case "$w" in tiny|trace|handles|throughput) ;; *) echo "run.sh: unknown benchmark '$w' (tiny, trace, handles, throughput)" >&2; exit 2 ;; esac
done

cd "$ROOT/agents"
cargo build --release -q -p lachesis-cache --bin lachesis-cachebench -j "$JOBS" >&2
TARGET="${CARGO_TARGET_DIR:-$ROOT/agents/target}"

echo "## Run $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "- machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -r)"
echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared)"
echo "- $(rustc --version); SCALE=${SCALE:-1}"
echo
CACHEBENCH="$TARGET/release/lachesis-cachebench" ROOT="$ROOT" python3 "$ROOT/bench/cache/compare.py" "$@"
