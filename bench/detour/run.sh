#!/usr/bin/env bash
# Write latency through controller detours vs plain writes (see latency.py). Root, /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/../.."
(cd agents && cargo build --release -q -p lachesis-agent)
exec .lachesis/venv/bin/python bench/detour/latency.py --agent-bin "${LACHESIS_AGENT_BIN:-agents/target/release/lachesis-agent}" "$@"
