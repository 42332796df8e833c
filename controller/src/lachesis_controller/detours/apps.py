"""The control applications a `header -> controller` detour names.

- `approve`: lets every IO go on (remembered until the agent's rule table changes); the
  header is recorded, which makes it an audit trail of the IO a rule matched.
- `readset`: sRoute's replica read-set application (thesis §6.5.2, Fig. 6.8). While a flow
  is read-only its reads spread over all replicas; the first write header switches every
  read rule of the flow (a rule matching reads of the write's tenant and path whose detours
  are several file replicas) to the primary only, through the rollout engine (two-phase:
  quiesce and drain the reads, install), and only then lets the write go. Later writes go
  without asking for `ttl` (half the quiet time); each header that still arrives restarts
  the quiet clock. Once no write header came for the quiet time
  (`LACHESIS_READSET_QUIET_S`, default 30 s as in the paper), the read sets are switched
  back to all replicas. The asking rule itself stays installed throughout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.db import utcnow
from lachesis_controller.detours.messages import DetourRequest
from lachesis_controller.models import Rollout, Rule
from lachesis_controller.policy.match import path_prefix_matches
from lachesis_controller.rollout import engine as rollouts

log = logging.getLogger(__name__)

EIO = 5


@dataclass(frozen=True)
class Decision:
    verdict: str  # proceed | deny
    errno: int | None = None
    ttl_ms: int | None = None
    reason: str | None = None


class Application(Protocol):
    name: str

    async def decide(self, request: DetourRequest) -> Decision: ...


class Approve:
    name = "approve"

    async def decide(self, request: DetourRequest) -> Decision:
        return Decision("proceed", reason="approved")


def read_rules_of(rules: list[Rule], request: DetourRequest) -> list[Rule]:
    """The rules that match reads of the write's tenant and path (the flow's read rules)."""
    h = request.header
    out = []
    for r in rules:
        m = r.match
        if m.get("ops") is not None and "read" not in m["ops"]:
            continue
        if m.get("tenant") is not None and m["tenant"] != h.tenant:
            continue
        if m.get("key_prefix") is not None:
            continue
        if m.get("path_prefix") is not None and not path_prefix_matches(m["path_prefix"], h.path):
            continue
        out.append(r)
    return out


def _replicas(detours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in detours if d["what"] == "io" and d["to"]["kind"] == "file"]


Publish = Callable[[list[rollouts.Publication]], Awaitable[object]]


class ReadSet:
    """State: for each read rule switched to primary-only, its full read set and when the
    last write header of its flow arrived. Soft state: a restarted controller that finds a
    primary-only rule it did not switch leaves it alone."""

    name = "readset"

    def __init__(
        self,
        sessions: sessionmaker[Session],
        publish: Publish,
        *,
        rollout_timeout_s: float,
        quiet_s: float,
        stop: asyncio.Event,
    ) -> None:
        self.sessions = sessions
        self.publish = publish
        self.rollout_timeout_s = rollout_timeout_s
        self.quiet_s = quiet_s
        self.stop = stop
        self.lock = asyncio.Lock()
        self.saved: dict[str, list[dict[str, Any]]] = {}
        self.last_write: dict[str, float] = {}
        self.watchers: dict[str, asyncio.Task[None]] = {}

    def ttl_ms(self) -> int:
        return max(1, int(self.quiet_s * 500))

    async def decide(self, request: DetourRequest) -> Decision:
        # One at a time: concurrent first writes of a flow make one switch, not several.
        async with self.lock:
            with self.sessions() as s, s.begin():
                candidates = read_rules_of(list(s.scalars(select(Rule).order_by(Rule.priority, Rule.name))), request)
                to_switch = [r.name for r in candidates if len(_replicas(r.detours)) > 1]
                flow = [r.name for r in candidates if r.name in self.saved] + to_switch
            now = time.monotonic()
            for name in flow:
                self.last_write[name] = now
            if to_switch:
                ok, why = await self._set_read_sets(
                    {name: None for name in to_switch},
                    cause=f"readset: write to {request.header.path} on {request.host_id}",
                    traceparent=request.traceparent,
                )
                if not ok:
                    # Reads may still go to every replica: letting the write go could serve stale reads.
                    return Decision("deny", errno=EIO, reason=f"read set not switched to the primary: {why}")
                for name in to_switch:
                    self._watch(name)
            reason = (
                f"read set of {', '.join(to_switch)} switched to the primary"
                if to_switch
                else f"read set of {', '.join(flow)} is primary-only"
                if flow
                else "no read rule of this flow"
            )
            return Decision("proceed", ttl_ms=self.ttl_ms(), reason=reason)

    async def _set_read_sets(
        self,
        changes: dict[str, list[dict[str, Any]] | None],
        *,
        cause: str,
        traceparent: str | None,
    ) -> tuple[bool, str]:
        """Rules by name -> their new detours (None: the primary only, saving the full set),
        rolled out in one rollout; waits for it to finish."""
        with self.sessions() as s, s.begin():
            for name, detours in changes.items():
                rule = s.get(Rule, name)
                if rule is None:
                    continue
                if detours is None:
                    self.saved[name] = list(rule.detours)
                    replicas = _replicas(rule.detours)
                    keep = [d for d in rule.detours if d not in replicas[1:]]
                    rule.detours = keep
                else:
                    rule.detours = detours
                rule.updated_at = utcnow()
            s.flush()
            rollout, publications = rollouts.start_rollout(
                s,
                cause=cause,
                trigger="detour",
                host_ids=rollouts.all_host_ids(s),
                now=utcnow(),
                timeout_s=self.rollout_timeout_s,
                traceparent=traceparent,
            )
            rollout_id = rollout.id
        await self.publish(publications)
        state, reason = await self._finished(rollout_id)
        log.info("readset: %s -> rollout %s %s", cause, rollout_id, state)
        return state == rollouts.SUCCEEDED, f"rollout {rollout_id} {state}{f': {reason}' if reason else ''}"

    async def _finished(self, rollout_id: str) -> tuple[str, str | None]:
        deadline = time.monotonic() + self.rollout_timeout_s + 5
        while time.monotonic() < deadline and not self.stop.is_set():
            with self.sessions() as s, s.begin():
                r = s.get(Rollout, rollout_id)
                if r is not None and r.state != rollouts.PENDING:
                    return r.state, r.reason
            await asyncio.sleep(0.05)
        return "unfinished", "gave up waiting"

    def _watch(self, name: str) -> None:
        task = self.watchers.get(name)
        if task is None or task.done():
            self.watchers[name] = asyncio.create_task(self._restore_when_quiet(name), name=f"readset {name}")

    async def _restore_when_quiet(self, name: str) -> None:
        while not self.stop.is_set():
            quiet_for = time.monotonic() - self.last_write.get(name, 0.0)
            if quiet_for < self.quiet_s:
                await asyncio.sleep(self.quiet_s - quiet_for)
                continue
            async with self.lock:
                if time.monotonic() - self.last_write.get(name, 0.0) < self.quiet_s:
                    continue
                full = self.saved.get(name)
                if full is None:
                    return
                ok, why = await self._set_read_sets(
                    {name: full},
                    cause=f"readset: flow of {name} write-free for {self.quiet_s:g} s",
                    traceparent=None,
                )
                if ok:
                    self.saved.pop(name, None)
                    return
                log.warning("readset: could not restore the read set of %s (%s); retrying", name, why)
            await asyncio.sleep(min(self.quiet_s, 5.0))
