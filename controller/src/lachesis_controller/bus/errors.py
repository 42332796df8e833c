"""What a dead or unreachable Redis raises through redis-py (its own module so that every
part of the bus can name it without importing the client)."""

from __future__ import annotations

import asyncio

from redis.exceptions import RedisError

REDIS_DOWN = (RedisError, OSError, asyncio.TimeoutError)
