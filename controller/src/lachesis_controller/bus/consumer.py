"""The generic reader of one kind of agent→controller stream (registrations, acks,
telemetry, detours; each host has its own, `client.agent_stream`).

It runs as an asyncio task for the life of the app and survives anything Redis does:
connection loss (back off and retry), a Redis that lost its data (NOGROUP: recreate the
consumer group), and malformed messages (logged and dropped). A message naming another
host than its stream's is rejected and counted.

Entries are handled a batch (one XREADGROUP) at a time: all acks of a batch go through
one database transaction and one XACK, which is what lets a rollout to 100 hosts finish
in a few transactions rather than 100 (docs/benchmarks/controller.md). What each kind of
message does is its handler's business (`rollout.handlers`, `bus.agent_telemetry`,
`detours.service`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from redis.exceptions import ResponseError

from lachesis_controller.bus.client import CONSUMER, GROUP, REDIS_DOWN, Arg, Bus, agent_stream, send_commands
from lachesis_controller.bus.stream_events import StreamEvents
from lachesis_controller.observability import metrics

log = logging.getLogger(__name__)

BLOCK_MS = 1000
BATCH = 100
BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 5.0
# Idle reads (of up to BLOCK_MS each) between two re-reads of this consumer's pending entries.
RECHECK_PENDING_EVERY = 30
# With stream notifications, reads (or idle waits) between two reads of every stream: what a
# lost notification can delay an entry by.
FULL_READ_EVERY = 30

# One XREADGROUP's entries (decoded: make_redis), as `_read` gives them:
# (stream, [(entry id, fields; None if the entry was deleted meanwhile), ...]) per stream.
Read = list[tuple[str, list[tuple[str, dict[str, str] | None]]]]


class StreamConsumer:
    """Reads one kind of agent stream (bus.AGENT_STREAM_KINDS) of every enrolled host: one
    XREADGROUP over all of them, blocking, so a thousand idle hosts cost one waiting command,
    not a loop. Hosts enrolled or deleted later are picked up at the next read."""

    def __init__(
        self,
        bus: Bus,
        kind: str,
        model: type[BaseModel],
        handle: Callable[[Any], Awaitable[None]],
        stop: asyncio.Event,
        *,
        batch: bool = False,
        group: str = GROUP,
        recheck_every: int = RECHECK_PENDING_EVERY,
        full_read_every: int = FULL_READ_EVERY,
        delete_handled: bool = False,
        coalesce_s: float = 0.0,
    ) -> None:
        """`handle` takes one message, or with `batch` the list of messages of one read.
        `group`: the consumer group (the shared `controller` one by default; one per replica
        for what every replica must see, e.g. telemetry). `delete_handled`: the stream is
        bounded by this consumer (StreamTrim), for streams only its group reads.
        `coalesce_s`: with stream notifications, a read that follows one that found entries
        waits until this long after that one, so that what arrives meanwhile is one batch."""
        self.bus = bus
        self.trim = StreamTrim() if delete_handled else None
        self.group = group
        self.recheck_every = recheck_every
        self.full_read_every = full_read_every
        self.coalesce_s = coalesce_s
        # When the last read that found entries began (loop time); None after an empty one.
        self._busy_since: float | None = None
        self._idle_reads = 0
        self.stop = stop
        self.kind = kind
        self.model = model
        self.handle = handle
        self.batch = batch
        # Next id to read per stream: "0" first re-reads entries delivered to this consumer
        # but never acked (a previous controller, or leader, died mid-way: bus.client.CONSUMER
        # says why the name is fixed), then ">" takes new ones. A stream is in here once its
        # consumer group exists.
        self._next: dict[str, str] = {}
        # With stream notifications (bus.events): streams that returned a full batch, the
        # notifications' generation last read in full, and reads since the last full one.
        self._more: set[str] = set()
        self._events_generation = -1
        self._reads_since_full = 0
        # The streams whose next id is "0" (pending entries to re-read), and _streams()'s
        # answer for the enrolled set it was computed from: per read, what costs in proportion
        # to the announced streams, not to every enrolled host.
        self._rereading: set[str] = set()
        self._cached: tuple[frozenset[str] | None, dict[str, str]] | None = None

    async def run(self) -> None:
        redis = self.bus.redis
        backoff = BACKOFF_MIN_S
        down_since_logged = False
        # The flag, not only cancellation, ends the loop: on Python 3.11 a cancel that lands
        # while redis-py's own read timeout fires can come out as TimeoutError, which the
        # loop would otherwise treat as "Redis down, retry" forever.
        while not self.stop.is_set():
            try:
                streams = await self._streams()
                if not streams:
                    await self.bus.enrolled_changed(BLOCK_MS / 1000)
                    continue
                events = self.bus.events
                named: dict[str, str]
                read: Read
                if events is not None and events.live:
                    await self._coalesce()
                    named = self._announced(streams, events)
                    if not named:
                        if not await events.wait(self.kind, BLOCK_MS / 1000):
                            self._recheck_when_idle([])
                        continue
                    started = asyncio.get_running_loop().time()
                    read = await self._read(named, block_ms=None)
                else:
                    named = {s: self._next[s] for s in streams}
                    self._more.clear()  # every stream is read: nothing is left over
                    started = asyncio.get_running_loop().time()
                    read = await self._read(named, block_ms=BLOCK_MS)
                metrics.BUS_STREAMS_READ.labels(self.kind).inc(len(named))
                self._busy_since = started if any(entries for _, entries in read) else None
                self._recheck_when_idle(read)
                for stream, entries in read:
                    if self._next.get(stream) == "0" and not entries:
                        self._next[stream] = ">"
                        self._rereading.discard(stream)
                        # Then its new entries, once: those appended before its group was made
                        # (or before a notification could name it) may never be announced.
                        self._more.add(stream)
                    elif len(entries) >= BATCH:
                        self._more.add(stream)  # a full batch: the stream may hold more
                if any(entries for _, entries in read):
                    await self._process(read, streams)
                    commands: list[tuple[Arg, ...]] = []
                    for stream, entries in read:
                        if entries:
                            ids = [entry_id for entry_id, _ in entries]
                            commands.append(("XACK", stream, self.group, *ids))
                            if self.trim is not None and (done := self.trim.handled(stream, ids)):
                                commands.append(("XDEL", stream, *done))
                    await send_commands(redis, commands)
                if down_since_logged:
                    log.info("%s streams: Redis is back", self.kind)
                    down_since_logged = False
                backoff = BACKOFF_MIN_S
            except asyncio.CancelledError:
                raise
            except ResponseError as exc:
                if "NOGROUP" in str(exc) or "UNBLOCKED" in str(exc):
                    # Redis restarted empty, or a stream was deleted (its host with it).
                    log.warning("%s streams: consumer group missing, recreating them", self.kind)
                    self._forget_streams()
                    continue
                log.error("%s streams: Redis refused a command: %s", self.kind, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
            except REDIS_DOWN as exc:
                if not down_since_logged:
                    log.warning("%s streams: Redis unavailable (%s: %s); retrying", self.kind, type(exc).__name__, exc)
                    down_since_logged = True
                self._forget_streams()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _read(self, named: dict[str, str], block_ms: int | None) -> Read:
        """One XREADGROUP of the `named` streams (stream -> next id), blocking up to `block_ms`
        if given. Its reply taken as Redis sends it and made into `Read` here: redis-py's reply
        callback (a dict built per entry through its generic helpers) was 6% of the
        controller's CPU during 1,000-host rollouts (docs/benchmarks/controller.md, eleventh
        round)."""
        block = ("BLOCK", block_ms) if block_ms is not None else ()
        command = (
            "XREADGROUP",
            "GROUP",
            self.group,
            CONSUMER,
            "COUNT",
            BATCH,
            *block,
            "STREAMS",
            *named,
            *named.values(),
        )
        (reply,) = await send_commands(self.bus.redis, [command])
        if reply is None:  # the block timed out
            return []
        # RESP3 (redis-py's default protocol): a map of stream -> entries; RESP2: pairs.
        if isinstance(reply, dict):
            streams = list(reply.items())
        elif isinstance(reply, list):
            streams = reply
        else:
            raise TypeError(f"XREADGROUP answered {type(reply).__name__}")
        return [(stream, [(entry_id, _fields(fields)) for entry_id, fields in entries]) for stream, entries in streams]

    async def _coalesce(self) -> None:
        """After a read that found entries, wait until `coalesce_s` after it began: a rollout's
        acks arrive over a fraction of a second, and read as soon as each was announced they
        made many small batches, each a transaction with fixed work (locking reads, updates,
        settling the rollout; docs/benchmarks/controller.md, eleventh round). An idle
        consumer reads the first announced entry at once."""
        if self.coalesce_s <= 0 or self._busy_since is None:
            return
        delay = self._busy_since + self.coalesce_s - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    def _announced(self, streams: dict[str, str], events: StreamEvents) -> dict[str, str]:
        """Stream -> next id of what to read now that notifications are live: the streams
        appended to since the last read, those with entries left over (a full batch, pending
        ones to re-read: id "0"). Every stream after a (re)subscription, whose notifications
        may have missed appends, and every `full_read_every` reads, in case some were lost."""
        hosts = events.take(self.kind)
        self._reads_since_full += 1
        if events.generation != self._events_generation or self._reads_since_full >= self.full_read_every:
            self._events_generation = events.generation
            self._reads_since_full = 0
            self._more.clear()
            return {s: self._next[s] for s in streams}
        named: dict[str, str] = {}
        for stream in (*(agent_stream(h, self.kind) for h in hosts), *self._more, *self._rereading):
            if stream in streams:
                named[stream] = self._next[stream]
        self._more.clear()
        return named

    def _forget_streams(self) -> None:
        """Every stream's group is to be made (again) before it is read."""
        self._next.clear()
        self._rereading.clear()
        self._cached = None

    def _recheck_when_idle(self, read: Read) -> None:
        """After `recheck_every` reads that found nothing, read this consumer's pending
        entries ("0") again. They are normally none; but a leader that lost its lease may
        still have been delivered entries under the shared name (bus.client.CONSUMER) until
        it noticed, and stopped before acking them, after the new leader's first read."""
        if any(entries for _, entries in read):
            self._idle_reads = 0
            return
        self._idle_reads += 1
        if self._idle_reads >= self.recheck_every:
            self._idle_reads = 0
            for stream in self._next:
                self._next[stream] = "0"
            self._rereading = set(self._next)

    async def forget_group(self) -> None:
        """Destroy this consumer's group on every stream it read (a replica's own group, at
        a clean shutdown: nobody reads it again)."""
        streams = list(self._next) or [agent_stream(h, self.kind) for h in self.bus.enrolled or ()]
        if not streams:
            return
        async with self.bus.redis.pipeline(transaction=False) as pipe:
            for stream in streams:
                pipe.xgroup_destroy(stream, self.group)
            await pipe.execute(raise_on_error=False)

    async def _streams(self) -> dict[str, str]:
        """Stream -> host of every enrolled host, each with its consumer group."""
        enrolled = self.bus.enrolled
        if self._cached is not None and self._cached[0] is enrolled:
            return self._cached[1]
        streams = {agent_stream(h, self.kind): h for h in sorted(enrolled or ())}
        for gone in self._next.keys() - streams.keys():
            del self._next[gone]
            self._rereading.discard(gone)
            if self.trim is not None:
                self.trim.forget(gone)
        new = [s for s in streams if s not in self._next]
        if new:
            async with self.bus.redis.pipeline(transaction=False) as pipe:
                for stream in new:
                    # From id 0: what the agent wrote before the controller read it counts too.
                    pipe.xgroup_create(stream, self.group, id="0", mkstream=True)
                results = await pipe.execute(raise_on_error=False)
            for stream, result in zip(new, results, strict=True):
                if isinstance(result, Exception) and "BUSYGROUP" not in str(result):
                    raise result
                self._next[stream] = "0"
                self._rereading.add(stream)
        self._cached = (enrolled, streams)
        return streams

    async def _process(self, read: Read, hosts: dict[str, str]) -> None:
        messages = []
        for stream, entries in read:
            for entry_id, fields in entries:
                message = self._parse(stream, hosts.get(stream), entry_id, fields)
                if message is not None:
                    messages.append((entry_id, message))
        if not messages:
            return
        try:
            if self.batch:
                await self.handle([m for _, m in messages])
                return
        except asyncio.CancelledError:
            raise
        except REDIS_DOWN:
            raise
        except Exception:
            log.exception("%s: failed to handle a batch of %d; one by one now", self.kind, len(messages))
        for entry_id, message in messages:
            try:
                await self.handle([message] if self.batch else message)
            except asyncio.CancelledError:
                raise
            except REDIS_DOWN:
                # Leave the entries pending: they are read again (id "0") once Redis is back.
                raise
            except Exception:
                # A message that breaks the handler would break it again: drop it, keep going.
                log.exception("%s %s: failed to handle message; dropped", self.kind, entry_id)

    def _parse(self, stream: str, host: str | None, entry_id: str, fields: dict[str, str] | None) -> Any:
        """The entry's message if it is valid and names the stream's own host; else None."""
        raw = (fields or {}).get("msg")
        try:
            if raw is None:
                raise ValueError("entry has no msg field")
            message = self.model.model_validate_json(raw)
        except (ValidationError, ValueError) as exc:
            metrics.BUS_MESSAGES_DROPPED.labels(self.kind).inc()
            log.warning("%s %s: dropped invalid message: %s", stream, entry_id, _brief(exc))
            return None
        claimed = getattr(message, "host_id", None)
        if host is None or claimed != host:
            reject(self.kind, host or "?", "another host", f"names host {claimed}")
            return None
        return message


def _fields(flat: list[str] | None) -> dict[str, str] | None:
    """An entry's fields as a dict (None: deleted after it was delivered)."""
    if flat is None:
        return None
    if len(flat) == 2:
        return {flat[0]: flat[1]}
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class StreamTrim:
    """Bounds a stream that agents append to without a MAXLEN (acks, registrations): the
    entries this consumer has handled and acked are deleted (XDEL, in the XACK's pipeline),
    all but the newest handled one per stream, kept for whoever looks at the stream (an
    operator, the e2e tests reading the last ack). XDEL of exactly the handled ids rather
    than XTRIM MINID: a leader that lost its lease may have left entries pending under the
    shared consumer name (bus.client.CONSUMER) below ids the new leader handles, and those
    must stay until they are read again. Redis frees a stream node once all its entries are
    deleted, so a host's stream holds one node at most however many rollouts it acked."""

    def __init__(self) -> None:
        self._kept: dict[str, str] = {}

    def handled(self, stream: str, entry_ids: list[str]) -> list[str]:
        """The ids to delete now that `entry_ids` of `stream` are handled."""
        ids = entry_ids + ([kept] if (kept := self._kept.get(stream)) else [])
        newest = max(ids, key=_stream_id)
        self._kept[stream] = newest
        return [i for i in dict.fromkeys(ids) if i != newest]

    def forget(self, stream: str) -> None:
        self._kept.pop(stream, None)


# (kind, host, why) already logged: a forging agent gets one warning, and a count each time.
_logged_rejections: set[tuple[str, str, str]] = set()


def reject(kind: str, host: str, why: str, reason: str) -> None:
    """Count an agent message refused for `why` (the metric's label); log the first per host."""
    metrics.BUS_MESSAGES_REJECTED.labels(kind, why).inc()
    if (kind, host, why) not in _logged_rejections:
        _logged_rejections.add((kind, host, why))
        log.warning(
            "%s stream of %s: rejected a message that %s (logged once; counted in "
            "lachesis_bus_messages_rejected_total)",
            kind,
            host,
            reason,
        )


def _brief(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}" for e in exc.errors()[:3])
    return str(exc)
