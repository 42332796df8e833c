"""Declarative maintenance IO (DINGOS, McAllister's thesis chapter 6): maintenance jobs
declare which file ranges of a tenant on a host they must read and by when; the host's agent
counts foreground reads for them and dispatches the rest under its budget. Start at
`jobs.py` (declare, cancel, the per-host message), then `loop.py` (progress in, done/missed);
`messages.py` is the bus message."""
