#!/bin/bash
# Runs inside the QEMU guest (e2e/guest/vm.py boots it): drives the emulated FDP namespace with
# the project's passthrough backend and with nvme-cli, runs engines on it, and runs the bcc
# tools beside lachesis-top's libbpf counters on one fio run. Every result is a file in OUT;
# the tests on the host read them. A step that fails is recorded in OUT/failed and the script
# goes on, so one failure does not hide the others.
# Usage: in_guest.sh OUT BIN REPO [iops]   (BIN: the release binaries; REPO: the repository
# root; iops: also the IOPS runs of bench/device/run.sh guest, which no test asserts on)
set -u
OUT=$1 BIN=$2 REPO=$3 IOPS=${4:-}
NG=/dev/ng0n1 CTRL=/dev/nvme0 BLK=/dev/nvme0n1
step() { echo "guest: $*" >&2; }
run() { # run NAME CMD...: stdout to OUT/NAME, stderr to OUT/NAME.err
  local name=$1; shift
  "$@" > "$OUT/$name" 2> "$OUT/$name.err" || echo "$name $?" >> "$OUT/failed"
}
cli_logs() { # cli_logs PREFIX: what nvme-cli reads of the same log pages
  run "$1-configs.json" nvme fdp configs $CTRL -e 1 -o json
  run "$1-usage.json" nvme fdp usage $CTRL -e 1 -o json
  run "$1-stats.json" nvme fdp stats $CTRL -e 1 -o json
  run "$1-status.json" nvme fdp status $BLK -o json
  run "$1-events-host.json" nvme fdp events $CTRL -e 1 -E -o json
  run "$1-events-controller.json" nvme fdp events $CTRL -e 1 -o json
}

step "loading the nvme driver"
modprobe nvme
# Counted waits (hang guards): a loaded TCG guest can be slow to probe and mount.
for _ in $(seq 1200); do [ -c $NG ] && [ -b $BLK ] && break; sleep 0.1; done
[ -c $NG ] || { echo "no $NG after modprobe nvme" > "$OUT/boot-error"; exit 1; }
uname -r > "$OUT/kernel"

step "log pages before any write"
run p0.json "$BIN/lachesis-nvme" logs $NG
cli_logs c0

step "writes on handles 0, 1, 3, 5, read back, deallocate handle 1's range"
run exercise.json "$BIN/lachesis-nvme" exercise $NG --blocks 0:16,1:32,3:64,5:128 --trim 1
run pm.json "$BIN/lachesis-nvme" logs $NG
run cm-status.json nvme fdp status $BLK -o json
step "host events on placement id 3, then a reclaim unit handle update (RU not fully written)"
run set-events.txt nvme fdp set-events $BLK -n 1 -p 3 -e -t 0
run update.txt nvme fdp update $BLK -n 1 -p 3
run p1.json "$BIN/lachesis-nvme" logs $NG
cli_logs c1

for engine in loc hybrid; do
  step "engine $engine on the passthrough device"
  run "engine-$engine.json" "$BIN/lachesis-engine-replay" --device nvme:$NG --engine $engine --span-mib 16 --requests 6000
done

step "the agent's data path: a FUSE mount whose cache stage lives on the drive"
modprobe fuse
F=/run/fs; mkdir -p $F/backing $F/mnt
cat > $F/rules.json <<'JSON'
{"rules": [{"name": "t-cached", "priority": 10, "match": {"tenant": "t"},
            "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/t"}}]}],
 "stages": [{"kind": "cache", "name": "cache/t", "owner": "t", "engine": "loc",
             "size_bytes": 33554432, "write_mode": "through", "eviction": "lru",
             "max_dirty_bytes": 4096, "device": "flash0",
             "placement": [{"part": "loc", "handle": 6}], "next": null}]}
JSON
run fs-p0.json "$BIN/lachesis-nvme" logs $NG
"$BIN/lachesis-fs" mount --backing $F/backing --mountpoint $F/mnt --rules $F/rules.json \
  --tenant t=uid:0 --device flash0=nvme:$NG --stats $F/stats.json --no-passthrough \
  > "$OUT/fs-mount.log" 2>&1 &
fs_pid=$!
for _ in $(seq 1200); do mountpoint -q $F/mnt && [ -s $F/stats.json ] && break; sleep 0.2; done
dd if=/dev/urandom of=$F/data bs=1M count=8 status=none
cp $F/data $F/mnt/data && sync
sha256sum < $F/data | cut -d' ' -f1 > "$OUT/fs-sha-written"
for i in 1 2; do
  echo 3 > /proc/sys/vm/drop_caches
  sha256sum < $F/mnt/data | cut -d' ' -f1 > "$OUT/fs-sha-read-$i"
done
sha256sum < $F/backing/data | cut -d' ' -f1 > "$OUT/fs-sha-backing"
# A stats snapshot taken after the reads: snapshots are numbered.
seen=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"])' $F/stats.json)
for _ in $(seq 1200); do
  now=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"])' $F/stats.json 2>/dev/null || echo 0)
  [ "$now" -gt $((seen + 1)) ] && break; sleep 0.1
done
cp $F/stats.json "$OUT/fs-stats.json"
echo "$seen" > "$OUT/fs-snapshot-seen"
kill -INT $fs_pid; wait $fs_pid
run fs-p1.json "$BIN/lachesis-nvme" logs $NG

if [ "$IOPS" = iops ]; then
  step "IOPS: lachesis-nvme vs fio's io_uring_cmd engine, 4 KiB, QD 16, alternating"
  for i in 1 2 3; do
    for rw in randread randwrite; do
      run "iops-lachesis-$rw-$i.json" "$BIN/lachesis-nvme" iops $NG --rw $rw --bs 4096 --qd 16 --ios 4000
      run "iops-fio-$rw-$i.json" fio --name=p --filename=$NG --ioengine=io_uring_cmd --cmd_type=nvme \
        --rw=$rw --bs=4k --iodepth=16 --number_ios=4000 --size=1G --randrepeat=0 --output-format=json
    done
  done
fi

step "bcc tools and lachesis-top on one fio run in two tenant cgroups"
mkdir -p /sys/fs/cgroup/lx-a /sys/fs/cgroup/lx-b
tools=(bitesize biolatency top)
for tool in "${tools[@]}"; do
  mkfifo "/run/in-$tool"
  case $tool in
    top) cmd=("$BIN/lachesis-top" --json-until-eof --cgroup a=/lx-a --cgroup b=/lx-b) ;;
    *) cmd=(python3 "$REPO/ebpf/tools/tenant_$tool.py" --cgroup a=/lx-a --cgroup b=/lx-b) ;;
  esac
  "${cmd[@]}" < "/run/in-$tool" > "$OUT/tool-$tool.json" 2> "$OUT/tool-$tool.err" &
  eval "pid_$tool=$!; exec {fd_$tool}>/run/in-$tool"
done
for tool in "${tools[@]}"; do
  # bcc compiles its programs first (slow under TCG); stop waiting if the tool died.
  pid=pid_$tool
  until grep -q '^ready' "$OUT/tool-$tool.err" 2>/dev/null || ! kill -0 "${!pid}" 2>/dev/null; do sleep 0.2; done
  grep -q '^ready' "$OUT/tool-$tool.err" || echo "tool-$tool not ready" >> "$OUT/failed"
done
in_cgroup() { local cg=$1; shift; (echo $BASHPID > "/sys/fs/cgroup/$cg/cgroup.procs" && exec "$@"); }
run fio-a.json in_cgroup lx-a fio --name=a --filename=$BLK --direct=1 --ioengine=psync --rw=randread \
  --bs=4k --number_ios=3000 --size=512M --offset=0 --output-format=json
run fio-b.json in_cgroup lx-b fio --name=b --filename=$BLK --direct=1 --ioengine=psync --rw=randwrite \
  --bs=16k --number_ios=1000 --size=256M --offset=512M --output-format=json
for tool in "${tools[@]}"; do eval "exec {fd_$tool}>&-"; done
wait
step "done"
touch "$OUT/done"
