"""Ack handling cost on the controller's database: 100 acks of one rollout recorded one
transaction and one query round per ack (the baseline, as before batching) against one
`record_acks` call per batch (what the ack consumer does now). SQLite in a temporary
directory; medians of --runs runs; prints the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lachesis_controller.app import prepare_database
from lachesis_controller.bus.messages import Ack
from lachesis_controller.db import make_engine, make_sessionmaker, utcnow
from lachesis_controller.models import Host
from lachesis_controller.rollout import acks as rollout_acks
from lachesis_controller.rollout import engine as rollouts


def one_run(hosts: int, batched: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'l.db'}")
        prepare_database(engine)
        sessions = make_sessionmaker(engine)
        now = utcnow()
        ids = [f"host-{i:03d}" for i in range(hosts)]
        with sessions.begin() as session:
            for host_id in ids:
                session.add(
                    Host(
                        id=host_id,
                        agent_version="bench",
                        capabilities={},
                        enrolled_at=now,
                        registered_at=now,
                        last_seen=now,
                        desired_generation=0,
                        acked_generation=0,
                    )
                )
        with sessions.begin() as session:
            rollout, _ = rollouts.start_rollout(
                session, cause="bench", trigger="bench", host_ids=ids, now=now, timeout_s=30, traceparent=None
            )
            rollout_id = rollout.id
        acks = [
            Ack.model_validate(
                {
                    "schema": "lachesis.ack/v1",
                    "host_id": h,
                    "generation": 1,
                    "rollout_id": rollout_id,
                    "status": "applied",
                    "reason": None,
                    "rules_installed": 0,
                    "acked_at": "2026-11-22T01:00:00Z",
                    "traceparent": None,
                }
            )
            for h in ids
        ]
        started = time.perf_counter()
        if batched:
            with sessions.begin() as session:
                rollout_acks.record_acks(session, acks, utcnow())
        else:
            for ack in acks:
                with sessions.begin() as session:
                    rollout_acks.record_ack(session, ack, utcnow())
        elapsed = time.perf_counter() - started
        with sessions() as session:
            from lachesis_controller.models import Rollout

            assert session.get(Rollout, rollout_id).state == rollouts.SUCCEEDED
        engine.dispose()
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=100)
    args = parser.parse_args()
    per_ack, batch = [], []
    for run in range(args.runs):
        print(f"run {run + 1}/{args.runs}", file=sys.stderr, flush=True)
        per_ack.append(one_run(args.hosts, batched=False))
        batch.append(one_run(args.hosts, batched=True))
    a, b = statistics.median(per_ack) * 1000, statistics.median(batch) * 1000
    print(
        f"| {args.hosts} acks | one transaction per ack: {a:.0f} ms ({a / args.hosts:.1f} ms/ack) | "
        f"one per batch: {b:.0f} ms ({b / args.hosts:.2f} ms/ack) | {a / b:.1f}x |"
    )


if __name__ == "__main__":
    main()
