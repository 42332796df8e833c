#!/usr/bin/env bash
# Device-layer benchmarks. Prints Markdown on stdout (progress on stderr); the figures in
# docs/benchmarks/device.md are a copy of one run's output.
#
#   bench/device/run.sh              # everything
#   bench/device/run.sh sim dlwa     # a subset: sim (simulator speed), dlwa (DLWA tables and
#                                    # plot), iops (io_uring backend vs fio), guest (the NVMe
#                                    # passthrough backend vs fio's io_uring_cmd in the QEMU guest;
#                                    # not in the default set: boots a guest, minutes)
#
# Environment: BENCH_FILE (test file for the IOPS runs, on a filesystem with O_DIRECT;
# default /tmp/lachesis-device-bench.dat), IOPS_RUNS (default 5), IOPS_RUNTIME (seconds,
# default 5), IOPS_SIZE_MIB (default 1024), CARGO_JOBS (default 2).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT/agents"
JOBS="${CARGO_JOBS:-2}"
what=("$@")
[ ${#what[@]} -eq 0 ] && what=(sim dlwa iops)

for w in "${what[@]}"; do
  case "$w" in sim|dlwa|iops|guest) ;; *) echo "run.sh: unknown benchmark '$w' (sim, dlwa, iops, guest)" >&2; exit 2 ;; esac
done

bench() { cargo bench -q -p lachesis-device -j "$JOBS" --bench "$@"; }

echo "## Run $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "- machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -r)"
echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared)"
echo "- $(rustc --version), $(fio --version 2>/dev/null || echo 'fio missing')"
echo

for w in "${what[@]}"; do
  case "$w" in
    sim)
      echo "### Simulator speed"
      echo
      echo "\`cargo bench -p lachesis-device --bench sim_speed -- --runs 5\`"
      echo
      bench sim_speed -- --runs 5
      echo ;;
    dlwa)
      echo "### DLWA"
      echo
      echo "\`cargo bench -p lachesis-device --bench dlwa -- all --plot docs/benchmarks/device-dlwa-grid.png\`"
      echo
      bench dlwa -- all --plot "$ROOT/docs/benchmarks/device-dlwa-grid.png"
      echo ;;
    iops)
      echo "### io_uring backend vs fio"
      echo
      echo "\`cargo bench -p lachesis-device --bench uring_vs_fio -- --runs ${IOPS_RUNS:-5} --runtime ${IOPS_RUNTIME:-5} --size-mib ${IOPS_SIZE_MIB:-1024}\`"
      echo
      bench uring_vs_fio -- --file "${BENCH_FILE:-/tmp/lachesis-device-bench.dat}" \
        --runs "${IOPS_RUNS:-5}" --runtime "${IOPS_RUNTIME:-5}" --size-mib "${IOPS_SIZE_MIB:-1024}"
      echo ;;
    guest)
      echo "### NVMe passthrough in the QEMU guest vs fio's io_uring_cmd engine"
      echo
      echo "\`python e2e/guest/vm.py DIR --iops && python bench/device/guest_iops.py DIR\`"
      echo
      out="$(mktemp -d)"
      "$ROOT/.lachesis/venv/bin/python" "$ROOT/e2e/guest/vm.py" "$out" --iops >/dev/null
      "$ROOT/.lachesis/venv/bin/python" "$ROOT/bench/device/guest_iops.py" "$out"
      rm -rf "$out"
      echo ;;
  esac
done
