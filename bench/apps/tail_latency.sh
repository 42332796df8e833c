#!/usr/bin/env bash
# Tail-latency routing (sRoute §6.5.1) against the application off, with real processes:
# redis-server, the controller, an agent's FUSE mount and two `lachesis-fs serve` (E rate
# limited with --max-iops, a competing load makes it slow; F idle). bench/apps/tail_latency.py
# says how. Prints the section of docs/benchmarks/apps.md and writes
# docs/benchmarks/apps-tail-latency.png (and .json: per-run counters, states, bounds).
#
#   sudo -E bench/apps/tail_latency.sh       root (FUSE), /dev/fuse, redis-server
#   RUNS=3 SCALE=1                           runs (medians are reported); phase lengths x SCALE
#   PACE=100 E_IOPS=1000 COMPETITORS=32      writes/s per flow; E's --max-iops; competing connections
#   ALPHA=3                                  the application's alpha (the off flow's is 1000)
#   KEEP=/tmp                                where a run that lost data keeps its files and logs
#   LACHESIS_AGENT_BIN, LACHESIS_FS_BIN      binaries [default: agents/target/release, built here]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${LACHESIS_AGENT_BIN:-}${LACHESIS_FS_BIN:-}" ]; then
  (cd "$ROOT/agents" && cargo build --release --locked -q -p lachesis-agent -p lachesis-fs)
fi
# matplotlib only for the plot, in a throw-away environment over the venv (the e2e harness).
"$ROOT/.lachesis/tools/bin/uv" run -q --no-project --python "$ROOT/.lachesis/venv/bin/python" --with matplotlib \
  python "$ROOT/bench/apps/tail_latency.py" "$ROOT/docs/benchmarks/apps-tail-latency.png"
