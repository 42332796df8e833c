"""Host liveness from heartbeat keys: alive while the key exists (the agent refreshes its
TTL), and last_seen moved forward by every heartbeat the controller reads."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import bindparam, update
from sqlalchemy.orm import Session

from lachesis_controller.bus.client import heartbeat_time
from lachesis_controller.bus.messages import Heartbeat
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


def record_heartbeats(session: Session, beats: Mapping[str, Heartbeat | None], now: datetime) -> None:
    rows = [{"host": host_id, "seen": heartbeat_time(beat, now)} for host_id, beat in beats.items() if beat is not None]
    if rows:
        session.connection().execute(_SEEN, rows)
