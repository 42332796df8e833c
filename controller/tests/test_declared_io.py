"""Declared maintenance IO (/api/v1/apps/declared-io) with a real redis-server: a job goes
to its host's declared-io key, the agent's reports move it to running and done (checksums
kept, the job leaves the key), changes and cancels reach the key, bad declarations are
refused and change nothing, and a recurring scrub stage declares its jobs."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import TENANT, FakeAgent, assert_problem, enroll, snapshot, wait_until
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from lachesis_controller.bus.messages import Telemetry, TelemetryDeclaredJob
from lachesis_controller.declared_io.jobs import apply_report, mark_missed
from lachesis_controller.declared_io.loop import declare_due_scrubs
from lachesis_controller.declared_io.messages import DeclaredIo
from lachesis_controller.models import DeclaredJob

URL = "/api/v1/apps/declared-io"


@pytest.fixture
def host(client: TestClient, agents: Callable[[str], FakeAgent]) -> FakeAgent:
    assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
    agent = agents("host-a")
    enroll(client, agent)
    return agent


def later(seconds: float = 3600) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def job_body(**overrides: Any) -> dict[str, Any]:
    return {
        "id": "scrub-1",
        "host": "host-a",
        "tenant": TENANT["name"],
        "deadline": later(),
        "files": [{"path": "/mnt/data/a"}, {"path": "/mnt/data/b", "offset": 4096, "length": 65536}],
        **overrides,
    }


def key_jobs(agent: FakeAgent) -> dict[str, dict[str, Any]]:
    text = agent.redis.get("lachesis:agent:host-a:declared-io")
    if text is None:
        return {}
    msg = DeclaredIo.model_validate(json.loads(text))
    assert msg.host_id == "host-a"
    return {j.id: j.dump() for j in msg.jobs}


def report(client: TestClient, at: str, *jobs: dict[str, Any]) -> None:
    client.app.state.telemetry.ingest(
        Telemetry.model_validate(
            {  # type: ignore[attr-defined]
                "schema": "lachesis.telemetry/v1",
                "host_id": "host-a",
                "sent_at": at,
                "interval_s": 1.0,
                "tenants": [],
                "devices": [],
                "declared_io": list(jobs),
            }
        )
    )


def progress(job_id: str, state: str, dispatched: int, foreground: int, **more: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "state": state,
        "bytes_declared": 3 << 20,
        "dispatched_bytes": dispatched,
        "foreground_bytes": foreground,
        "shared_bytes": 0,
        "error": None,
        **more,
    }


def now_z() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_job_reaches_its_host_and_the_agents_reports_complete_it(client: TestClient, host: FakeAgent) -> None:
    created = client.post(URL, json=job_body())
    assert created.status_code == 201, created.text
    assert created.headers["location"] == f"{URL}/scrub-1"
    assert created.json()["state"] == "pending"
    shipped = key_jobs(host)["scrub-1"]
    assert shipped["files"] == [
        {"path": "/mnt/data/a", "offset": 0, "length": None},
        {"path": "/mnt/data/b", "offset": 4096, "length": 65536},
    ]
    assert (shipped["pace"], shipped["paused"], shipped["tenant"]) == ("deadline", False, TENANT["name"])

    report(client, now_z(), progress("scrub-1", "running", 1 << 20, 1 << 20))
    running = wait_until(
        lambda: (j := client.get(f"{URL}/scrub-1").json())["state"] == "running" and j, what="the job running"
    )
    assert (running["dispatched_bytes"], running["foreground_bytes"], running["covered_bytes"]) == (
        1 << 20,
        1 << 20,
        2 << 20,
    )

    checksums = [
        {"path": "/mnt/data/a", "offset": 0, "length": (3 << 20) - 65536, "crc32": 1},
        {"path": "/mnt/data/b", "offset": 4096, "length": 65536, "crc32": 2},
    ]
    report(client, now_z(), progress("scrub-1", "done", 1 << 20, 2 << 20, files=checksums))
    done = wait_until(lambda: (j := client.get(f"{URL}/scrub-1").json())["state"] == "done" and j, what="done")
    assert done["covered_bytes"] == done["bytes_declared"] == 3 << 20
    assert done["checksums"] == checksums and done["finished_at"] is not None
    wait_until(lambda: "scrub-1" not in key_jobs(host), what="the job to leave the host's key")
    assert [j["id"] for j in client.get(URL).json()] == ["scrub-1"]
    assert_problem(client.delete(f"{URL}/scrub-1"), 409)


def test_pause_and_cancel_reach_the_key(client: TestClient, host: FakeAgent) -> None:
    assert client.post(URL, json=job_body()).status_code == 201
    assert client.post(URL, json=job_body(id="backup-1", pace="budget")).status_code == 201
    changed = client.patch(f"{URL}/scrub-1", json={"paused": True, "rate_bytes_per_s": 1 << 20})
    assert changed.status_code == 200, changed.text
    jobs = key_jobs(host)
    assert (jobs["scrub-1"]["paused"], jobs["scrub-1"]["rate_bytes_per_s"]) == (True, 1 << 20)
    assert jobs["backup-1"]["pace"] == "budget"
    cancelled = client.delete(f"{URL}/scrub-1")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert set(key_jobs(host)) == {"backup-1"}
    assert_problem(client.patch(f"{URL}/scrub-1", json={"paused": False}), 409)
    assert_problem(client.get(f"{URL}/nope"), 404)
    # A report about a cancelled job changes nothing.
    report(client, now_z(), progress("scrub-1", "done", 3 << 20, 0))
    assert client.get(f"{URL}/scrub-1").json()["state"] == "cancelled"


def test_bad_declarations_are_refused_and_change_nothing(client: TestClient, host: FakeAgent, db: Engine) -> None:
    assert client.post(URL, json=job_body()).status_code == 201
    before, key_before = snapshot(db), key_jobs(host)
    cases: list[tuple[dict[str, Any], int, str]] = [
        (job_body(), 409, "id"),
        (job_body(id="x", host="nowhere"), 422, "host"),
        (job_body(id="x", tenant="nobody"), 422, "tenant"),
        (job_body(id="x", deadline=later(-60)), 422, "deadline"),
        (job_body(id="x", deadline="2030-01-01T00:00:00"), 422, "deadline"),
        (job_body(id="x", files=[]), 422, "files"),
        (job_body(id="x", files=[{"path": "relative/a"}]), 422, "files"),
        (job_body(id="x", files=[{"path": "/mnt/a", "length": 0}]), 422, "files"),
        (job_body(id="x", pace="asap"), 422, "pace"),
        (job_body(id="Bad Id"), 422, "id"),
    ]
    for body, status, field in cases:
        problem = assert_problem(client.post(URL, json=body), status)
        assert field in json.dumps(problem), (body, problem)
    assert_problem(client.patch(f"{URL}/scrub-1", json={"pace": "later"}), 422)
    assert snapshot(db) == before
    assert key_jobs(host) == key_before


def test_done_before_the_deadline_is_done_after_it_missed_and_failures_say_why() -> None:
    now = datetime.now(UTC)

    def job(deadline: datetime) -> DeclaredJob:
        return DeclaredJob(
            id="j",
            host_id="h",
            tenant="t",
            files=[],
            deadline=deadline,
            pace="deadline",
            paused=False,
            state="running",
            dispatched_bytes=0,
            foreground_bytes=0,
            shared_bytes=0,
        )

    def rep(state: str, error: str | None = None) -> TelemetryDeclaredJob:
        return TelemetryDeclaredJob.model_validate(
            {
                "id": "j",
                "state": state,
                "bytes_declared": 10,
                "dispatched_bytes": 4,
                "foreground_bytes": 6,
                "shared_bytes": 0,
                "error": error,
                **({"files": []} if state == "done" else {}),
            }
        )

    on_time = job(now + timedelta(seconds=10))
    assert apply_report(on_time, rep("done"), now) and on_time.state == "done"
    late = job(now - timedelta(seconds=10))
    assert mark_missed(late, now) and late.state == "missed" and late.finished_at is None
    assert not apply_report(late, rep("running"), now) and late.state == "missed"
    assert apply_report(late, rep("done"), now) and (late.state, late.finished_at) == ("missed", now)
    reported_late = job(now - timedelta(seconds=1))
    assert apply_report(reported_late, rep("done"), now) and reported_late.state == "missed"
    failed = job(now + timedelta(seconds=10))
    assert apply_report(failed, rep("failed", "/x: under no mount"), now)
    assert (failed.state, failed.error) == ("failed", "/x: under no mount")


def test_a_scrub_stage_in_a_policy_declares_a_job_on_every_host(client: TestClient, host: FakeAgent) -> None:
    policy = (Path(__file__).parents[2] / "policies" / "examples" / "declared-scrub.yaml").read_bytes()
    applied = client.post("/api/v1/policies", content=policy, headers={"content-type": "application/yaml"})
    assert applied.status_code == 201, applied.text
    jobs = wait_until(lambda: client.get(URL, params={"host": "host-a"}).json(), what="the scrub's job")
    (job,) = jobs
    assert (job["source"], job["tenant"], job["state"]) == ("scrub/archive", "archive", "pending")
    assert [f["path"] for f in job["files"]] == ["/archive"]
    assert job["id"] in wait_until(lambda: key_jobs(host), what="the job in the host's key")
    # No second job while the first is open.
    report(client, now_z(), progress(job["id"], "running", 0, 0))
    wait_until(lambda: client.get(f"{URL}/{job['id']}").json()["state"] == "running", what="running")
    assert len(client.get(URL).json()) == 1


def test_the_loop_rewrites_a_key_redis_lost(client: TestClient, host: FakeAgent) -> None:
    assert client.post(URL, json=job_body()).status_code == 201
    version = json.loads(host.redis.get("lachesis:agent:host-a:declared-io"))["version"]
    host.redis.delete("lachesis:agent:host-a:declared-io")
    wait_until(lambda: "scrub-1" in key_jobs(host), what="the loop to rewrite the key")
    assert json.loads(host.redis.get("lachesis:agent:host-a:declared-io"))["version"] >= version


SCRUBS = """\
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: scrubs}
spec:
  tenants: [{name: archive, classifiers: [{kind: path_prefix, value: /archive/}]}]
  stages:
    - {name: scrub/here, kind: scrub, owner: archive, paths: [/archive], every_s: 600, window_s: 120,
       pace: budget, rate_bytes_per_s: 1048576, hosts: [host-a]}
    - {name: scrub/there, kind: scrub, owner: archive, paths: [/archive], every_s: 600, hosts: [host-b]}
"""


def test_a_scrubs_every_s_window_s_rate_and_hosts_shape_its_jobs(
    client: TestClient,
    host: FakeAgent,
    agents: Callable[[str], FakeAgent],
    db: Engine,
) -> None:
    """The controller alone decides when a scrub's jobs are declared and by when they are due
    (the agent runs the job it is given): the clock here is the test's, passed to the loop's
    step, so `every_s` is shown to the second without waiting for it."""
    enroll(client, agents("host-b"))
    applied = client.post("/api/v1/policies", content=SCRUBS.encode(), headers={"content-type": "application/yaml"})
    assert applied.status_code == 201, applied.text
    jobs = wait_until(lambda: len(j := client.get(URL).json()) == 2 and j, what="one job per scrub")
    by_source = {j["source"]: j for j in jobs}
    here, there = by_source["scrub/here"], by_source["scrub/there"]
    assert (here["host"], there["host"]) == ("host-a", "host-b")  # hosts
    assert (here["pace"], here["rate_bytes_per_s"]) == ("budget", 1 << 20)  # shipped as the agent's cap
    assert key_jobs(host).keys() == {here["id"]}  # host-a's key holds its own scrub's job only
    with Session(db) as s:
        first = s.get(DeclaredJob, here["id"])
        assert first is not None
        declared_at = first.created_at
        assert first.deadline - declared_at == timedelta(seconds=120)  # window_s, not every_s
    report(client, now_z(), progress(here["id"], "done", 1 << 20, 0))
    wait_until(lambda: client.get(f"{URL}/{here['id']}").json()["state"] == "done", what="done")
    with Session(db) as s:
        # every_s after the last declaration, not a second before.
        assert declare_due_scrubs(s, declared_at + timedelta(seconds=599)) == set()
        assert declare_due_scrubs(s, declared_at + timedelta(seconds=600)) == {"host-a"}
        s.commit()
        made = s.scalars(
            select(DeclaredJob).where(DeclaredJob.source == "scrub/here").order_by(DeclaredJob.created_at)
        ).all()
    assert [j.id.rsplit("-", 1)[1] for j in made] == ["1", "2"]
    assert made[1].deadline - made[1].created_at == timedelta(seconds=120)
