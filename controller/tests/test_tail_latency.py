"""Tail-latency routing in the controller, without agents: the decision (α, hysteresis,
reclaim done by the log's counts), what the stage contract ships while forwarding and
reclaiming, and the REST view with its problem+json for a tenant without such a stage."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import FakeAgent, enroll, wait_until
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.app import create_app
from lachesis_controller.bus.agent_telemetry import TelemetryStore
from lachesis_controller.bus.messages import DesiredState, Telemetry
from lachesis_controller.config import Settings
from lachesis_controller.db import make_engine, make_sessionmaker, utcnow
from lachesis_controller.models import Rollout, TailLatencyState
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.stages import forwarding
from lachesis_controller.stages.forwarding import Forwarding
from lachesis_controller.stages.resolve import HostView, shipped_rules, shipped_stages
from lachesis_controller.tail_latency.decide import (
    ENTER_REPORTS,
    FORWARDING,
    NORMAL,
    RECLAIMING,
    RECOVER_REPORTS,
    WINDOW,
    EndpointReport,
    LogReport,
    StageState,
    step,
)
from lachesis_controller.tail_latency.loop import TailLatency, step_all

E, F, G = "tcp://10.0.0.1:7070/db", "tcp://10.0.0.2:7070/spill", "tcp://10.0.0.3:7070/spill"
STAGE = {
    "name": "route/db",
    "kind": "tail_latency",
    "owner": "db",
    "servers": [E, F, G],
    "alpha": 3.0,
    "reclaim_bytes_per_s": 1 << 20,
    "enter_reports": 1,
}


def report(n: int, recent: float, mean: float = 100.0) -> EndpointReport:
    return EndpointReport(n, recent, mean, recent > 2 * mean)


def test_slow_forwards_to_the_least_loaded_server_and_recovery_reclaims_with_hysteresis() -> None:
    st = StageState("route/db", "db", E)
    others = {"10.0.0.2:7070": report(50, 900.0), "10.0.0.3:7070": report(50, 120.0)}
    # Too few requests for a full window: no decision, however slow.
    assert not step(st, STAGE, {"10.0.0.1:7070": report(WINDOW - 1, 10_000.0), **others}, None)
    # α = 3: 250 us over a 100 us mean is not slow enough; 400 is.
    assert not step(st, STAGE, {"10.0.0.1:7070": report(WINDOW + 10, 250.0), **others}, None)
    assert step(st, STAGE, {"10.0.0.1:7070": report(WINDOW + 20, 400.0), **others}, None)
    assert (st.state, st.forwarded_to, st.baseline_us, st.forwards) == (FORWARDING, G, 100.0, 1)
    assert st.forwarding(1 << 20) == Forwarding(G, None)
    # A repeated report (no new requests) changes nothing.
    assert not step(st, STAGE, {"10.0.0.1:7070": report(WINDOW + 20, 10.0)}, None)
    # Recovery needs recent <= (1 + (3-1)/2) x 100 = 200 us in RECOVER_REPORTS reports in a row;
    # one above it starts the count again.
    n = WINDOW + 20
    for recent in [150.0] * (RECOVER_REPORTS - 1) + [250.0] + [190.0] * (RECOVER_REPORTS - 1):
        n += 1
        assert not step(st, STAGE, {"10.0.0.1:7070": report(n, recent, 120.0)}, LogReport(8192, 8192, 0))
    assert st.state == FORWARDING
    assert step(st, STAGE, {"10.0.0.1:7070": report(n + 1, 190.0, 120.0)}, LogReport(8192, 8192, 0))
    assert (st.state, st.reclaims) == (RECLAIMING, 1)
    assert st.forwarding(1 << 20) == Forwarding(G, 1 << 20)
    # Still holding data: reclaiming goes on; slow again (above α x baseline): forward again.
    assert not step(st, STAGE, {"10.0.0.1:7070": report(n + 2, 190.0)}, LogReport(8192, 4096, 4096))
    assert step(st, STAGE, {"10.0.0.1:7070": report(n + 3, 350.0)}, LogReport(8192, 4096, 4096))
    assert st.state == FORWARDING and st.forwarding(1) == Forwarding(G, None)
    for i in range(RECOVER_REPORTS):
        step(st, STAGE, {"10.0.0.1:7070": report(n + 4 + i, 100.0)}, LogReport(8192, 4096, 4096))
    assert st.state == RECLAIMING
    # The log holds nothing any more: back to normal, the log leaves the route.
    assert step(st, STAGE, {"10.0.0.1:7070": report(n + 9, 100.0)}, LogReport(8192, 0, 8192))
    assert (st.state, st.forwarded_to, st.forwarding(1)) == (NORMAL, None, None)
    assert st.history == [f"forward to {G}", "reclaim", "slow again: forward", "reclaim", "reclaimed"]


def test_the_contract_puts_a_remote_log_before_the_endpoint_while_forwarding() -> None:
    host = HostView("host-a")
    rule = {
        "name": "db-io",
        "priority": 10,
        "match": {"tenant": "db"},
        "detours": [{"what": "io", "to": {"kind": "stage", "target": "route/db"}}],
    }
    declared = {"route/db": STAGE}

    def ship(fwd: dict[str, Forwarding] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        stages = shipped_stages([STAGE], host, None, forwarding=fwd)
        rules = shipped_rules([rule], declared, [s["name"] for s in stages], "host-a")
        DesiredState.model_validate(
            {
                "schema": "lachesis.desired-state/v1",
                "host_id": "host-a",
                "generation": 1,
                "rollout_id": None,
                "issued_at": "2026-11-24T10:00:00.000Z",
                "traceparent": None,
                "tenants": [],
                "rules": rules,
                **({"stages": stages} if stages else {}),
            }
        )
        return stages, rules

    stages, rules = ship(None)
    assert stages == [] and [d["to"]["target"] for d in rules[0]["detours"]] == [E]
    stages, rules = ship({"route/db": Forwarding(G)})
    assert stages == [
        {
            "kind": "log",
            "name": "fwd/route/db",
            "owner": "db",
            "dir": "/lachesis-forward/route-db",
            "remote": "tcp://10.0.0.3:7070",
        }
    ]
    assert [d["to"]["target"] for d in rules[0]["detours"]] == ["fwd/route/db", E]
    stages, rules = ship({"route/db": Forwarding(G, 1 << 20)})
    assert stages[0]["reclaim_bytes_per_s"] == 1 << 20
    # Local candidates keep spreading reads as before.
    local = {"name": "route/l", "kind": "tail_latency", "candidates": ["/x", "/y"], "hedge_after_ms": 5}
    rules = shipped_rules(
        [{**rule, "detours": [{"what": "io", "to": {"kind": "stage", "target": "route/l"}}]}],
        {"route/l": local},
        [],
        "host-a",
    )
    assert [d["to"]["target"] for d in rules[0]["detours"]] == ["/x", "/y"]


def telemetry(
    host: str, at: str, endpoints: list[dict[str, Any]], stages: list[dict[str, Any]] | None = None
) -> Telemetry:
    return Telemetry.model_validate(
        {
            "schema": "lachesis.telemetry/v1",
            "host_id": host,
            "sent_at": at,
            "interval_s": 1.0,
            "tenants": [],
            "devices": [],
            "endpoints": endpoints,
            **({"stages": stages} if stages is not None else {}),
        }
    )


def endpoint(addr: str, n: int, recent: float, mean: float = 100.0) -> dict[str, Any]:
    return {"addr": addr, "requests": n, "recent_us": recent, "mean_us": mean, "slow": recent > 2 * mean}


def test_entry_needs_enter_reports_slow_reports_in_a_row() -> None:
    """A slow window for one report (noise on a shared host) does not forward; the stage's
    enter_reports slow reports in a row do, with the mean at the first of them as baseline."""
    stage = {k: v for k, v in STAGE.items() if k != "enter_reports"}
    st = StageState("route/db", "db", E)
    n = WINDOW
    steps = []
    # Default 2: slow, fast (the count starts again), slow, a repeated report (not new: not
    # counted), then slow again: forwards on that one.
    for recent, new in ((400.0, 1), (150.0, 1), (400.0, 1), (400.0, 0), (500.0, 1)):
        n += new
        steps.append(step(st, stage, {"10.0.0.1:7070": report(n, recent, 100.0 + (n - WINDOW))}, None))
    assert ENTER_REPORTS == 2
    assert steps == [False, False, False, False, True]
    assert (st.state, st.forwards, st.forwarded_to, st.baseline_us) == (FORWARDING, 1, F, 103.0)
    # enter_reports 4: three slow reports are not enough, the fourth is; a mean that rises with
    # the slow requests does not lift the bar (α × the first one's mean).
    st = StageState("route/db", "db", E)
    stage4 = {**stage, "enter_reports": 4}
    got = [step(st, stage4, {"10.0.0.1:7070": report(WINDOW + i, 350.0, 100.0 + 20 * i)}, None) for i in range(4)]
    assert got == [False, False, False, True] and st.baseline_us == 100.0 and st.history == [f"forward to {F}"]
    # Reclaiming: back to forwarding on the same count (one slow window of the copy-back's own
    # writes is not enough; a report that is not slow starts the count again).
    st.state, n = RECLAIMING, WINDOW + 10
    got = []
    for recent in (350.0, 200.0, 350.0, 350.0, 350.0, 350.0):
        n += 1
        got.append(step(st, stage4, {"10.0.0.1:7070": report(n, recent)}, LogReport(8192, 4096, 4096)))
    assert got == [False, False, False, False, False, True] and st.state == FORWARDING
    assert st.history[-1] == "slow again: forward"


def test_a_bad_enter_reports_is_refused_with_its_line_and_field(client: TestClient) -> None:
    for bad in ("0", "101", "two"):
        r = client.post(
            "/api/v1/policies",
            content=tail_policy(f", enter_reports: {bad}"),
            headers={"content-type": "application/yaml"},
        )
        assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json"), r.text
        (e,) = r.json()["errors"]
        assert (e["field"], e["line"]) == ("spec.stages[0].enter_reports", 8), e
    assert client.get("/api/v1/policies").json() == []
    assert (
        client.post(
            "/api/v1/policies", content=tail_policy(", enter_reports: 3"), headers={"content-type": "application/yaml"}
        ).status_code
        == 201
    )


@pytest.fixture
def sessions(settings: Settings) -> Iterator[sessionmaker[Session]]:
    """The controller's database (migrated), without a controller."""
    engine = make_engine(settings.database_url)
    yield make_sessionmaker(engine)
    engine.dispose()


def test_the_loop_steps_on_telemetry_and_puts_the_forwarding(sessions: sessionmaker[Session]) -> None:
    store, app = TelemetryStore(), TailLatency()
    store.ingest(telemetry("host-a", "2026-11-24T10:00:01Z", [endpoint("10.0.0.1:7070", 64, 900.0)]))
    with sessions.begin() as s:
        assert step_all(app, {"route/db": STAGE}, store, s, utcnow()) == ["route/db"]
        assert forwarding.current(s) == {"route/db": Forwarding(F)}
        # The stage goes away: its forwarding goes with it.
        assert step_all(app, {}, store, s, utcnow()) == []
        assert forwarding.current(s) == {} and app.states == {}


def tail_policy(more: str = "") -> str:
    """route/db over E and F with α 2.5 (`more`: further fields of the stage)."""
    return f"""
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {{name: tail}}
spec:
  tenants: [{{name: db, classifiers: [{{kind: uid, value: "1000"}}]}}]
  stages:
    - {{name: route/db, kind: tail_latency, owner: db, servers: ["{E}", "{F}"], alpha: 2.5{more}}}
  rules:
    - {{name: db-io, priority: 10, match: {{tenant: db}}, detours: [{{what: io, to: {{kind: stage, target: route/db}}}}]}}
"""


def test_rest_shows_each_stage_and_refuses_an_unknown_tenant(client: Any) -> None:
    policy = tail_policy()
    applied = client.post("/api/v1/policies", content=policy, headers={"content-type": "application/yaml"})
    assert applied.status_code == 201, applied.text
    (s,) = client.get("/api/v1/apps/tail-latency").json()["stages"]
    assert (s["stage"], s["tenant"], s["endpoint"], s["alpha"], s["state"], s["forwards"]) == (
        "route/db",
        "db",
        E,
        2.5,
        "normal",
        0,
    )
    assert s["requests"] is None and s["reclaim_progress"] is None
    store, app = client.app.state.telemetry, client.app.state.tail_latency
    store.ingest(telemetry("host-a", "2026-11-24T10:00:01Z", [endpoint("10.0.0.1:7070", 64, 900.0)]))
    with client.app.state.sessions.begin() as session:
        step_all(app, {"route/db": {**STAGE, "servers": [E, F], "alpha": 2.5}}, store, session, utcnow())
    store.ingest(
        telemetry(
            "host-a",
            "2026-11-24T10:00:02Z",
            [endpoint("10.0.0.1:7070", 65, 900.0)],
            [
                {
                    "name": "fwd/route/db",
                    "kind": "log",
                    "owner": "db",
                    "bytes_written": 12288,
                    "dirty_bytes": 4096,
                    "reclaimed_bytes": 8192,
                }
            ],
        )
    )
    with client.app.state.sessions.begin() as session:
        step_all(app, {"route/db": {**STAGE, "servers": [E, F], "alpha": 2.5}}, store, session, utcnow())
    (s,) = client.get("/api/v1/apps/tail-latency", params={"tenant": "db"}).json()["stages"]
    assert (s["state"], s["forwarded_to"], s["forwards"], s["requests"], s["slow"]) == ("forwarding", F, 1, 65, True)
    assert (s["forwarded_bytes"], s["held_bytes"], s["reclaimed_bytes"]) == (12288, 4096, 8192)
    assert s["reclaim_progress"] == pytest.approx(8192 / 12288)
    r = client.get("/api/v1/apps/tail-latency", params={"tenant": "nobody"})
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")
    assert "nobody" in r.json()["detail"]
    bad = policy.replace(f'servers: ["{E}", "{F}"]', f'servers: ["{E}"]')
    r = client.post(
        "/api/v1/policies",
        content=bad.replace("name: tail", "name: tail2"),
        headers={"content-type": "application/yaml"},
    )
    assert r.status_code == 422 and "at least 2" in r.text


def test_a_restarted_controller_ships_the_same_forwarding_and_resumes_a_paced_reclaim(
    settings: Settings,
    agents: Callable[[str], FakeAgent],
    sessions: sessionmaker[Session],
) -> None:
    policy = tail_policy(f", reclaim_bytes_per_s: {1 << 20}, enter_reports: 1")
    log_stage = {
        "kind": "log",
        "name": "fwd/route/db",
        "owner": "db",
        "dir": "/lachesis-forward/route-db",
        "remote": "tcp://10.0.0.2:7070",
    }

    def shipped() -> list[dict[str, Any]]:
        with sessions.begin() as s:
            return rollouts.desired_body(s, "host-a").get("stages", [])

    def view(client: TestClient) -> dict[str, Any]:
        (s,) = client.get("/api/v1/apps/tail-latency").json()["stages"]
        return s

    n = 0

    def report(client: TestClient, recent: float, held: int | None = None, step: bool = True) -> None:
        # Each report one more request of E: a new report for the decision.
        nonlocal n
        n += 1
        log = (
            []
            if held is None
            else [
                {
                    "name": "fwd/route/db",
                    "kind": "log",
                    "owner": "db",
                    "bytes_written": 8192,
                    "dirty_bytes": held,
                    "reclaimed_bytes": 8192 - held,
                }
            ]
        )
        client.app.state.telemetry.ingest(
            telemetry(
                "host-a", f"2026-11-24T10:{n // 60:02d}:{n % 60:02d}Z", [endpoint("10.0.0.1:7070", 64 + n, recent)], log
            )
        )
        # The loop steps on the latest report only: one at a time.
        if step:
            wait_until(lambda: view(client)["requests"] == 64 + n, what=f"the loop to take report {n}")

    with TestClient(create_app(settings)) as client:
        enroll(client, agents("host-a"))
        assert (
            client.post("/api/v1/policies", content=policy, headers={"content-type": "application/yaml"}).status_code
            == 201
        )
        report(client, 900.0)
        wait_until(lambda: view(client)["state"] == "forwarding", what="the loop to forward")
        assert shipped() == [log_stage]
        with sessions.begin() as s:
            (row,) = s.scalars(select(TailLatencyState)).all()
            began = row.since_rollout
            assert (row.state, row.forwarded_to, row.reclaim_bytes_per_s) == ("forwarding", F, None)
            assert s.get(Rollout, began) is not None

    # A new controller on the same database: it ships the same forwarding (a rollout of
    # anything else would otherwise take the log out and the agent write it back unpaced),
    # and its loop resumes the decision, counted on from the reports that come in now.
    with TestClient(create_app(settings)) as client:
        assert shipped() == [log_stage]
        # A replica that does not lead (its loop's memory not current) shows the stored
        # decision, with the reports it read itself.
        leadership = client.app.state.leadership
        client.app.state.leadership = SimpleNamespace(leading=False)
        report(client, 900.0, held=8192, step=False)
        s = view(client)
        assert (s["state"], s["forwarded_to"], s["forwards"], s["requests"], s["held_bytes"]) == (
            "forwarding",
            F,
            1,
            64 + n,
            8192,
        )
        client.app.state.leadership = leadership
        wait_until(lambda: view(client)["forwarded_to"] == F, what="the loop to resume")
        s = view(client)
        assert (s["state"], s["forwards"], s["reclaims"], s["baseline_us"]) == ("forwarding", 1, 0, 100.0)
        for _ in range(RECOVER_REPORTS):
            report(client, 100.0, held=8192)
        wait_until(lambda: view(client)["state"] == "reclaiming", what="the loop to reclaim")
        assert shipped() == [{**log_stage, "reclaim_bytes_per_s": 1 << 20}]

    # Restarted while reclaiming: the reclaim goes on at its rate, from the same log; once the
    # log holds nothing the log leaves the route.
    with TestClient(create_app(settings)) as client:
        assert shipped() == [{**log_stage, "reclaim_bytes_per_s": 1 << 20}]
        wait_until(lambda: view(client)["state"] == "reclaiming", what="the loop to resume")
        report(client, 100.0, held=0)
        wait_until(lambda: view(client)["state"] == "normal", what="the reclaim to end")
        assert shipped() == []
        s = view(client)
        assert (s["forwards"], s["reclaims"], s["forwarded_to"]) == (1, 1, None)
        with sessions.begin() as ses:
            (row,) = ses.scalars(select(TailLatencyState)).all()
            assert (row.state, row.forwarded_to, row.since_rollout) == ("normal", None, None)
