"""Stages: what is declared (policies, REST) and what each host runs (the stage contract).

- `resolve.py`: declared stages and rules -> the stages and rules one host ships (pure).
- `store.py`: reads the declarations and the inputs of the resolution from the database.
"""
