"""What bad input is and how it is reported: the problem+json error every layer raises
(`problems.py`), the bounds on counts, paths and names (`bounds.py`) and the request-body
limits applied before any parser runs (`body_limits.py`). Imports nothing else of the controller."""
