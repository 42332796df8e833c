#!/usr/bin/env bash
# Controller benchmarks: ack handling per transaction vs per batch (ack_batch.py), then
# rollout latency, one-phase baseline vs two-phase, for 1 and 10 real agents and 100
# simulated ones, and the bytes on the bus per flow (rollout_latency.py); the database's size
# after 550 rollouts (state_size.py); REST latency under 200 concurrent clients (load.py);
# 1,000 simulated agents against one and two controller replicas on PostgreSQL (scale.py);
# 200 closed-loop clients, 90% reads, against one and two replicas on PostgreSQL (clients.py).
# Needs the release agent (cd agents && cargo build --release), redis-server, PostgreSQL
# (apt postgresql) and the venv.
# Usage: bench/controller/run.sh [--runs N]   (N rollouts of each kind per scenario)
set -euo pipefail
cd "$(dirname "$0")/../.."
.lachesis/venv/bin/python bench/controller/ack_batch.py --runs 5
.lachesis/venv/bin/python bench/controller/state_size.py --rollouts 550 --hosts 3
for think in 5000 1000 0; do
  .lachesis/venv/bin/python bench/controller/load.py --clients 200 --seconds 15 --runs 3 --think-ms "$think"
done
.lachesis/venv/bin/python bench/controller/scale.py --agents 1000 --rollouts 3 --runs 3 --replicas 1,2
for replicas in 1 2; do
  .lachesis/venv/bin/python bench/controller/clients.py --clients 200 --seconds 10 --runs 3 --replicas "$replicas"
done
exec .lachesis/venv/bin/python bench/controller/rollout_latency.py "$@"
