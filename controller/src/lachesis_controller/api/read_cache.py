"""Answers of reads that change seldom (the tenants, the rules, one rule), kept as the bytes
sent, per replica, and served again while the table they were read from is unchanged.

Unchanged means: the table's counter in read_generations, which the database bumps at the
commit of every transaction that writes the table (migration 0012), is the one the answer
was made at. Each read looks the counters up before it answers, so a write that any replica
acknowledged before the read began is seen by it: the write's commit bumped the counter, the
read finds a counter no kept answer was made at, and builds the answer again from statements
that run after that commit. (An answer built after a newer commit than its counter says is
kept under the older counter: newer than needed, never older.)

On PostgreSQL the lookup is `SharedLookup`: off the event loop, on a connection of its own,
and shared by every read that arrived before it was sent. The synchronous lookup per read
was a third of a cached read's CPU, most of it the event loop blocked on PostgreSQL's
answer (docs/benchmarks/controller.md, seventh round). On SQLite the counter and the rows
are read in the read's one transaction, as before.

What the cache saves is the ORM, the models and the JSON of an answer; under 200 clients
those were most of a cached read's CPU (docs/benchmarks/controller.md, sixth round).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

import psycopg
from fastapi import Request, Response
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from lachesis_controller.models import ReadGeneration

log = logging.getLogger(__name__)

# Answers kept per replica. A key is a table and what the answer depends on besides it (the
# caller's tenant, the page, a rule's name), so this bounds what odd pages or many rule
# names can hold; the least recently used goes first.
MAX_ANSWERS = 2048

# Longest a counter lookup may take before the reads waiting for it are answered without the
# cache (from the database, whose own errors they then report).
LOOKUP_TIMEOUT_S = 5.0

Generations = dict[str, int]


@dataclass(frozen=True)
class Answer:
    """A 200 answer as sent: its JSON body and the headers that go with it (ETag, paging)."""

    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    # The tenant that owns what the answer shows, for the handler to authorise each caller
    # before serving it (None: an admin's resource, or an answer already cut to the caller).
    owner: str | None = None

    def response(self) -> Response:
        return Response(self.body, media_type="application/json", headers=self.headers)


class SharedLookup:
    """One lookup of the counters at a time, shared ("single flight") by the reads waiting.

    A read may use only a lookup sent after it arrived: that one sees every commit
    acknowledged before the read began. So a read that finds a lookup in flight does not
    join it; it waits for the next, which is sent as soon as the one in flight is answered
    and serves every read that arrived meanwhile. Under load that is one round trip per
    round trip's worth of reads, however many there are; alone a read costs one lookup.
    None (a failed or late lookup) means the counters are unknown."""

    def __init__(self, lookup: Callable[[], Awaitable[Generations]], timeout_s: float = LOOKUP_TIMEOUT_S) -> None:
        self._lookup = lookup
        self._timeout_s = timeout_s
        # The lookup the reads arriving now will use, not sent yet; None: no read waits.
        self._next: asyncio.Future[Generations | None] | None = None
        self._runner: asyncio.Task[None] | None = None
        self.lookups = 0  # sent so far (tests, benchmarks)

    async def read(self) -> Generations | None:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        waiting = self._next
        if self._runner is None:
            self._runner = asyncio.create_task(self._run(), name="read-generations")
        # Shielded: a read that is cancelled (its client went away) must not cancel the
        # answer the other reads wait for.
        return await asyncio.shield(waiting)

    async def _run(self) -> None:
        try:
            while self._next is not None:
                # Taken before the send: every read that joins from now waits for the next one.
                waiting, self._next = self._next, None
                self.lookups += 1
                try:
                    async with asyncio.timeout(self._timeout_s):
                        generations: Generations | None = await self._lookup()
                except Exception as exc:  # the database down or slow: answer without the cache
                    log.debug("read generations unknown: %s", exc)
                    generations = None
                except asyncio.CancelledError:
                    waiting.set_result(None)
                    raise
                waiting.set_result(generations)
        finally:
            self._runner = None

    async def close(self) -> None:
        """At shutdown: the lookup in flight cancelled (its reads answered without the cache)."""
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)


class PostgresCounters:
    """The lookup SharedLookup sends on PostgreSQL: every counter in one statement, on an
    asynchronous connection of its own (autocommit: each statement sees every commit made
    before it), made again after a failure."""

    def __init__(self, database_url: str) -> None:
        self._conninfo = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._connection: psycopg.AsyncConnection[tuple[str, int]] | None = None

    async def __call__(self) -> Generations:
        if self._connection is None or self._connection.closed:
            self._connection = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        try:
            cursor = await self._connection.execute("SELECT name, value FROM read_generations")
            return dict(await cursor.fetchall())
        except BaseException:
            # Broken, or cancelled mid-statement: either way its state is unknown.
            await self.close()
            raise

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()


class ReadCache:
    def __init__(self, max_answers: int = MAX_ANSWERS) -> None:
        self._max = max_answers
        self._answers: OrderedDict[tuple[Hashable, ...], tuple[int, Answer]] = OrderedDict()
        # Set at start-up on PostgreSQL (app.py); None: the counter is read in the read's transaction.
        self.counters: SharedLookup | None = None

    async def answer(
        self, sessions: Callable[[], Session], table: str, key: tuple[Hashable, ...], build: Callable[[Session], Answer]
    ) -> Answer:
        """The kept answer for `key` if `table` has not changed since it was built, else
        `build(session)`'s, kept. A session is opened (from `sessions`) only to build."""
        full_key = (table, *key)
        if self.counters is None:
            with sessions() as session, session.begin():
                generation = session.scalars(select(ReadGeneration.value).where(ReadGeneration.name == table)).first()
                kept = self._kept(full_key, generation)
                return kept if kept is not None else self._keep(full_key, generation, build(session))
        generations = await self.counters.read()
        generation = None if generations is None else generations.get(table)
        kept = self._kept(full_key, generation)
        if kept is not None:
            return kept
        with sessions() as session, session.begin():
            return self._keep(full_key, generation, build(session))

    def _kept(self, full_key: tuple[Hashable, ...], generation: int | None) -> Answer | None:
        kept = self._answers.get(full_key)
        if generation is None or kept is None or kept[0] != generation:
            return None
        self._answers.move_to_end(full_key)
        return kept[1]

    def _keep(self, full_key: tuple[Hashable, ...], generation: int | None, answer: Answer) -> Answer:
        if generation is None:
            # No counter (its row deleted, or the lookup failed): nothing says when it goes stale.
            return answer
        self._answers[full_key] = (generation, answer)
        self._answers.move_to_end(full_key)
        while len(self._answers) > self._max:
            self._answers.popitem(last=False)
        return answer

    def __len__(self) -> int:
        return len(self._answers)


async def cached(request: Request, table: str, key: tuple[Hashable, ...], build: Callable[[Session], Answer]) -> Answer:
    """The answer of a cached read: the app's cache, and a read session (on
    db.read_bind, as ReadSessionDep's) only if the answer must be built. Not FastAPI
    dependencies: solving them was 8% of a cached read's CPU (seventh round)."""
    state = request.app.state
    cache: ReadCache = state.read_cache
    return await cache.answer(lambda: state.sessions(bind=state.read_bind), table, key, build)
