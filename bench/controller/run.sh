#!/usr/bin/env bash
# Rollout latency for 1 and 10 real agents and 100 simulated ones; bytes on the bus.
# Needs the release agent (cd agents && cargo build --release), redis-server and the venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .lachesis/venv/bin/python bench/controller/rollout_latency.py "$@"
