#!/usr/bin/env bash
# lachesis-mrc against libCacheSim (the PyPI package `libcachesim`, in the
# controller project's `bench` dependency group, pinned by controller/uv.lock):
# exact LRU, SHARDS and miniature simulation of LRU, FIFO and S3-FIFO against
# libCacheSim's own exact simulation and its spatially sampled one, on the
# same traces (../shared/traces) in the same run. Prints markdown tables
# (progress on stderr); never passes or fails. Results are kept in
# docs/benchmarks/mrc.md ("lachesis-mrc against libCacheSim").
#
#   bench/mrc/vs_libcachesim.sh                       # 5 repetitions, medians, then the plot
#   REPS=3 bench/mrc/vs_libcachesim.sh --traces oltp  # extra arguments go to vs_libcachesim.py
#
# The ARC traces are converted once to oracleGeneral (what both tools read)
# in ${TMPDIR:-/tmp}/lachesis-bench-mrc, never in the repository. Honours
# CARGO_TARGET_DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
uv="$root/.lachesis/tools/bin/uv"
[ -x "$uv" ] || uv=uv

(cd "$root/agents" && cargo build --release -j 2 -p lachesis-mrc --bins --locked)
cli="${CARGO_TARGET_DIR:-$root/agents/target}/release/lachesis-mrc"
out="$root/docs/benchmarks"

cd "$root"
exec "$uv" run -q --frozen --project controller --group bench python bench/mrc/vs_libcachesim.py \
    --cli "$cli" --reps "${REPS:-5}" \
    --json "$out/mrc-vs-libcachesim.json" --plot "$out/mrc-vs-libcachesim.svg" "$@"
