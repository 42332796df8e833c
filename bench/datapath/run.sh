#!/usr/bin/env bash
# Data path benchmark: fio 4 KiB random read and write (IOPS, p99 latency) on a lachesis-fs
# mount for a passthrough flow, a user-space flow (endpoint detour) and a cache-stage flow,
# each against the same backing file system without FUSE, in the same run; medians of RUNS.
# Markdown on stdout, progress on stderr; docs/benchmarks/datapath.md holds a copy of one run.
#
#   bench/datapath/run.sh              # RUNS=3 SECONDS_PER_RUN=4 SIZE=256M JOBS=1,2
# Needs root, /dev/fuse and fio.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
command -v fio >/dev/null || { echo "run.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "run.sh: /dev/fuse is missing" >&2; exit 2; }
(cd "$ROOT/agents" && cargo build --release -q -p lachesis-fs -j "${CARGO_JOBS:-2}" >&2)
FS_BIN="${CARGO_TARGET_DIR:-$ROOT/agents/target}/release/lachesis-fs"
exec python3 "$ROOT/bench/datapath/bench.py" --fs-bin "$FS_BIN" \
  --runs "${RUNS:-3}" --seconds "${SECONDS_PER_RUN:-4}" --size "${SIZE:-256M}" --jobs "${JOBS:-1,2}"
