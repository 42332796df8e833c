#!/usr/bin/env bash
# KV front end vs memcached, side by side: a real memcached and lachesis-kv driven by the same
# load generator (lachesis-kvload) with the same workload in the same run. Markdown on stdout,
# progress on stderr; docs/benchmarks/kv.md holds a copy of one run, every kvload report of
# the run goes to docs/benchmarks/kv.json and the plot to docs/benchmarks/kv.png.
#
#   bench/kv/run.sh                        # throughput, tiny, fdp (about an hour on 2 cores: fdp's
#                                          # 12 runs are at steady state, 3-5 minutes each)
#   bench/kv/run.sh throughput             # a subset: throughput, tiny, fdp
#   SERVERS=memcached bench/kv/run.sh      # memcached alone (without lachesis-kv)
#
# Needs memcached (the Debian package; ./lachesis installs it). Environment: SCALE (sizes,
# default 1; 0.25 for a quick look), RUNS (throughput repetitions, default 3), DURATION
# (measured seconds per throughput run, default 10), WORKDIR (where the measuring devices'
# files go, default a fresh temporary folder), CARGO_JOBS (default 2).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
for w in "$@"; do
  case "$w" in throughput|tiny|fdp) ;; *) echo "run.sh: unknown section '$w' (throughput, tiny, fdp)" >&2; exit 2 ;; esac
done
command -v memcached >/dev/null || { echo "run.sh: memcached is not installed (./lachesis install)" >&2; exit 2; }

bins=(-p lachesis-kvload)
case " ${SERVERS:-memcached lachesis} " in *" lachesis "*) bins+=(-p lachesis-kv) ;; esac
(cd "$ROOT/agents" && cargo build --release -q "${bins[@]}" -j "${CARGO_JOBS:-2}" >&2)
TARGET="${CARGO_TARGET_DIR:-$ROOT/agents/target}/release"
out="$(mktemp -d)"
export WORKDIR="${WORKDIR:-$out}"
trap 'rm -rf "$out"' EXIT

echo "## Run $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "- machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -r)"
echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared)"
echo "- $(memcached -V), $(rustc --version); SCALE=${SCALE:-1} RUNS=${RUNS:-3} DURATION=${DURATION:-10}"
echo
KVLOAD="$TARGET/lachesis-kvload" LACHESIS_KV="$TARGET/lachesis-kv" \
  python3 "$ROOT/bench/kv/kv.py" --json "$ROOT/docs/benchmarks/kv.json" "$@"
# matplotlib only for the plot, in a throw-away environment.
"$ROOT/.lachesis/tools/bin/uv" run -q --no-project --python "$ROOT/.lachesis/venv/bin/python" --with matplotlib \
  python "$ROOT/bench/kv/plot.py" "$ROOT/docs/benchmarks/kv.json" "$ROOT/docs/benchmarks/kv.png"
echo "plot: docs/benchmarks/kv.png" >&2
