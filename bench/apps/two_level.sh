#!/usr/bin/env bash
# Two-level caches (Moirai §5.3.5): one level vs two with the controller's α split on the
# shared traces, simulated, and measured with real processes (lachesis-fs mount and serve) on
# the traces REAL names (default cloudPhysicsIO; needs root and /dev/fuse; REAL= skips it);
# bench/apps/two_level.py says how. Prints the section of docs/benchmarks/apps.md and writes
# docs/benchmarks/apps-two-level.svg.
#
#   bench/apps/two_level.sh [TRACE...]     (default: the shared traces)
#   LACHESIS_FS_BIN: the lachesis-fs binary (default agents/target/release/lachesis-fs)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TRACES_DIR="${LACHESIS_TRACES:-$ROOT/../shared/traces}"
PY="${PYTHON:-$ROOT/.lachesis/venv/bin/python}"
if [ $# -eq 0 ]; then
  set -- "$TRACES_DIR/cloudPhysicsIO.csv" "$TRACES_DIR/arc/OLTP.lis.zst" "$TRACES_DIR/arc/P3.lis.zst"
fi
"$PY" "$ROOT/bench/apps/two_level.py" "$ROOT/docs/benchmarks/apps-two-level.svg" "$@"
