#!/usr/bin/env bash
# DINGOS (declared maintenance IO): the agent's planner against a naive scrub at the same
# deadline, under a foreground replay of each shared trace (lachesis-dingos-replay, simulated
# time, the real planner and dispatcher). Prints the section of docs/benchmarks/apps.md and
# writes docs/benchmarks/apps-dingos.svg.
#
#   bench/apps/dingos.sh [TRACE...]     (default: the shared traces)
#   WINDOWS="1 2 4"                     deadlines as multiples of each trace's duration
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TRACES_DIR="${LACHESIS_TRACES:-$ROOT/../shared/traces}"
OUT="$ROOT/docs/benchmarks"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/agents/target}"
(cd "$ROOT/agents" && cargo build --release --locked -q -p lachesis-declared --bin lachesis-dingos-replay)
BIN="$CARGO_TARGET_DIR/release/lachesis-dingos-replay"
if [ $# -eq 0 ]; then
  set -- "$TRACES_DIR/cloudPhysicsIO.csv" "$TRACES_DIR/arc/OLTP.lis.zst" "$TRACES_DIR/arc/P3.lis.zst"
fi
RESULTS="$(mktemp)"
trap 'rm -f "$RESULTS"' EXIT
for trace in "$@"; do
  name="$(basename "$trace")"; name="${name%%.*}"
  for w in ${WINDOWS:-1 4}; do
    echo "replaying $name, deadline ${w}x its duration" >&2
    "$BIN" "$trace" --window "$w" --name "$name" >> "$RESULTS"
  done
done
python3 "$ROOT/bench/apps/dingos.py" "$RESULTS" "$OUT/apps-dingos.svg"
