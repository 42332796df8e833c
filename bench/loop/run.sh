#!/usr/bin/env bash
# The closed loop, measured: `./lachesis demo --compare-equal-split` on the shared traces,
# RUNS times, against the running deployment (started here if it is not), while a sampler
# records every stage's allocated and installed size and hit ratio each second.
# Prints a markdown report on stdout (progress on stderr); the plot of the last run goes to
# docs/benchmarks/loop.png. docs/benchmarks/loop.md holds a copy of one report.
#
#   bench/loop/run.sh          # RUNS=3 PHASE_S=60 CACHE=32MiB
# The allocation loop runs at LACHESIS_ALLOCATION_INTERVAL_S=2, REACTION_S=6 when this
# script starts the deployment (as the e2e test does); an already running one keeps its own.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
started=0
if ! ./lachesis status >/dev/null 2>&1; then
  LACHESIS_ALLOCATION_INTERVAL_S="${LACHESIS_ALLOCATION_INTERVAL_S:-2}" \
  LACHESIS_ALLOCATION_REACTION_S="${LACHESIS_ALLOCATION_REACTION_S:-6}" \
  LACHESIS_TELEMETRY_INTERVAL_MS="${LACHESIS_TELEMETRY_INTERVAL_MS:-1000}" \
    ./lachesis up --detach >&2
  started=1
fi
trap '[ $started = 1 ] && ./lachesis down >&2 || true' EXIT
export LACHESIS_HOME="$ROOT/.lachesis" LACHESIS_TRACES="$ROOT/../shared/traces"
.lachesis/tools/bin/uv run -q --no-project --python .lachesis/venv/bin/python --with matplotlib \
  python bench/loop/loop.py --runs "${RUNS:-3}" --seconds "${PHASE_S:-60}" --cache "${CACHE:-32MiB}" \
  --plot docs/benchmarks/loop.png
