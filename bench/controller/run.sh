#!/usr/bin/env bash
# Controller benchmarks: ack handling per transaction vs per batch (ack_batch.py), then
# rollout latency, one-phase baseline vs two-phase, for 1 and 10 real agents and 100
# simulated ones, and the bytes on the bus per flow (rollout_latency.py).
# Needs the release agent (cd agents && cargo build --release), redis-server and the venv.
# Usage: bench/controller/run.sh [--runs N]   (N rollouts of each kind per scenario)
set -euo pipefail
cd "$(dirname "$0")/../.."
.lachesis/venv/bin/python bench/controller/ack_batch.py --runs 5
exec .lachesis/venv/bin/python bench/controller/rollout_latency.py "$@"
