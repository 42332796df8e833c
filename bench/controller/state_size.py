"""Database size after N rollouts to M hosts, each rollout acked by every host: the
"246 MB after ~550 rollouts". Each rollout changes one of 20 tenants (50 classifiers each;
40 rules for all hosts), so every generation ships a different ~50 KB state. SQLite in a
temporary directory, measured after a WAL checkpoint.

  .lachesis/venv/bin/python bench/controller/state_size.py [--rollouts 550] [--hosts 3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from lachesis_controller.app import prepare_database
from lachesis_controller.bus.messages import Ack
from lachesis_controller.db import make_engine, make_sessionmaker, utcnow
from lachesis_controller.models import Host, Rule, Tenant
from lachesis_controller.rollout import acks as rollout_acks
from lachesis_controller.rollout import engine as rollouts

TENANTS, CLASSIFIERS, RULES = 20, 50, 40


def seed(sessions, hosts: int) -> None:  # type: ignore[no-untyped-def]
    now = utcnow()
    with sessions.begin() as session:
        for i in range(hosts):
            session.add(
                Host(
                    id=f"host-{i}",
                    agent_version="0.1",
                    capabilities={"devices": []},
                    enrolled_at=now,
                    registered_at=now,
                    last_seen=now,
                    desired_generation=0,
                    acked_generation=0,
                )
            )
        for t in range(TENANTS):
            session.add(
                Tenant(
                    name=f"t{t}",
                    description=None,
                    created_at=now,
                    updated_at=now,
                    classifiers=[{"kind": "path_prefix", "value": f"/srv/t{t}/{c}/"} for c in range(CLASSIFIERS)],
                )
            )
        session.flush()
        for r in range(RULES):
            session.add(
                Rule(
                    name=f"r{r}",
                    priority=r,
                    tenant=f"t{r % TENANTS}",
                    hosts=None,
                    created_at=now,
                    updated_at=now,
                    match={"tenant": f"t{r % TENANTS}", "ops": ["read"]},
                    detours=[{"what": "io", "to": {"kind": "file", "target": f"/srv/cold/{r}"}}],
                )
            )


def ack(publication: rollouts.Publication) -> Ack:
    return Ack.model_validate(
        {
            "schema": "lachesis.ack/v1",
            "host_id": publication.host_id,
            "generation": publication.generation,
            "rollout_id": json.loads(publication.message)["rollout_id"],
            "status": "applied",
            "reason": None,
            "rules_installed": RULES,
            "acked_at": "2026-11-24T22:00:00.000Z",
            "traceparent": None,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=550)
    parser.add_argument("--hosts", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "l.db"
        engine = make_engine(f"sqlite:///{path}")
        prepare_database(engine)
        sessions = make_sessionmaker(engine)
        seed(sessions, args.hosts)
        started = time.perf_counter()
        for n in range(args.rollouts):
            with sessions.begin() as session:
                tenant = session.get(Tenant, f"t{n % TENANTS}")
                assert tenant is not None
                tenant.classifiers = tenant.classifiers[1:] + [{"kind": "path_prefix", "value": f"/srv/new/{n}/"}]
                _, publications = rollouts.start_rollout(
                    session,
                    cause="bench",
                    trigger="tenant",
                    host_ids=rollouts.all_host_ids(session),
                    now=utcnow(),
                    timeout_s=30,
                    traceparent=None,
                )
            with sessions.begin() as session:
                rollout_acks.record_acks(session, [ack(p) for p in publications], utcnow())
        elapsed = time.perf_counter() - started
        with engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        engine.dispose()
        print(
            f"{args.rollouts} rollouts to {args.hosts} hosts, {len(publications[0].message)} bytes of state each: "
            f"database {os.path.getsize(path) / 1e6:.1f} MB, {elapsed / args.rollouts * 1e3:.0f} ms per rollout + acks"
        )


if __name__ == "__main__":
    main()
