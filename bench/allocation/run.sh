#!/usr/bin/env bash
# Cache allocation benchmark: allocation time for 100/1,000/5,000 tenants and the hit-rate
# gain over an equal split on exact LRU curves of the real traces (../shared/traces/).
# Markdown on stdout; the plot goes to docs/benchmarks/allocation.png.
#   bench/allocation/run.sh [--runs N]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
[ -x .lachesis/venv/bin/python ] || ./lachesis install
(cd agents && cargo build --release -q -p lachesis-mrc --bin lachesis-mrc \
  && cargo build --release -q -p lachesis-device --bin lachesis-devsim)
mrc="${CARGO_TARGET_DIR:-$root/agents/target}/release/lachesis-mrc"
export LACHESIS_DEVSIM="${CARGO_TARGET_DIR:-$root/agents/target}/release/lachesis-devsim"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
.lachesis/venv/bin/python bench/allocation/bench.py --mrc "$mrc" --json "$out/allocation.json" "$@"
# matplotlib only for the plot, in a throw-away environment.
.lachesis/tools/bin/uv run -q --no-project --python .lachesis/venv/bin/python --with matplotlib \
  python bench/allocation/plot.py "$out/allocation.json" docs/benchmarks/allocation.png
echo "plot: docs/benchmarks/allocation.png" >&2
