"""The Redis bus between controller and agents: the message contract (`messages.py`, the
schemas in api-schemas/bus), the client with its streams and keys (`client.py`), the generic
stream consumer (`consumer.py`), heartbeats (`presence.py`) and the store of agent telemetry
(`agent_telemetry.py`). What the controller does with registrations and acks is
`rollout.handlers`: the bus carries messages, it does not decide."""
