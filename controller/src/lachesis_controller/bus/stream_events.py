"""Which agent streams got entries, as Redis says: keyspace notifications of XADD on the
agents' streams (`lachesis:agent:{host}:{kind}`).

Without them a consumer's XREADGROUP names every enrolled host's stream each time it reads,
however few have anything: at 5,000 hosts that is 10,000 arguments built, sent and looked
up in Redis per read, and a rollout's acks arrive over many reads, so its cost grew with
hosts × reads (docs/benchmarks/controller.md). With them a consumer reads the streams that
were appended to since its last read, and waits on this process instead of blocking in Redis.

Pub/sub delivers at most once, so nothing here is trusted to be complete: each (re)subscription
bumps `generation` (a consumer then reads every stream once, for what was appended while no
one listened), the consumers still read all their streams every so often
(consumer.FULL_READ_EVERY), and while `live` is False they read every stream each time, as
without notifications. Redis refusing `CONFIG SET` (a managed Redis) leaves it False for good:
correct, only slower."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

import hiredis
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from lachesis_controller.bus.errors import REDIS_DOWN

log = logging.getLogger(__name__)

# The prefix of every agent stream (client.agent_stream).
STREAM_PREFIX = "lachesis:agent:"
BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 5.0
# Bytes read from the notification connection at a time (many notifications each).
READ_BYTES = 65536


def needed_flags(current: str) -> str | None:
    """`notify-keyspace-events` with keyspace events (K) of stream commands (t) added to what
    is set (other users of the Redis may rely on it); None if it has both already ("A" is
    every class, t included)."""
    has_stream_events = "t" in current or "A" in current
    if "K" in current and has_stream_events:
        return None
    return current + ("" if "K" in current else "K") + ("" if has_stream_events else "t")


def parse_channel(channel: str, prefix: str, kinds: Collection[str]) -> tuple[str, str] | None:
    """(host, kind) of a keyspace channel `__keyspace@N__:lachesis:agent:{host}:{kind}`, None
    for any other key. Host ids may hold ':' (the kind is the last part)."""
    if not channel.startswith(prefix):
        return None
    host, sep, kind = channel[len(prefix) :].rpartition(":")
    if not sep or not host or kind not in kinds:
        return None
    return host, kind


class StreamEvents:
    """The hosts whose stream of each kind was appended to, since each consumer last took them.
    One per process, shared by its consumers (one per kind of `kinds`: client.AGENT_STREAM_KINDS)."""

    def __init__(self, redis: Redis, kinds: Collection[str], db: int = 0) -> None:
        self.redis = redis
        # A pattern per kind: Redis then leaves out every other key's events (the inboxes the
        # controller appends to at each rollout would double the messages).
        self.patterns = [f"__keyspace@{db}__:{STREAM_PREFIX}*:{kind}" for kind in kinds]
        self._prefix = f"__keyspace@{db}__:{STREAM_PREFIX}"
        self._dirty: dict[str, set[str]] = {kind: set() for kind in kinds}
        self._signal: dict[str, asyncio.Event] = {kind: asyncio.Event() for kind in kinds}
        # True while subscribed: only then is an empty take() a sign that nothing was appended.
        self.live = False
        # Bumped at each subscription: what was appended before it may never be announced.
        self.generation = 0

    def take(self, kind: str) -> set[str]:
        """The hosts whose `kind` stream was appended to since the last take (cleared)."""
        hosts, self._dirty[kind] = self._dirty[kind], set()
        self._signal[kind].clear()
        return hosts

    async def wait(self, kind: str, timeout_s: float) -> bool:
        """Until a `kind` stream is appended to or the subscription changes (True), or
        `timeout_s` passes (False)."""
        try:
            await asyncio.wait_for(self._signal[kind].wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def mark(self, host: str, kind: str) -> None:
        self._dirty[kind].add(host)
        self._signal[kind].set()

    def _wake_all(self) -> None:
        for signal in self._signal.values():
            signal.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Subscribe and record the notifications until `stop`; resubscribe after Redis
        failures. Returns early, leaving `live` False, if Redis refuses to send them."""
        backoff = BACKOFF_MIN_S
        while not stop.is_set():
            try:
                if not await self._listen(stop):
                    return
                backoff = BACKOFF_MIN_S
            except asyncio.CancelledError:
                raise
            except REDIS_DOWN as exc:
                if self.live:
                    log.warning(
                        "stream notifications lost (%s: %s); reading every stream until back", type(exc).__name__, exc
                    )
                self._set_live(False)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
        self._set_live(False)

    async def _enable(self) -> bool:
        """Turn the notifications on (CONFIG SET is not persisted: a restarted Redis needs it
        again, hence at each subscription). False if Redis refuses."""
        try:
            current = (await self.redis.config_get("notify-keyspace-events")).get("notify-keyspace-events")
            flags = needed_flags(current or "")
            if flags is not None:
                await self.redis.config_set("notify-keyspace-events", flags)
        except ResponseError as exc:
            log.warning(
                "Redis refused keyspace notifications (%s): each consumer read names every enrolled "
                "host's stream, which costs more with many hosts",
                exc,
            )
            return False
        return True

    async def _listen(self, stop: asyncio.Event) -> bool:
        """Record notifications until `stop` (True) or until Redis refuses them (False).

        On a connection of its own, its replies parsed in bulk: redis-py's PubSub reads one
        message per call, each under a timeout of its own, about 30 us a message, which at
        1,000 hosts (2,000 acks per two-phase rollout) was 15% of the controller's CPU
        (docs/benchmarks/controller.md, eleventh round); this loop takes about 2 us. A
        dropped connection raises, and `run` subscribes again on a new one."""
        pool = self.redis.connection_pool
        connection = pool.connection_class(**pool.connection_kwargs)
        try:
            await connection.connect()  # type: ignore[no-untyped-call]
            # redis-py's asyncio stream: its reply parser is not used past the handshake.
            stream = connection._reader
            if not isinstance(stream, asyncio.StreamReader):
                raise ConnectionError("no stream to read notifications from")
            await connection.send_command("PSUBSCRIBE", *self.patterns)
            encoder = connection.encoder
            reader = hiredis.Reader(encoding=encoder.encoding, errors=encoder.encoding_errors)
            while not stop.is_set():
                try:
                    async with asyncio.timeout(1.0):
                        data = await stream.read(READ_BYTES)
                except TimeoutError:
                    continue
                if not data:
                    raise ConnectionError("Redis closed the notification connection")
                reader.feed(data)
                while (reply := reader.gets()) is not False:
                    if not await self._received(reply):
                        return False
            return True
        finally:
            self._set_live(False)
            await connection.disconnect(nowait=True)

    async def _received(self, reply: object) -> bool:
        """Handle one reply on the subscribed connection; False if Redis refuses the
        notifications."""
        if isinstance(reply, Exception):
            raise ResponseError(str(reply))
        if not isinstance(reply, list) or not reply:
            return True
        if reply[0] == "pmessage" and len(reply) == 4:
            if reply[3] == "xadd":
                parsed = parse_channel(reply[2], self._prefix, self._dirty.keys())
                if parsed is not None:
                    self.mark(*parsed)
        elif reply[0] == "psubscribe" and len(reply) == 3 and reply[2] == len(self.patterns):
            # Live once every pattern is subscribed; the setting made at each subscription,
            # maybe to a restarted Redis that forgot it.
            if not await self._enable():
                return False
            self._set_live(True)
        return True

    def _set_live(self, live: bool) -> None:
        if live:
            self.generation += 1
        if live != self.live:
            self.live = live
            log.info("stream notifications %s", "on" if live else "off")
        # Consumers waiting on notifications re-read every stream, or stop waiting on them.
        self._wake_all()
