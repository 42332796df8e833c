"""API token secrets: made here, shown once, kept only as a hash."""

from __future__ import annotations

import hashlib
import secrets

# A prefix makes a leaked token recognisable to secret scanners and in logs.
SECRET_PREFIX = "lct_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str | bytes) -> str:
    raw = secret.encode() if isinstance(secret, str) else secret
    return hashlib.sha256(raw).hexdigest()
