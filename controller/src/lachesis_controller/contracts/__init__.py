"""Modules generated from the contracts in api-schemas/ (the bottom layer: they import nothing
of the controller). Each has a generator beside it and a test that the committed module is
what the generator writes from the contract today. Written by hand: `bus_base.py`, what the
generated bus models build on that a JSON Schema cannot say, and `regenerate.py`, the
generators' shared command line."""
