"""Heartbeats move last_seen forward, never back, in one statement for every host; unknown
hosts and missing heartbeats change nothing. On SQLite and PostgreSQL, as are the batches'
arrays (db.pg_array, db.among)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, text

from lachesis_controller.bus.messages import Heartbeat
from lachesis_controller.bus.presence import heartbeat_times, record_seen
from lachesis_controller.config import Settings
from lachesis_controller.db import among, make_engine, make_sessionmaker, pg_array, utcnow
from lachesis_controller.models import Host
from lachesis_controller.rollout.render import rfc3339


def beat(host_id: str, sent_at: str) -> Heartbeat:
    return Heartbeat.model_validate(
        {"schema": "lachesis.heartbeat/v1", "host_id": host_id, "sent_at": sent_at, "generation": 1, "uptime_s": 5}
    )


def test_heartbeats_move_last_seen_forward_only(settings: Settings) -> None:
    db = make_engine(settings.database_url)
    sessions = make_sessionmaker(db)
    now = utcnow().replace(microsecond=0)
    before, after = now - timedelta(minutes=5), now - timedelta(minutes=1)
    with sessions.begin() as session:
        for host_id in ("old", "new", "silent"):
            seen = now if host_id == "new" else before
            session.add(Host(id=host_id, agent_version="0.1.0", capabilities={}, enrolled_at=before, registered_at=before, last_seen=seen, desired_generation=0, acked_generation=0))  # fmt: skip
    beats = {
        "old": beat("old", rfc3339(after)),
        "new": beat("new", rfc3339(after)),  # older than what is recorded: kept
        "silent": None,
        "gone": beat("gone", rfc3339(after)),  # not enrolled: nothing to move
    }
    with sessions.begin() as session:
        record_seen(session, heartbeat_times(beats, now))
    with sessions() as session:
        seen = {host_id: last_seen for host_id, last_seen in session.execute(select(Host.id, Host.last_seen))}
    assert seen == {"old": after, "new": now, "silent": before}
    db.dispose()


def test_arrays_reach_the_database_as_they_were(settings: Settings) -> None:
    """db.pg_array's literals (the batches' arrays on PostgreSQL) and db.among (IN, or ANY of
    such an array) keep every value as it was: quotes, backslashes, commas, braces, "NULL",
    empty strings, None."""
    odd = ['a"b', "c\\d", "e,f", "{g}", "NULL", "", "h i", "é", None]
    db = make_engine(settings.database_url)
    sessions = make_sessionmaker(db)
    now = utcnow().replace(microsecond=0)
    with sessions.begin() as session:
        for host_id in ("x-1", "x-2", "x-3"):
            session.add(Host(id=host_id, agent_version="0.1.0", capabilities={}, enrolled_at=now, registered_at=now, last_seen=now, desired_generation=0, acked_generation=0))  # fmt: skip
    with sessions() as session:
        found = session.scalars(select(Host.id).where(among(session, Host.id, ["x-1", "x-3", "nobody"]))).all()
        assert sorted(found) == ["x-1", "x-3"]
        if session.get_bind().dialect.name == "postgresql":
            back = session.execute(text("SELECT CAST(:a AS text[])"), {"a": pg_array(odd)}).scalar_one()
            assert back == odd
            at = [now, now - timedelta(microseconds=1)]
            stamps = session.execute(text("SELECT CAST(:a AS timestamp[])"), {"a": pg_array(at)}).scalar_one()
            assert stamps == [t.replace(tzinfo=None) for t in at]
            ints = session.execute(text("SELECT CAST(:a AS integer[])"), {"a": pg_array([1, -2, 30])}).scalar_one()
            assert ints == [1, -2, 30]
    db.dispose()
