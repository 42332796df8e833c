#!/usr/bin/env bash
# MRC benchmark: speed, memory and accuracy of exact LRU, SHARDS (fixed-rate,
# fixed-size, with and without SHARDS_adj) and miniature vs full simulation
# on the real traces in ../shared/traces. Prints figures; never passes or
# fails. Results are kept in docs/benchmarks/mrc.md.
#
#   bench/mrc/run.sh                 # 5 repetitions, medians, then the plots
#   REPS=3 PLOTS=0 bench/mrc/run.sh --traces oltp --no-sim
#   BENCH=0 bench/mrc/run.sh         # only redraw the plots
#
# Extra arguments go to the bench binary: --reps N, --sim-reps N (full
# simulations are slow, default 1), --salts N (hashes for the MAE spread),
# --traces cloudphysics,oltp,p3, --no-sim. Honours CARGO_TARGET_DIR.
#
# The comparison with libCacheSim is bench/mrc/vs_libcachesim.sh (run after
# this one with VS_LIBCACHESIM=1).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
traces=$(cd "$root/../shared/traces" && pwd)
reps=${REPS:-5}

cd "$root/agents"
cargo build --release -j 2 -p lachesis-mrc --bins --benches

if [ "${BENCH:-1}" = 1 ]; then
    echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# command: bench/mrc/run.sh $*"
    cargo bench -j 2 -p lachesis-mrc --bench mrc -- --reps "$reps" "$@"
fi

if [ "${PLOTS:-1}" = 1 ]; then
    cli="${CARGO_TARGET_DIR:-$root/agents/target}/release/lachesis-mrc"
    out="$root/docs/benchmarks"
    mkdir -p "$out"
    plot() { # name file rate title
        "$cli" "$traces/$2" -q -a exact,shards-fixed-rate,shards-fixed-size --adj all --rate "$3" \
            --sizes 32 -o csv --out "$out/mrc-$1.csv" --plot "$out/mrc-$1.png" \
            --title "$4: exact LRU vs SHARDS (R=$3, Smax=8192), log-spaced sizes"
        "$cli" "$traces/$2" -q -a full-sim,minisim --policy fifo,rrip,s3fifo --rate "$3" \
            --sizes 20 --spacing linear -o csv --out "$out/mrc-$1-policies.csv" --plot "$out/mrc-$1-policies.png" \
            --title "$4: full vs miniature simulation (R=$3, adj)"
        echo "plots: docs/benchmarks/mrc-$1.png, docs/benchmarks/mrc-$1-policies.png"
    }
    plot cloudphysics cloudPhysicsIO.oracleGeneral.bin 0.1 "CloudPhysics"
    plot oltp arc/OLTP.lis.zst 0.01 "ARC OLTP"
    plot p3 arc/P3.lis.zst 0.01 "ARC P3"
fi

if [ "${VS_LIBCACHESIM:-0}" = 1 ]; then
    "$here/vs_libcachesim.sh"
fi
