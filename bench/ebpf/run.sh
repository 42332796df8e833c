#!/usr/bin/env bash
# Overhead of Lachesis's eBPF metrics: fio 4 KiB O_DIRECT random reads
# (psync and io_uring) with the programs attached vs detached, alternating,
# medians of several rounds; samples reaching user space per IO; BPF run
# time per program and IO; and the added cost per syscall of the syscall
# hook. Prints markdown for
# docs/benchmarks/ebpf.md; the plot of the per-round ratios goes to
# docs/benchmarks/ebpf.png (PLOT=0 skips it). Needs root and fio.
#
#   bench/ebpf/run.sh                  # 9 rounds x 6 s per run
#   ROUNDS=3 RUNTIME=5 bench/ebpf/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../agents"

ROUNDS=${ROUNDS:-9}
RUNTIME=${RUNTIME:-6}
RATE=${RATE:-0.01}
DIR=${DIR:-/var/tmp}
SIZE_MIB=${SIZE_MIB:-1024}
JOBS=${JOBS:-2}

if [[ $(id -u) != 0 ]]; then
    echo "bench/ebpf/run.sh: needs root (loads BPF programs, creates cgroups)" >&2
    exit 2
fi
command -v fio >/dev/null || { echo "bench/ebpf/run.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }

cargo build --release --locked -j "$JOBS" -p lachesis-ebpf-metrics >&2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bin=${CARGO_TARGET_DIR:-target}/release/lachesis-ebpf-bench

echo "## Run $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "- command: \`ROUNDS=$ROUNDS RUNTIME=$RUNTIME RATE=$RATE bench/ebpf/run.sh\`"
echo "- machine: nproc $(nproc), $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), kernel $(uname -r)"
echo "- disk: $(df --output=source "$DIR" | tail -1) backing $DIR, scheduler $(cat /sys/block/"$(basename "$(df --output=source "$DIR" | tail -1)")"/queue/scheduler 2>/dev/null || echo '?')"
echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "### fio 4 KiB randread, O_DIRECT, ${RUNTIME}s per run, $ROUNDS rounds, R = $RATE"
echo
"$bin" fio --dir "$DIR" --size-mib "$SIZE_MIB" --runtime "$RUNTIME" --rounds "$ROUNDS" --rate "$RATE" \
    --json "$out/all.json"
echo
echo "### Same, block layer and SHARDS only (LoadOptions::layers = Layers::BLOCK_ONLY)"
echo
"$bin" fio --dir "$DIR" --size-mib "$SIZE_MIB" --runtime "$RUNTIME" --rounds "$ROUNDS" --rate "$RATE" --block-only \
    --json "$out/block.json"
echo
echo "### Cost per syscall of the syscall hook (medians of $ROUNDS alternating rounds)"
echo
"$bin" syscalls --dir "$DIR" --rounds "$ROUNDS"

if [[ ${PLOT:-1} != 0 ]]; then
    # matplotlib only for the plot, in a throw-away environment.
    ../.lachesis/tools/bin/uv run -q --no-project --python ../.lachesis/venv/bin/python --with matplotlib \
        python ../bench/ebpf/plot.py ../docs/benchmarks/ebpf.png \
        "all layers=$out/all.json" "block only=$out/block.json"
    echo "plot: docs/benchmarks/ebpf.png" >&2
fi
