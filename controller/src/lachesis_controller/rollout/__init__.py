"""Desired state to the agents: the rollout engine (`engine.py`: generations, one- and
two-phase rollouts, timeouts and rollback), the intent snapshots a rollback restores
(`intent.py`), what registrations and acks do (`handlers.py`), the reconciler that re-sends
what a host missed (`reconciler.py`) and host decommissioning (`decommission.py`).
Start at `engine.py:start_rollout`."""
