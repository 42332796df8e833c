"""Host liveness from heartbeat keys: alive while the key exists (the agent refreshes its
TTL), and last_seen moved forward by every heartbeat the controller reads."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy.orm import Session

from lachesis_controller.bus.client import heartbeat_time
from lachesis_controller.bus.messages import Heartbeat
from lachesis_controller.models import Host


def record_heartbeats(session: Session, beats: Mapping[str, Heartbeat | None], now: datetime) -> None:
    for host_id, beat in beats.items():
        if beat is None:
            continue
        host = session.get(Host, host_id)
        if host is None:
            continue
        seen = heartbeat_time(beat, now)
        if seen > host.last_seen:
            host.last_seen = seen
