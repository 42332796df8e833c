"""Desired-state messages rendered once per distinct content, not once per host.

A rollout's messages differ between its hosts only in `host_id` and `generation` when the
hosts run the same state: validating and dumping each through pydantic (and parsing the
stored body for each) was a third of a 1,000-host rollout's controller CPU
(docs/benchmarks/controller.md). A `Renderer` validates the first message of each distinct
(rollout, state, phase, flows, restores) and copies it for the others with those two fields
replaced, which gives the same bytes as rendering each on its own (dump keeps the model's
field order, and replacing a key keeps its place).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final

from pydantic import TypeAdapter

from lachesis_controller.bus.messages import DesiredState, HostId
from lachesis_controller.models import DesiredStateBody, Rollout, RolloutTarget

QUIESCE: Final = "quiesce"
INSTALL: Final = "install"

# The two per-host fields are still checked, as the whole message used to be.
_HOST_ID: Final = TypeAdapter(HostId)


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def envelope(
    host_id: str, generation: int, rollout_id: str | None, traceparent: str | None, issued_at: datetime
) -> dict[str, Any]:
    return {
        "schema": "lachesis.desired-state/v1",
        "host_id": host_id,
        "generation": generation,
        "rollout_id": rollout_id,
        "issued_at": rfc3339(issued_at),
        "traceparent": traceparent,
    }


def encode(fields: dict[str, Any]) -> str:
    """A desired-state message as compact JSON, checked against its model."""
    return json.dumps(DesiredState.model_validate(fields).dump(), separators=(",", ":"))


class Renderer:
    """Renders the messages of one batch (a rollout's start, its phase 2); keep one per batch."""

    def __init__(self) -> None:
        self._templates: dict[tuple[Any, ...], _Template] = {}
        self._bodies: dict[str, dict[str, Any]] = {}
        # id(quiesce flows) -> (those flows, their canonical JSON): a rollout's targets share
        # one list of flows per distinct content, and writing it out for each of 1,000 hosts
        # was 2.5% of the rollout's controller CPU. The list is kept so that its id is not
        # reused for another while this renderer lives.
        self._flows: dict[int, tuple[list[dict[str, Any]], str]] = {}

    def target(self, target: RolloutTarget, phase: str) -> str | None:
        """The message of `target` in `phase`; None once its state was pruned."""
        if target.state is None:
            return None
        return self.message(
            target.rollout,
            target.state,
            target.host_id,
            target.generation,
            phase,
            quiesce=target.quiesce,
            restores=target.restores,
        )

    def message(
        self,
        rollout: Rollout,
        state: DesiredStateBody,
        host_id: str,
        generation: int,
        phase: str,
        *,
        quiesce: list[dict[str, Any]] | None,
        restores: int | None,
    ) -> str:
        extra: dict[str, Any] = {}
        extra_key: tuple[Any, ...] = ()
        if phase == QUIESCE:
            extra = {"phase": QUIESCE, "quiesce": quiesce}
            extra_key = (QUIESCE, self._flows_key(quiesce))
        elif restores is not None:
            extra = {"phase": INSTALL, "restores": restores}
            extra_key = (INSTALL, restores)
        key = (rollout.id, rollout.traceparent, rollout.created_at, state.id, extra_key)
        template = self._templates.get(key)
        if template is None:
            body = self._bodies.get(state.id)
            if body is None:
                body = self._bodies[state.id] = json.loads(state.body)
            fields = {
                **envelope(host_id, generation, rollout.id, rollout.traceparent, rollout.created_at),
                **body,
                **extra,
            }
            template = self._templates[key] = _Template(DesiredState.model_validate(fields).dump())
        elif generation < 1:
            raise ValueError(f"generation {generation} of {host_id}: generations start at 1")
        else:
            _HOST_ID.validate_python(host_id)
        return template.render(host_id, generation)

    def _flows_key(self, flows: list[dict[str, Any]] | None) -> str:
        """The canonical JSON of a target's quiesce flows, written once per list object."""
        if flows is None:
            return "null"
        known = self._flows.get(id(flows))
        if known is None or known[0] is not flows:
            known = self._flows[id(flows)] = (flows, json.dumps(flows, sort_keys=True))
        return known[1]


# Stand-ins for a message's two per-host values while its template is written out: no content
# holds them (the controller refuses NUL characters in anything it ships).
_HOST_HOLE: Final = "\x00lachesis-host-id\x00"
_GENERATION_HOLE: Final = "\x00lachesis-generation\x00"


class _Template:
    """One message written out once, with holes where `host_id` and `generation` go: a host's
    message is the pieces and its two values, the same bytes as json.dumps of the whole
    message with them (a string or an integer is written the same inside a dict or alone),
    without writing the state out again per host."""

    def __init__(self, fields: dict[str, Any]) -> None:
        text = json.dumps({**fields, "host_id": _HOST_HOLE, "generation": _GENERATION_HOLE}, separators=(",", ":"))
        host_hole, generation_hole = json.dumps(_HOST_HOLE), json.dumps(_GENERATION_HOLE)
        head, host_tail = text.split(host_hole)
        self.host_first = generation_hole not in head
        if self.host_first:
            middle, tail = host_tail.split(generation_hole)
        else:
            head, middle = head.split(generation_hole)
            tail = host_tail
        self.pieces = (head, middle, tail)

    def render(self, host_id: str, generation: int) -> str:
        head, middle, tail = self.pieces
        first, second = json.dumps(host_id), json.dumps(generation)
        if not self.host_first:
            first, second = second, first
        return f"{head}{first}{middle}{second}{tail}"
