"""Many concurrent readers, against a live uvicorn server and a real redis-server: every one
is answered from Redis (none falls back to "liveness unknown" because the controller ran out
of Redis connections), and reads write nothing to the database (a write per GET serialised
concurrent readers on the database's commits)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from conftest import FakeAgent, enroll
from fastapi import FastAPI
from sqlalchemy import event
from test_cli import serve

from lachesis_controller.app import create_app
from lachesis_controller.config import Settings

READERS = 250  # more at once than redis-py's default connection pool allows


@pytest.fixture
def live(settings: Settings) -> Iterator[tuple[str, FastAPI]]:
    # The reconciler records heartbeats on its passes: one at start, then none in this test.
    settings = dataclasses.replace(settings, reconcile_interval_s=3600)
    app = create_app(settings)
    for url in serve(settings, app):
        yield url, app


def test_concurrent_host_reads_all_see_the_heartbeat_and_write_nothing(
    live: tuple[str, FastAPI], agents: Callable[[str], FakeAgent]
) -> None:
    url, app = live
    agent = agents("host-a")
    with httpx.Client(base_url=url, timeout=30) as http:
        enroll(http, agent)  # type: ignore[arg-type]  # the TestClient's interface
    agent.heartbeat(generation=1)
    flushes: list[Any] = []
    event.listen(app.state.sessions, "after_flush", lambda session, context: flushes.append(session))

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=READERS)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
            return await asyncio.gather(*(http.get("/api/v1/hosts/host-a") for _ in range(READERS)))

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * READERS
    assert [r.json()["alive"] for r in responses] == [True] * READERS
    assert flushes == [], "a GET wrote to the database"
