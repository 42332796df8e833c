"""Answers of reads that change seldom (the tenants, the rules, one rule), kept as the bytes
sent, per replica, and served again while the table they were read from is unchanged.

Unchanged means: the table's counter in read_generations, which the database bumps at the
commit of every transaction that writes the table (migration 0012), is the one the answer
was made at. Each read reads the counter first, one primary-key lookup, so a write that
any replica acknowledged before the read began is seen by it: the write's commit bumped
the counter, the read finds a counter no kept answer was made at, and builds the answer
again from statements that run after that commit. (An answer built after a newer commit
than its counter says is kept under the older counter: newer than needed, never older.)
On SQLite the counter and the rows are read in the read's one transaction.

What it saves is the ORM, the models and the JSON of an answer; under 200 clients those
were most of a cached read's CPU (docs/benchmarks/controller.md, sixth round).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.models import ReadGeneration

# Answers kept per replica. A key is a table and what the answer depends on besides it (the
# caller's tenant, the page, a rule's name), so this bounds what odd pages or many rule
# names can hold; the least recently used goes first.
MAX_ANSWERS = 2048


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


class ReadCache:
    def __init__(self, max_answers: int = MAX_ANSWERS) -> None:
        self._max = max_answers
        self._answers: OrderedDict[tuple[Hashable, ...], tuple[int, Answer]] = OrderedDict()

    def answer(self, session: Session, table: str, key: tuple[Hashable, ...], build: Callable[[], Answer]) -> Answer:
        """The kept answer for `key` if `table` has not changed since it was built, else
        `build()`'s, kept. Called inside the read's transaction (`session.begin()`), and
        `build` reads with the same session."""
        generation = session.scalars(select(ReadGeneration.value).where(ReadGeneration.name == table)).first()
        if generation is None:
            # No counter (its row deleted): nothing says when an answer goes stale.
            return build()
        full_key = (table, *key)
        kept = self._answers.get(full_key)
        if kept is not None and kept[0] == generation:
            self._answers.move_to_end(full_key)
            return kept[1]
        answer = build()
        self._answers[full_key] = (generation, answer)
        self._answers.move_to_end(full_key)
        while len(self._answers) > self._max:
            self._answers.popitem(last=False)
        return answer

    def __len__(self) -> int:
        return len(self._answers)


async def _read_cache(request: Request) -> ReadCache:
    cache: ReadCache = request.app.state.read_cache
    return cache


ReadCacheDep = Annotated[ReadCache, Depends(_read_cache)]
