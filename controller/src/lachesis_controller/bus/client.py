"""The Redis side of the bus (api-schemas/README.md): key names, the Redis client, writing
desired state to the agents, and the agents' Redis ACL users."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

import hiredis
from pydantic import ValidationError
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from lachesis_controller.bus.errors import REDIS_DOWN as REDIS_DOWN  # re-exported: the bus's callers name it here
from lachesis_controller.bus.messages import Heartbeat, parse_timestamp
from lachesis_controller.bus.stream_events import STREAM_PREFIX, StreamEvents
from lachesis_controller.observability import metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Publication:
    """One desired-state message to write to a host's desired key and inbox."""

    host_id: str
    generation: int
    message: str


# Agent -> controller streams, one per host and kind: `lachesis:agent:{host}:{kind}`. Only
# the host's own ACL user may append to its streams (agent_acl_rules), so the stream a message
# came on says who sent it; the consumers reject a message naming another host. The shared
# `lachesis:registrations|acks|telemetry|detours` streams of earlier versions are not read.
REGISTRATIONS = "registrations"
ACKS = "acks"
TELEMETRY = "telemetry"
# Held IO headers of controller detours (detours/service.py).
DETOURS = "detours"
AGENT_STREAM_KINDS = (REGISTRATIONS, ACKS, TELEMETRY, DETOURS)
# What the agent's control path runs (runner.rs); anything else is refused.
AGENT_COMMANDS = ("get", "set", "xadd", "xread", "xrange", "xrevrange", "ping", "hello", "auth", "select")
GROUP = "controller"
# A fixed consumer name, whichever process reads: the registration, ack and detour streams
# are read by the leader only (ha/lease.py), so at most one process uses the name at a time,
# and a restarted controller or a new leader starts by re-reading from id "0" the entries
# its predecessor was delivered but did not ack (killed between XREADGROUP and XACK): they
# are this name's pending entries. Per-process names would need XAUTOCLAIM with an idle
# threshold, i.e. a guess of how long a live leader may take over a batch.
CONSUMER = "controller-1"
# Messages kept in a host's inbox. Each is the whole state and the desired key holds the
# latest, which an agent reads whenever it (re)connects: the inbox only carries what a
# following agent has not read yet, a few messages. At 1,000 the inbox was most of a host's
# Redis memory after a few hundred rollouts (docs/benchmarks/controller.md).
INBOX_MAXLEN = 32


def desired_key(host_id: str) -> str:
    return f"lachesis:agent:{host_id}:desired"


def inbox_key(host_id: str) -> str:
    return f"lachesis:agent:{host_id}:inbox"


def heartbeat_key(host_id: str) -> str:
    return f"lachesis:agent:{host_id}:heartbeat"


def agent_stream(host_id: str, kind: str) -> str:
    """The stream of `kind` (AGENT_STREAM_KINDS) that only `host_id`'s agent appends to."""
    return f"{STREAM_PREFIX}{host_id}:{kind}"


def host_keys(host_id: str) -> list[str]:
    """Every key the bus keeps for one host (deleted with the host)."""
    return [
        desired_key(host_id),
        inbox_key(host_id),
        heartbeat_key(host_id),
        detour_verdicts_key(host_id),
        *(agent_stream(host_id, kind) for kind in AGENT_STREAM_KINDS),
    ]


def detour_verdicts_key(host_id: str) -> str:
    return f"lachesis:detour-verdicts:{host_id}"


def agent_user(host_id: str) -> str:
    return f"agent-{host_id}"


def agent_acl_rules(host_id: str, secret_sha256: str) -> list[str]:
    """ACL SETUSER rules of one agent's user: read its own keys, write only its heartbeat,
    append to its own agent streams; no other key, command or channel. Redis keeps only the
    SHA-256 of the secret (`#`), like the controller's database."""
    return [
        "reset",
        "on",
        f"#{secret_sha256}",
        "resetchannels",
        "-@all",
        *(f"+{command}" for command in AGENT_COMMANDS),
        f"%R~lachesis:agent:{host_id}:*",
        f"%R~{detour_verdicts_key(host_id)}",
        f"%W~{heartbeat_key(host_id)}",
        *(f"%W~{agent_stream(host_id, kind)}" for kind in AGENT_STREAM_KINDS),
    ]


def agent_url(controller_url: str, host_id: str, secret: str) -> str:
    """The controller's Redis URL with the agent's user and secret instead of its own."""
    parts = urlsplit(controller_url)
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, f"{agent_user(host_id)}:{secret}@{host}", parts.path, "", ""))


def make_redis(url: str, max_connections: int = 64) -> Redis:
    # One immediate retry only: it replaces a pooled connection that died with an earlier
    # Redis process (the first command on it fails), while a Redis that is really down
    # still fails fast (connection refused) so no REST call hangs. Longer waits are the
    # callers' business: the consumers and the reconciler back off and try again.
    # A blocking pool of bounded size: under a burst of REST calls (200 concurrent clients
    # listing hosts) a call waits a moment for a free connection instead of opening one
    # per call, which redis-py refuses past its default limit ("Too many connections") and
    # which made such calls take seconds. The consumers' blocking XREADGROUPs hold one each.
    pool = BlockingConnectionPool.from_url(
        url,
        decode_responses=True,
        socket_connect_timeout=1.0,
        socket_timeout=5.0,
        max_connections=max_connections,
        timeout=5.0,
        # On the pool's connections: a client made with an explicit pool ignores its own.
        retry=Retry(NoBackoff(), 1),
    )
    return Redis(connection_pool=pool)


# One argument of a Redis command as hiredis packs it.
Arg = str | bytes | int | float


async def send_commands(redis: Redis, commands: Sequence[tuple[Arg, ...]]) -> list[object]:
    """Send `commands` in one write on one pooled connection and return their replies; once
    all are read, raise the first error reply, as redis-py's pipeline does (a MULTI ... EXEC
    among them is a transaction, as there).

    For the batches that name every host (a rollout's desired states, an ack batch's XACK and
    XDEL): redis-py's pipeline packs each command in Python and reads each reply under a
    timeout of its own, about 20 us a command, and a 1,000-host two-phase rollout sends some
    8,000 (docs/benchmarks/controller.md, eleventh round). Here hiredis packs them and one
    timeout (the connection's socket timeout, per 1,000 replies) bounds the reads. A
    connection that fails before anything was sent is replaced once, as the client's one
    retry does."""
    if not commands:
        return []
    packed = b"".join(hiredis.pack_command(command) for command in commands)  # type: ignore[arg-type]
    pool = redis.connection_pool
    for attempt in (1, 2):
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            try:
                await connection.send_packed_command(packed, check_health=False)
            except (RedisConnectionError, OSError):
                if attempt == 1:
                    continue  # a connection that died with an earlier Redis: once more, anew
                raise
            replies: list[object] = []
            failed: ResponseError | None = None
            timeout_s = connection.socket_timeout
            deadline = None if timeout_s is None else timeout_s * (1 + len(commands) // 1000)
            async with asyncio.timeout(deadline):
                for _ in commands:
                    try:
                        reply = await connection.read_response(timeout=math.inf)
                    except ResponseError as exc:  # read whole: the connection stays usable
                        failed = failed or exc
                        replies.append(exc)
                        continue
                    if isinstance(reply, list) and failed is None:  # EXEC's: a command's error
                        failed = next((r for r in reply if isinstance(r, ResponseError)), None)
                    replies.append(reply)
            if failed is not None:
                raise failed
            return replies
        except BaseException as exc:
            if not isinstance(exc, ResponseError):
                await connection.disconnect(nowait=True)  # replies may be left unread
            raise
        finally:
            await pool.release(connection)
    raise AssertionError("unreachable")


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


@dataclass
class _Queued:
    """A publish() call's publications; `published` gets its outcome."""

    publications: Sequence[Publication]
    source: str
    published: asyncio.Future[bool]


class Bus:
    """Writes desired state. All writers hold `lock`, so the request path and the
    reconciler never interleave and a host's key never goes back a generation."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.lock = asyncio.Lock()
        # publish() calls waiting for the lock, oldest first.
        self._queued: list[_Queued] = []
        # The hosts whose streams the consumers read: the enrolled ones (agent_credentials),
        # so a host never enrolled cannot be heard. None until the first set_enrolled (the
        # reconciler's first pass, at start); kept in step by enrolment and deletion.
        self.enrolled: frozenset[str] | None = None
        self._enrolled_changed = asyncio.Event()
        # Hosts deleted by this process: a reconciler pass that read the credentials just
        # before a deletion must not bring the host's streams or ACL user back.
        self._deleted: set[str] = set()
        # Which agent streams were appended to (stream_events.py), when this process listens
        # for it; the consumers read every enrolled host's stream without it.
        self.events: StreamEvents | None = None
        # Per host, the last desired value and heartbeat read, with what was parsed of them:
        # the reconciler reads every host's every second and they seldom change (parsing
        # 1,000 of each was 3.5% of a 1,000-host rollout's controller CPU).
        self._versions_read: dict[str, tuple[str | bytes, tuple[int, str] | None]] = {}
        self._beats_read: dict[str, tuple[str | bytes, Heartbeat]] = {}

    def set_enrolled(self, host_ids: Iterable[str]) -> None:
        hosts = frozenset(host_ids) - self._deleted
        if hosts == self.enrolled:
            return
        self.enrolled = hosts
        changed, self._enrolled_changed = self._enrolled_changed, asyncio.Event()
        changed.set()

    def add_enrolled(self, host_id: str) -> None:
        self._deleted.discard(host_id)
        if self.enrolled is not None:  # else the first full set_enrolled includes it
            self.set_enrolled(self.enrolled | {host_id})

    def remove_enrolled(self, host_id: str) -> None:
        self._deleted.add(host_id)
        if self.enrolled is not None:
            self.set_enrolled(self.enrolled - {host_id})

    async def enrolled_changed(self, timeout_s: float) -> bool:
        """Wait until the enrolled hosts change (True) or `timeout_s` passes (False)."""
        try:
            await asyncio.wait_for(self._enrolled_changed.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def publish(self, publications: Sequence[Publication], *, source: str) -> bool:
        """Publish under `lock` (see publish_locked). Calls that wait for the lock are
        published together by the first of them to get it, in the order they were made
        (their commits' order: nothing awaits between a commit and this call): one MULTI
        for all of them instead of one each. Under 200 concurrent clients each MULTI's reply
        waited a whole turn of the busy event loop, with every later write queued behind it
        (docs/benchmarks/controller.md)."""
        if not publications:
            return True
        entry = _Queued(publications, source, asyncio.get_running_loop().create_future())
        self._queued.append(entry)
        try:
            async with self.lock:
                if not entry.published.done():
                    batch, self._queued = self._queued, []
                    # Cancelled mid-MULTI, whether Redis applied it is unknown: a failure to
                    # the callers, as Redis being down is (the reconciler publishes the rest).
                    ok = False
                    try:
                        ok = await self._publish_locked(batch)
                    finally:
                        for queued in batch:
                            queued.published.set_result(ok)
        except asyncio.CancelledError:
            # Not published by anyone yet: leave it out, so that no later batch writes this
            # (possibly older) generation after the reconciler has published a newer one.
            if entry in self._queued:
                self._queued.remove(entry)
            raise
        return entry.published.result()

    async def publish_locked(self, publications: Sequence[Publication], *, source: str) -> bool:
        """Write each message to the host's desired key and inbox; False if Redis failed.

        A failure is logged, not raised: the database already holds the change and the
        reconciler will publish it once Redis answers again.
        """
        if not publications:
            return True
        return await self._publish_locked([_Queued(publications, source, asyncio.get_running_loop().create_future())])

    async def _publish_locked(self, batch: Sequence[_Queued]) -> bool:
        publications = [pub for queued in batch for pub in queued.publications]
        try:
            # MULTI/EXEC: an agent never sees the key without the inbox entry, or the reverse.
            commands: list[tuple[Arg, ...]] = [("MULTI",)]
            for pub in publications:
                commands.append(("SET", desired_key(pub.host_id), pub.message))
                commands.append(("XADD", inbox_key(pub.host_id), "MAXLEN", "~", INBOX_MAXLEN, "*", "msg", pub.message))
            commands.append(("EXEC",))
            await send_commands(self.redis, commands)
        except REDIS_DOWN as exc:
            metrics.PUBLISH_FAILURES.inc(len(publications))
            log.warning(
                "could not publish desired state to %s (%s: %s); the reconciler will retry",
                ", ".join(f"{p.host_id}@{p.generation}" for p in publications),
                type(exc).__name__,
                exc,
            )
            return False
        for queued in batch:
            self._published(queued.publications, queued.source)
        return True

    @staticmethod
    def _published(publications: Sequence[Publication], source: str) -> None:
        metrics.DESIRED_STATE_PUBLISHED.labels(source).inc(len(publications))
        # One line per call, each host's only at DEBUG: a 1,000-host rollout logged 2,000
        # lines here, 2.4% of its controller CPU, and nothing reads them.
        generations = [p.generation for p in publications]
        log.info(
            "published %d desired state(s), generation %d-%d (%s)",
            len(publications),
            min(generations),
            max(generations),
            source,
        )
        if log.isEnabledFor(logging.DEBUG):
            for pub in publications:
                log.debug("published generation %d to %s (%s)", pub.generation, pub.host_id, source)

    async def set_agent_user(self, host_id: str, secret_sha256: str) -> None:
        """Create or replace the agent's ACL user (raises on Redis errors)."""
        await self.redis.execute_command(
            "ACL", "SETUSER", agent_user(host_id), *agent_acl_rules(host_id, secret_sha256)
        )

    async def restore_agent_users(self, credentials: Sequence[tuple[str, str]]) -> int:
        """Recreate the ACL users Redis lost (a restart without an ACL file); returns how
        many. `credentials` are (host_id, secret_sha256) as the database keeps them: every
        enrolled host, so they also become the hosts whose streams are read.

        Under `lock`, as a host's deletion is: a deletion made while this pass awaited Redis
        would otherwise come between its check of the deleted hosts and its ACL SETUSER, and
        the deleted host's user would come back."""
        async with self.lock:
            credentials = [(h, digest) for h, digest in credentials if h not in self._deleted]
            self.set_enrolled(host_id for host_id, _ in credentials)
            if not credentials:
                return 0
            present = set(await self.redis.execute_command("ACL", "USERS"))
            missing = [(h, digest) for h, digest in credentials if agent_user(h) not in present]
            for host_id, digest in missing:
                await self.set_agent_user(host_id, digest)
        if missing:
            log.warning("recreated the Redis ACL users of %s", ", ".join(h for h, _ in missing))
        return len(missing)

    async def forget_host(self, host_id: str) -> None:
        """Delete the agent's ACL user (closing its connections) and every key of the host
        (raises on Redis errors). Deleting an ACL user that is gone already is no error."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.execute_command("ACL", "DELUSER", agent_user(host_id))
            pipe.delete(*host_keys(host_id))
            await pipe.execute()

    async def desired_generations(self, host_ids: Sequence[str]) -> list[int | None]:
        """Generation held in each host's desired key (None: missing or unreadable).

        Raises on Redis errors: the caller cannot tell "missing" from "unknown" otherwise.
        """
        if not host_ids:
            return []
        values = await self.redis.mget([desired_key(h) for h in host_ids])
        return [_generation_of(v) for v in values]

    async def desired_versions(self, host_ids: Sequence[str]) -> list[tuple[int, str] | None]:
        """(generation, phase) held in each host's desired key; None: missing or unreadable.
        Both phases of a two-phase rollout share the generation, so both are compared."""
        if not host_ids:
            return []
        values = await self.redis.mget([desired_key(h) for h in host_ids])
        cache, self._versions_read = self._versions_read, {}
        versions: list[tuple[int, str] | None] = []
        for host_id, raw in zip(host_ids, values, strict=True):
            if raw is None:
                versions.append(None)
                continue
            known = cache.get(host_id)
            version = known[1] if known is not None and known[0] == raw else _version_of(raw)
            self._versions_read[host_id] = (raw, version)
            versions.append(version)
        return versions

    async def heartbeats(self, host_ids: Sequence[str]) -> dict[str, Heartbeat | None] | None:
        """Latest heartbeat per host (None when the key is absent: the host is not alive);
        None overall when Redis cannot be asked."""
        if not host_ids:
            return {}
        try:
            values = await self.redis.mget([heartbeat_key(h) for h in host_ids])
        except REDIS_DOWN as exc:
            log.warning("cannot read heartbeats (%s: %s)", type(exc).__name__, exc)
            return None
        beats: dict[str, Heartbeat | None] = {}
        cache = self._beats_read
        for host_id, raw in zip(host_ids, values, strict=True):
            known = cache.get(host_id)
            if known is not None and known[0] == raw:
                beats[host_id] = known[1]
                continue
            beat = beats[host_id] = _heartbeat_of(host_id, raw)
            if beat is not None and raw is not None and beat.host_id == host_id and beat.sent_at:
                cache[host_id] = (raw, beat)  # a valid one: an invalid one is warned of each time
            else:
                cache.pop(host_id, None)
        return beats


def _generation_of(raw: str | bytes | None) -> int | None:
    if raw is None:
        return None
    try:
        generation = json.loads(raw).get("generation")
    except (ValueError, AttributeError):
        return None
    return generation if isinstance(generation, int) else None


def _version_of(raw: str | bytes | None) -> tuple[int, str] | None:
    if raw is None:
        return None
    try:
        message = json.loads(raw)
        generation, phase = message.get("generation"), message.get("phase", "install")
    except (ValueError, AttributeError):
        return None
    if not isinstance(generation, int):
        return None
    return generation, phase if isinstance(phase, str) else "install"


def _heartbeat_of(host_id: str, raw: str | bytes | None) -> Heartbeat | None:
    if raw is None:
        return None
    try:
        beat = Heartbeat.model_validate_json(raw)
    except ValidationError as exc:
        # The key exists, so the agent is alive even if it wrote something odd.
        log.warning("invalid heartbeat of %s: %s", host_id, exc.errors()[0].get("msg"))
        return Heartbeat.model_construct(
            schema_="lachesis.heartbeat/v1", host_id=host_id, sent_at="", generation=0, uptime_s=0
        )
    if beat.host_id != host_id:
        log.warning("heartbeat key of %s holds host_id %s", host_id, beat.host_id)
    return beat


def heartbeat_time(beat: Heartbeat, now: datetime) -> datetime:
    """When the heartbeat was sent, but never later than now (agent clocks drift)."""
    try:
        return min(parse_timestamp(beat.sent_at), now)
    except ValueError:
        return now
