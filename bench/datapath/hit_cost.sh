#!/usr/bin/env bash
# What one 4 KiB read hit of a DRAM cache stage costs through lachesis-fs, per binary and
# FUSE transport: fio's IOPS and mean latency (one job, psync, O_DIRECT, a 64 MiB file the
# stage holds whole) and the daemon's CPU per read, user and system, from /proc/PID/stat over
# the measured run. Pairs alternate the binaries and transports, so each sees the same machine.
#
#   bench/datapath/hit_cost.sh LABEL=LACHESIS_FS_BIN [LABEL=BIN ...]
#     PAIRS=2 SECONDS_PER_RUN=4 TRANSPORTS="dev uring" FLOW=cache RW=randread
#
# FLOW=user measures the user-space endpoint flow instead (every IO forwarded by the switch to
# a file of another directory, O_DIRECT), and RW=randwrite writes instead of reading.
#
# Needs root, fio, and for `uring` a kernel with FUSE over io_uring (6.14+); it switches
# /sys/module/fuse/parameters/enable_uring on for those runs and puts it back. Run it under
# `flock -o /tmp/lachesis-bench.lock` beside other benchmarks.
set -euo pipefail
[ "$#" -ge 1 ] || { echo "usage: $0 LABEL=LACHESIS_FS_BIN [...]" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "$0: run as root (FUSE mount)" >&2; exit 2; }
PAIRS="${PAIRS:-2}"; SECS="${SECONDS_PER_RUN:-4}"; TRANSPORTS="${TRANSPORTS:-dev uring}"
FLOW="${FLOW:-cache}"; RW="${RW:-randread}"
case "$FLOW" in cache|user) ;; *) echo "$0: FLOW=$FLOW: cache or user" >&2; exit 2;; esac
case "$RW" in randread|randwrite) ;; *) echo "$0: RW=$RW: randread or randwrite" >&2; exit 2;; esac
PARAM=/sys/module/fuse/parameters/enable_uring
WAS="$(cat "$PARAM" 2>/dev/null || echo absent)"
WORK="$(mktemp -d /tmp/lachesis-hitcost-XXXXXX)"
trap 'fusermount3 -u -z "$WORK/m" 2>/dev/null || true; [ "$WAS" = absent ] || echo "$WAS" > "$PARAM"; rm -rf "$WORK"' EXIT
cat > "$WORK/rules.json" <<EOF
{"rules": [{"name": "hit", "priority": 20, "match": {"path_prefix": "/cache"},
            "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/dram"}}]},
           {"name": "user", "priority": 10, "match": {"path_prefix": "/user"},
            "detours": [{"what": "io", "to": {"kind": "file", "target": "$WORK/ep"}}]}],
 "stages": [{"kind": "cache", "name": "cache/dram", "owner": null, "engine": "dram",
             "size_bytes": 536870912, "write_mode": "through", "eviction": "lru",
             "max_dirty_bytes": 16777216, "device": null, "placement": [], "next": null}]}
EOF
ticks="$(getconf CLK_TCK)"

# One measured run: prints "IOPS MEAN_US USER_US SYS_US".
one() {
  local bin="$1" transport="$2" pid u0 s0 u1 s1 kb
  rm -rf "$WORK/b" "$WORK/m" "$WORK/ep"; mkdir -p "$WORK/b" "$WORK/m" "$WORK/ep"
  "$bin" mount --backing "$WORK/b" --mountpoint "$WORK/m" --rules "$WORK/rules.json" \
    --fuse-transport "$transport" > "$WORK/fs.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do mountpoint -q "$WORK/m" && break; sleep 0.05; done
  mountpoint -q "$WORK/m" || { cat "$WORK/fs.log" >&2; exit 1; }
  mkdir "$WORK/m/$FLOW"
  local f="$WORK/m/$FLOW/f" common="--name=h --size=64M --bs=4k --direct=1 --ioengine=psync"
  fio $common --filename="$f" --rw=write --bs=1M > /dev/null
  fio $common --filename="$f" --rw="$RW" --time_based --runtime=2 > /dev/null
  read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
  fio $common --filename="$f" --rw="$RW" --time_based --runtime="$SECS" --output-format=terse > "$WORK/fio.out"
  read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
  kill -INT "$pid"; wait "$pid" || true
  # terse v3: field 6 read KiB, 8 read IOPS, 40 mean latency (µs); writes 41 fields on.
  local o=0; [ "$RW" = randwrite ] && o=41
  awk -F';' -v o="$o" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v t="$ticks" \
    '{ios = $(6 + o) / 4; printf "%d %.1f %.2f %.2f\n", $(8 + o), $(40 + o), u / t * 1e6 / ios, s / t * 1e6 / ios}' "$WORK/fio.out"
}

declare -A rows
for pair in $(seq "$PAIRS"); do
  for spec in "$@"; do
    label="${spec%%=*}"; bin="${spec#*=}"
    for t in $TRANSPORTS; do
      if [ "$t" = uring ]; then echo Y > "$PARAM"; else [ "$WAS" = absent ] || echo "$WAS" > "$PARAM"; fi
      echo "pair $pair: $label $t" >&2
      rows["$label $t"]+="$(one "$bin" "$t")|"
    done
  done
done
what="DRAM cache stage hits"; [ "$FLOW" = user ] && what="user-space endpoint flow"
echo "$what, 4 KiB $RW, 1 fio job, ${SECS} s per run, ${PAIRS} pairs; load average $(cut -d' ' -f1 /proc/loadavg) at the end"
echo
echo "| binary | transport | IOPS per run | mean µs per run | daemon CPU per IO, user µs | system µs |"
echo "|---|---|---|---|---|---|"
for spec in "$@"; do
  label="${spec%%=*}"
  for t in $TRANSPORTS; do
    IFS='|' read -r -a runs <<< "${rows["$label $t"]}"
    iops=""; lat=""; usr=""; sys=""
    for r in "${runs[@]}"; do
      read -r a b c d <<< "$r"
      iops+="${iops:+ / }$a"; lat+="${lat:+ / }$b"; usr+="${usr:+ / }$c"; sys+="${sys:+ / }$d"
    done
    echo "| $label | $t | $iops | $lat | $usr | $sys |"
  done
done
