"""Controller detours (sRoute `<IOHeader, Controller>`): agents send the headers of IO that
matches a rule whose detours go to the controller (stream `lachesis:agent:{host}:detours`); the control
application the detour names decides, may change rules first, and answers on the host's
verdict stream. Start at `service.py` (the consumer), then `apps.py`. The names a detour may
give are `policy.verify.CONTROLLER_APPS`; the REST routes are `api/detours.py`.
"""
