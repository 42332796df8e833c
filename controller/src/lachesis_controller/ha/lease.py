"""The leader lease: of the controller replicas sharing one PostgreSQL, exactly one runs the
singletons (the allocation loop, the reconciler, the registration, ack and detour consumers);
every replica serves the REST API and keeps its own telemetry.

The lease is a PostgreSQL session-level advisory lock held on a connection of its own: the
server releases it the moment that session ends, so a leader killed with SIGKILL (its socket
closed by the kernel) hands over at the followers' next try, with no expiry to wait out. A
replica that can no longer show it still holds the lock (the connection broke, or the check
did not answer within `probe_timeout_s`) stops its singletons at once, before anyone else can
have taken over: that order, not timing, is what keeps two leaders from running at once.

With SQLite there is one process, which always leads (`LocalLease`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Protocol

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from lachesis_controller.observability import metrics

log = logging.getLogger(__name__)

# The advisory lock's key: "lachesis" as a big-endian 64-bit number. Only controllers of the
# same database compete for it (advisory locks are per database).
LOCK_KEY = int.from_bytes(b"lachesis", "big")
# libpq settings of the lease's connection: a peer that vanished without closing the socket
# (a partition) breaks it within a few seconds instead of the kernel's two hours.
KEEPALIVE = {
    "connect_timeout": 3,
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 2,
    "tcp_user_timeout": 3000,
}


class Lease(Protocol):
    def acquire(self) -> bool:
        """Try to take the lease; True when this process holds it now."""

    def holds(self) -> bool:
        """Whether this process still holds the lease it took."""

    def release(self) -> None:
        """Give the lease up (and forget the connection it was held on)."""

    def abandon(self) -> None:
        """Forget the connection without using it (a check on it never answered)."""


class LocalLease:
    """One process (SQLite): always the leader."""

    def acquire(self) -> bool:
        return True

    def holds(self) -> bool:
        return True

    def release(self) -> None:
        pass

    def abandon(self) -> None:
        pass


class AdvisoryLease:
    """A PostgreSQL advisory lock on a dedicated connection (blocking calls: run them off the
    event loop, as `Leadership` does)."""

    def __init__(self, url: str, key: int = LOCK_KEY) -> None:
        self.key = key
        self._engine = create_engine(url, poolclass=NullPool, connect_args=KEEPALIVE)
        self._connection: Connection | None = None

    def acquire(self) -> bool:
        try:
            if self._connection is None:
                self._connection = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            return bool(
                self._connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}).scalar_one()
            )
        except Exception as exc:  # any driver error: not held, try again on a new connection
            log.warning("leader lease: cannot reach the database (%s: %s)", type(exc).__name__, exc)
            self.release()
            return False

    def holds(self) -> bool:
        if self._connection is None:
            return False
        try:
            # A session-level advisory lock lasts as long as its session: if this answers on
            # the connection that took it, the lock is still ours.
            return bool(
                self._connection.execute(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND pid = pg_backend_pid() AND ((classid::bigint << 32) | objid::bigint) = :key"
                    ),
                    {"key": self.key},
                ).scalar_one()
            )
        except Exception as exc:
            log.warning("leader lease: lost the database connection (%s: %s)", type(exc).__name__, exc)
            self.release()
            return False

    def release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                # Unlocked before closing: the server ends a closed session (and frees its
                # locks) on its own time, and the next leader should not wait for that.
                connection.execute(text("SELECT pg_advisory_unlock_all()"))
            with contextlib.suppress(Exception):
                connection.invalidate()
                connection.close()

    def abandon(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        # Another thread may still be blocked on it, so it can be neither used nor closed from
        # here. Forgetting it is not enough: its session, and the lock, would live on until the
        # object is collected (a minute and more under load, with no replica leading). Shutting
        # its socket down fails that call now and makes the server end the session at once.
        with contextlib.suppress(Exception):
            dbapi = connection.connection.dbapi_connection
            if dbapi is None:  # already detached from its DBAPI connection: no socket to shut
                return
            fd = dbapi.fileno()
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)

    def dispose(self) -> None:
        self.release()
        self._engine.dispose()


def lease_for(database_url: str) -> Lease:
    return LocalLease() if make_url(database_url).get_backend_name() == "sqlite" else AdvisoryLease(database_url)


# Starts the singletons; they run until the event passed in is set.
Singletons = Callable[[asyncio.Event], list[asyncio.Task[None]]]


class Leadership:
    """Takes the lease when it can and checks it every `interval_s`; runs the singletons
    exactly while it holds it."""

    def __init__(
        self,
        lease: Lease,
        singletons: Singletons,
        stop: asyncio.Event,
        *,
        interval_s: float = 1.0,
        probe_timeout_s: float = 3.0,
        grace_s: float = 5.0,
    ) -> None:
        self.lease = lease
        self.singletons = singletons
        self.stop = stop
        self.interval_s = interval_s
        self.probe_timeout_s = probe_timeout_s
        self.grace_s = grace_s
        self.tasks: list[asyncio.Task[None]] = []
        self._stop_singletons: asyncio.Event | None = None
        # Leadership changes of this process, counted (tests order events by it).
        self.terms = 0
        metrics.CONTROLLER_LEADER.set(0)

    @property
    def leading(self) -> bool:
        return self._stop_singletons is not None

    async def step(self) -> None:
        """Try or check the lease once; start or stop the singletons if that changed. Called
        once before the app serves (a lone controller leads from its first request on), then
        every `interval_s` by `run`."""
        held = await self._probe()
        if held and not self.leading:
            self._gain()
        elif not held and self.leading:
            await self._lose()

    async def run(self) -> None:
        try:
            while not self.stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), self.interval_s)
                if not self.stop.is_set():
                    await self.step()
        finally:
            await self._lose()
            await asyncio.to_thread(self.lease.release)

    async def _probe(self) -> bool:
        check = self.lease.holds if self.leading else self.lease.acquire
        try:
            return await asyncio.wait_for(asyncio.to_thread(check), self.probe_timeout_s)
        except TimeoutError:
            # The database did not answer in time: this process cannot show that it still
            # holds the lock, so it must act as if it did not (the connection is dropped;
            # its session, and so the lock, ends when the server notices).
            log.warning("leader lease: no answer from the database within %s s", self.probe_timeout_s)
            self.lease.abandon()
            return False

    def _gain(self) -> None:
        self._stop_singletons = asyncio.Event()
        self.tasks = self.singletons(self._stop_singletons)
        self.terms += 1
        metrics.CONTROLLER_LEADER.set(1)
        log.info("leader lease taken: running the allocation loop, reconciler and consumers here")

    async def _lose(self) -> None:
        if self._stop_singletons is None:
            return
        self._stop_singletons.set()
        self._stop_singletons = None
        metrics.CONTROLLER_LEADER.set(0)
        tasks, self.tasks = self.tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=self.grace_s)
            for task in stuck:
                log.warning("singleton %s did not stop within %s s", task.get_name(), self.grace_s)
        if not self.stop.is_set():
            log.warning("leader lease lost: singletons stopped; another replica takes over")
