"""Lachesis controller: REST API, state database and rollout engine."""

__version__ = "0.1.0"
