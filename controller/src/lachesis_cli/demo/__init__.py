"""`./lachesis demo`: the closed loop shown on real traces through the real data path.

- `traces.py`: the trace readers and the miniature (spatially sampled) scaling.
- `replay.py`: one tenant's replayer, run as its own process in its own cgroup.
- `run.py`: the orchestration over the REST API (tenants, cache stages, rules, guarantees),
  the phases (equal split, then the loop) and the report.
"""
