"""Host liveness from heartbeat keys: alive while the key exists (the agent refreshes its
TTL), and last_seen moved forward by every heartbeat the controller reads."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import bindparam, text, update
from sqlalchemy.orm import Session

from lachesis_controller.bus.client import heartbeat_time
from lachesis_controller.bus.messages import Heartbeat
from lachesis_controller.db import pg_array
from lachesis_controller.models import Host

_HOSTS = Host.__table__.c
# One statement run for every host (executemany); the WHERE keeps last_seen from going back
# and skips unknown hosts. A session.get per host was 1,000 queries a pass at 1,000 hosts,
# most of the controller's idle CPU (docs/benchmarks/controller.md).
_SEEN = (
    update(Host)
    .where(_HOSTS.id == bindparam("host"), _HOSTS.last_seen < bindparam("seen", type_=_HOSTS.last_seen.type))
    .values(last_seen=bindparam("seen", type_=_HOSTS.last_seen.type))
)
# The same on PostgreSQL, as one statement over arrays (psycopg sends an executemany as a
# statement per row; at 1,000 hosts a pass every second, it was 6% of the controller's CPU
# during rollouts). The rows are locked first in id order, as record_acks and start_rollout
# lock them: the UPDATE's join takes them in an order of its own.
_PG_LOCK = text("SELECT id FROM hosts WHERE id = ANY(CAST(:h AS text[])) ORDER BY id FOR NO KEY UPDATE")
_PG_SEEN = text(
    "UPDATE hosts SET last_seen = v.seen"
    " FROM unnest(CAST(:h AS text[]), CAST(:seen AS timestamp[])) AS v(h, seen)"
    " WHERE hosts.id = v.h AND hosts.last_seen < v.seen"
)


def heartbeat_times(beats: Mapping[str, Heartbeat | None], now: datetime) -> dict[str, datetime]:
    """Host -> when its heartbeat was sent (never later than `now`), for the hosts that have one."""
    return {host_id: heartbeat_time(beat, now) for host_id, beat in beats.items() if beat is not None}


def record_seen(session: Session, seen: Mapping[str, datetime]) -> None:
    """Move each host's last_seen forward to `seen`, never back; unknown hosts are skipped."""
    if not seen:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        hosts = sorted(seen)
        array = pg_array(hosts)
        connection.execute(_PG_LOCK, {"h": array})
        connection.execute(_PG_SEEN, {"h": array, "seen": pg_array(seen[h] for h in hosts)})
        return
    connection.execute(_SEEN, [{"host": host_id, "seen": at} for host_id, at in seen.items()])
