"""Who may do what: API token secrets (`tokens.py`), principals and roles (`authz.py`), the
audit trail of every change (`audit.py`) and the confinement of a tenant's host paths to its
endpoint roots (`endpoint_roots.py`). The REST side of authentication is `api/auth.py`."""
