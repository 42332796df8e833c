"""Tail-latency routing (sRoute §6.5.1), a control application: `decide.py` is the decision
(α and hysteresis over the agents' per-endpoint latency), `loop.py` runs it and ships its
forwarding through `stages/forwarding.py` and a rollout; `GET /api/v1/apps/tail-latency`
(`api/apps_tail_latency.py`) shows its state."""
