#!/usr/bin/env bash
# Data path benchmark: fio 4 KiB random read and write (IOPS, p99 latency) on lachesis-fs
# mounts, one per FUSE transport (io_uring and /dev/fuse side by side), for a passthrough flow,
# a user-space flow (endpoint detour) and cache-stage flows (DRAM hits, flash hits, flash
# misses), each against the same backing file system without FUSE, in the same run; medians of
# RUNS. Markdown on stdout, progress on stderr; with OUT=DIR also DIR/datapath.json and the plot
# DIR/datapath.png. docs/benchmarks/datapath.md holds copies of runs.
#
#   bench/datapath/run.sh     # RUNS=3 SECONDS_PER_RUN=4 SIZE=256M JOBS=1,4 FUSE_TRANSPORT=dev,uring
#   CACHE_DEVICE_DIR=/dev/shm bench/datapath/run.sh   # flash stages on a faster medium than the backing disk
# Needs root, /dev/fuse and fio (and a kernel with FUSE over io_uring for `uring`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
command -v fio >/dev/null || { echo "run.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "run.sh: /dev/fuse is missing" >&2; exit 2; }
(cd "$ROOT/agents" && cargo build --release -q -p lachesis-fs -j "${CARGO_JOBS:-2}" >&2)
FS_BIN="${CARGO_TARGET_DIR:-$ROOT/agents/target}/release/lachesis-fs"
EXTRA=()
[ -n "${OUT:-}" ] && { mkdir -p "$OUT"; EXTRA=(--json "$OUT/datapath.json"); }
[ -n "${CACHE_DEVICE_DIR:-}" ] && EXTRA+=(--cache-device-dir "$CACHE_DEVICE_DIR")
python3 "$ROOT/bench/datapath/bench.py" --fs-bin "$FS_BIN" \
  --runs "${RUNS:-3}" --seconds "${SECONDS_PER_RUN:-4}" --size "${SIZE:-256M}" --jobs "${JOBS:-1,4}" \
  --fuse-transport "${FUSE_TRANSPORT:-dev,uring}" "${EXTRA[@]}"
if [ -n "${OUT:-}" ]; then
  # matplotlib only for the plot, in a throw-away environment.
  "$ROOT/.lachesis/tools/bin/uv" run -q --no-project --python "$ROOT/.lachesis/venv/bin/python" --with matplotlib \
    python "$ROOT/bench/datapath/plot.py" "$OUT/datapath.json" "$OUT/datapath.png"
fi
