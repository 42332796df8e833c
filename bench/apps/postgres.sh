#!/usr/bin/env bash
# PostgreSQL on the data path: pgbench with its data directory (a) on the backing directory
# itself, (b) on the mount in a directory no rule touches (kernel passthrough), (c) on the mount
# with its IO in a tenant (the postgres user's uid) through a write-back flash cache stage (loc
# engine on a file device), in the same run. Each: `initdb -k` (data checksums), `pgbench -i -s
# SCALE`, `pgbench -c CLIENTS -T T`, then `pg_amcheck --heapallindexed` (server up) and
# `pg_checksums --check` (server stopped) must be clean; once the mount is gone, the backing
# copies of (b) and (c) are checked with pg_checksums too (what the stage wrote back). Prints a
# Markdown table of tps and checks (the section of docs/benchmarks/apps.md records a run), and
# JSON to $JSON when set. A failed check exits 1 after the table.
#
#   sudo -E bench/apps/postgres.sh          root (FUSE), /dev/fuse, Debian's postgresql (15)
#   T=60 SCALE=10 CLIENTS=4                 pgbench -T, -i -s, -c
#   STAGE_BYTES=268435456                   the loc stage's size (the device is 4x that, sparse)
#   MAX_DIRTY_BYTES=67108864                its max_dirty_bytes
#   PG_BIN=/usr/lib/postgresql/15/bin       PostgreSQL's programs
#   JSON=FILE                               also write the results as JSON
#   KEEP=1                                  keep the work directory (logs, data directories)
#   LACHESIS_FS_BIN                         lachesis-fs [default: agents/target/release, built here]
#   FUSE_TRANSPORT=auto                     lachesis-fs --fuse-transport (auto, uring, dev); uring
#                                           needs /sys/module/fuse/parameters/enable_uring = Y
#   CACHE_DEVICE_DIR=DIR                    the stage's device file there instead of beside the
#                                           backing directory (e.g. /dev/shm: a flash cache
#                                           faster than the storage behind it)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
T="${T:-60}"; SCALE="${SCALE:-10}"; CLIENTS="${CLIENTS:-4}"; FUSE_TRANSPORT="${FUSE_TRANSPORT:-auto}"
STAGE_BYTES="${STAGE_BYTES:-268435456}"; MAX_DIRTY_BYTES="${MAX_DIRTY_BYTES:-67108864}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
say() { printf 'postgres.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

[ "$(id -u)" -eq 0 ] || die "run as root (FUSE mount; PostgreSQL runs as the postgres user)"
[ -e /dev/fuse ] || die "/dev/fuse is missing"
[ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pgbench" ] && [ -x "$PG_BIN/pg_amcheck" ] || die "PostgreSQL not in $PG_BIN (./lachesis up installs Debian's postgresql; or set PG_BIN)"
PG_UID="$(id -u postgres 2>/dev/null)" || die "no postgres user (Debian's postgresql package creates it)"
if [ -z "${LACHESIS_FS_BIN:-}" ]; then
  (cd "$ROOT/agents" && cargo build --release --locked -q -p lachesis-fs)
  LACHESIS_FS_BIN="$ROOT/agents/target/release/lachesis-fs"
fi

WORK="$(mktemp -d /tmp/lachesis-postgres-XXXXXX)"
chmod 755 "$WORK"
if [ -n "${CACHE_DEVICE_DIR:-}" ]; then
  [ -d "$CACHE_DEVICE_DIR" ] || die "CACHE_DEVICE_DIR=$CACHE_DEVICE_DIR: not a directory"
  DEVICE_FILE="$CACHE_DEVICE_DIR/$(basename "$WORK")-flash0.img"
else
  DEVICE_FILE="$WORK/flash0.img"
fi
mkdir -p "$WORK/backing" "$WORK/mnt" "$WORK/direct" "$WORK/sock" "$WORK/log"
chown postgres:postgres "$WORK/direct" "$WORK/sock" "$WORK/log"
PORT=$((20000 + RANDOM % 20000))
MOUNT_PID=""
cleanup() {
  for d in "$WORK"/direct/pgdata "$WORK"/mnt/*/pgdata; do
    [ -f "$d/postmaster.pid" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$d" -m immediate -w stop >/dev/null 2>&1 || true
  done
  if [ -n "$MOUNT_PID" ] && kill -0 "$MOUNT_PID" 2>/dev/null; then kill "$MOUNT_PID"; wait "$MOUNT_PID" || true; fi
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then say "kept $WORK"; else rm -rf "$WORK"; rm -f "$DEVICE_FILE"; fi
}
trap cleanup EXIT

# The mount: /staged is the tenant pg's (the postgres uid) through a write-back loc stage;
# /plain matches no rule.
cat > "$WORK/rules.json" <<EOF
{"rules": [{"name": "pg", "priority": 10, "match": {"tenant": "pg", "path_prefix": "/staged"},
            "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/pg"}}]}],
 "stages": [{"kind": "cache", "name": "cache/pg", "owner": "pg", "engine": "loc",
             "size_bytes": $STAGE_BYTES, "write_mode": "back", "eviction": "lru",
             "max_dirty_bytes": $MAX_DIRTY_BYTES, "device": null, "placement": [], "next": null}]}
EOF
"$LACHESIS_FS_BIN" mount --backing "$WORK/backing" --mountpoint "$WORK/mnt" --rules "$WORK/rules.json" \
  --device "flash0=$DEVICE_FILE:$((STAGE_BYTES * 4))" --tenant "pg=uid:$PG_UID" \
  --stats "$WORK/stats.json" --fuse-transport "$FUSE_TRANSPORT" > "$WORK/fs.log" 2>&1 &
MOUNT_PID=$!
for _ in $(seq 300); do mountpoint -q "$WORK/mnt" && break; kill -0 "$MOUNT_PID" 2>/dev/null || break; sleep 0.1; done
mountpoint -q "$WORK/mnt" || { cat "$WORK/fs.log" >&2; die "lachesis-fs did not mount"; }
chmod 755 "$WORK/mnt"
mkdir "$WORK/mnt/plain" "$WORK/mnt/staged"
chown postgres:postgres "$WORK/mnt/plain" "$WORK/mnt/staged"

pg() { runuser -u postgres -- "$@"; }
stage_counters() {
  python3 - "$WORK/stats.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
(st,) = [x["stats"] for x in s["stages"] if x["name"] == "cache/pg"]
print(json.dumps({k: st[k] for k in ("installed_bytes", "hits", "misses", "bytes_written", "writebacks", "dirty_bytes", "evictions")}))
EOF
}

declare -A TPS INIT_S AMCHECK CHECKSUMS STAGE
FAILED=0
# run NAME DIR: one configuration, start to finish.
run() {
  local name="$1" data="$2/pgdata" log="$WORK/$1.log" out t0 t1
  say "$name: initdb -k in $data"
  pg "$PG_BIN/initdb" -k -A trust -U postgres -D "$data" > "$log" 2>&1
  pg "$PG_BIN/pg_ctl" -D "$data" -l "$WORK/log/$name-server.log" -w \
    -o "-p $PORT -k $WORK/sock -c listen_addresses=''" start >> "$log" 2>&1
  say "$name: pgbench -i -s $SCALE"
  t0=$(date +%s.%N)
  pg "$PG_BIN/pgbench" -h "$WORK/sock" -p "$PORT" -i -s "$SCALE" -q postgres >> "$log" 2>&1
  t1=$(date +%s.%N)
  INIT_S[$name]=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
  say "$name: pgbench -c $CLIENTS -T $T"
  out="$(pg "$PG_BIN/pgbench" -h "$WORK/sock" -p "$PORT" -c "$CLIENTS" -T "$T" postgres 2>>"$log")"
  echo "$out" >> "$log"
  TPS[$name]="$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")"
  say "$name: ${TPS[$name]} tps; pg_amcheck --heapallindexed"
  if pg "$PG_BIN/pg_amcheck" -h "$WORK/sock" -p "$PORT" -U postgres --install-missing --heapallindexed --all >> "$log" 2>&1; then
    AMCHECK[$name]=clean
  else
    AMCHECK[$name]="CORRUPT (exit $?, $log)"; FAILED=1
  fi
  pg "$PG_BIN/pg_ctl" -D "$data" -m fast -w stop >> "$log" 2>&1
  if pg "$PG_BIN/pg_checksums" --check -D "$data" >> "$log" 2>&1; then
    CHECKSUMS[$name]=clean
  else
    CHECKSUMS[$name]="BAD (exit $?, $log)"; FAILED=1
  fi
}

run backing "$WORK/direct"
run mount "$WORK/mnt/plain"
run stage "$WORK/mnt/staged"
STAGE[stage]="$(stage_counters)"

# The backing copies once the mount is gone (SIGTERM unmounts after writing back).
kill "$MOUNT_PID"; wait "$MOUNT_PID" || true; MOUNT_PID=""
fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
declare -A BACKING
for name in mount stage; do
  dir=plain; [ "$name" = stage ] && dir=staged
  if pg "$PG_BIN/pg_checksums" --check -D "$WORK/backing/$dir/pgdata" >> "$WORK/$name.log" 2>&1; then
    BACKING[$name]=clean
  else
    BACKING[$name]="BAD (exit $?)"; FAILED=1
  fi
done
BACKING[backing]="-"

echo "Run: $(date -u '+%Y-%m-%d %H:%M') UTC; $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1)); Linux $(uname -r); $("$PG_BIN/postgres" --version); lachesis-fs $LACHESIS_FS_BIN (FUSE transport $FUSE_TRANSPORT, enable_uring $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo absent)); T=$T SCALE=$SCALE CLIENTS=$CLIENTS STAGE_BYTES=$STAGE_BYTES MAX_DIRTY_BYTES=$MAX_DIRTY_BYTES; stage device $DEVICE_FILE"
echo
echo "| data directory | pgbench -i -s $SCALE (s) | tps (-c $CLIENTS -T $T) | vs backing | pg_amcheck --heapallindexed | pg_checksums --check | backing copy after unmount |"
echo "|---|---|---|---|---|---|---|"
for name in backing mount stage; do
  case $name in
    backing) what="backing directory (ext4)";;
    mount) what="mount, no rule (passthrough)";;
    stage) what="mount, tenant through a write-back loc stage";;
  esac
  ratio="$(python3 -c "b='${TPS[backing]}'; x='${TPS[$name]}'; print(f'{float(x)/float(b):.2f}' if b and x else '-')")"
  tps="$(python3 -c "x='${TPS[$name]}'; print(f'{float(x):.0f}' if x else 'none')")"
  echo "| $what | ${INIT_S[$name]} | $tps | $ratio | ${AMCHECK[$name]} | ${CHECKSUMS[$name]} | ${BACKING[$name]} |"
done
echo
echo "Stage counters after the run: ${STAGE[stage]}"
if [ -n "${JSON:-}" ]; then
  python3 - "$JSON" <<EOF
import json, sys
json.dump({"T": $T, "scale": $SCALE, "clients": $CLIENTS, "stage_bytes": $STAGE_BYTES,
           "runs": {n: {"tps": float(t) if t else None, "init_s": float(i), "amcheck": a, "checksums": c, "backing_copy": b}
                    for n, t, i, a, c, b in [
                        ("backing", "${TPS[backing]}", "${INIT_S[backing]}", "${AMCHECK[backing]}", "${CHECKSUMS[backing]}", "-"),
                        ("mount", "${TPS[mount]}", "${INIT_S[mount]}", "${AMCHECK[mount]}", "${CHECKSUMS[mount]}", "${BACKING[mount]}"),
                        ("stage", "${TPS[stage]}", "${INIT_S[stage]}", "${AMCHECK[stage]}", "${CHECKSUMS[stage]}", "${BACKING[stage]}")]},
           "stage": json.loads('${STAGE[stage]}')}, open(sys.argv[1], "w"), indent=1)
EOF
fi
exit $FAILED
