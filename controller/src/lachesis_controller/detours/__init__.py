"""Controller detours (sRoute `<IOHeader, Controller>`): agents send the headers of IO that
matches a rule whose detours go to the controller (stream `lachesis:agent:{host}:detours`); the control
application the detour names decides, may change rules first, and answers on the host's
verdict stream. Start at `service.py` (the consumer), then `apps.py`.

Only names here: the verifier imports them without the rest of the package.
"""

# The control applications a `header -> controller` detour may name (its target).
APPS = ("approve", "readset")
