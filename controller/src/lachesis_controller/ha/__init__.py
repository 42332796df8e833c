"""Several controller replicas on one database: which of them leads (runs the singletons:
allocation loop, reconciler, registration/ack/detour consumers). Start at `lease.py`."""
