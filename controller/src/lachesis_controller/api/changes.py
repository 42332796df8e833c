"""What every change of intent does after its transaction: ship the new generations and
tell the client where the rollout is."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import Response

from lachesis_controller.bus.client import Bus, Publication


async def ship(bus: Bus, publications: Sequence[Publication], response: Response, rollout_id: str) -> None:
    # A failed publish is not the client's problem: the change is committed and the
    # reconciler delivers it when Redis is back. The rollout shows the progress.
    await bus.publish(publications, source="api")
    response.headers["Link"] = f'</api/v1/rollouts/{rollout_id}>; rel="rollout"'
