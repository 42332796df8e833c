"""The verifier: each check has a rule set that must fail, through the function and through
the API (policies and plain rules), and refusals leave the database unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import TENANT, assert_problem, rule_body, snapshot
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from lachesis_controller.policy.verify import StageInfo, verify


def rule(name: str, priority: int = 10, hosts: list[str] | None = None, **match: Any) -> Any:
    def with_detours(*detours: tuple[str, str, str]) -> dict[str, Any]:
        return {
            "name": name,
            "priority": priority,
            "hosts": hosts,
            "match": match,
            "detours": [{"what": w, "to": {"kind": k, "target": t}} for w, k, t in detours],
        }

    return with_detours


STAGES = {
    "cache/a": StageInfo("cache/a", owner="a"),
    "cache/b": StageInfo("cache/b", owner="b", shared_with=("c",)),
    "cache/shared": StageInfo("cache/shared", owner=None),
    "replica/a": StageInfo("replica/a", owner="a", files=("/mnt/x", "/mnt/y")),
}


def checks(report_items: list[Any]) -> list[tuple[str, tuple[str, ...]]]:
    return [(f.check, f.rules) for f in report_items]


LOG = ("header", "file", "/var/log/lachesis/a.jsonl")


def test_header_only_write_detour_loses_writes() -> None:
    report = verify([rule("w", tenant="a", ops=["write"])(LOG)], STAGES)
    assert checks(report.errors) == [("write-loss", ("w",))]
    # Reads may be detoured as headers only: nothing is lost.
    assert verify([rule("r", tenant="a", ops=["read"])(LOG)], STAGES).errors == []
    # No ops given means every op, writes included.
    assert checks(verify([rule("any", tenant="a")(LOG)], STAGES).errors) == [("write-loss", ("any",))]
    # Asking the controller first holds the IO, which then goes to its original file: no loss.
    assert verify([rule("ask", tenant="a", ops=["write"])(("header", "controller", "approve"))], STAGES).errors == []
    # A header copy to the controller after the data's detours loses nothing either; before
    # nothing else, a copy is a hold.
    assert (
        verify(
            [rule("c", tenant="a", ops=["write"])(("io", "stage", "cache/a"), ("header", "controller", "readset"))],
            STAGES,
        ).errors
        == []
    )


def test_controller_detours_name_a_known_application_and_carry_headers() -> None:
    report = verify([rule("w", tenant="a", ops=["write"])(("header", "controller", "ctl"))], STAGES)
    assert checks(report.errors) == [("controller", ("w",))]
    assert "detours[0].to.target" in report.errors[0].message and "'ctl'" in report.errors[0].message
    report = verify([rule("w", tenant="a", ops=["read"])(("io", "controller", "approve"))], STAGES)
    assert checks(report.errors) == [("controller", ("w",))]


def test_headers_go_to_files_or_the_controller_not_to_stages() -> None:
    report = verify(
        [rule("h", tenant="a", ops=["read"])(("io", "stage", "cache/a"), ("header", "stage", "cache/a"))], STAGES
    )
    assert checks(report.errors) == [("header-target", ("h",))]
    assert "detours[1]" in report.errors[0].message and "'cache/a'" in report.errors[0].message
    # The same stage as an io detour, and headers to a file or the controller, are fine.
    assert (
        verify(
            [rule("h", tenant="a", ops=["read"])(("io", "stage", "cache/a"), LOG, ("header", "controller", "readset"))],
            STAGES,
        ).errors
        == []
    )


def test_writes_to_undeclared_stages_or_files_are_lost_in_strict_rules() -> None:
    rules = [
        rule("to-stage", tenant="a")(("io", "stage", "cache/nope")),
        rule("to-file", tenant="a", path_prefix="/p")(("io", "file", "/mnt/nope")),
        rule("fine", tenant="a", path_prefix="/q")(("io", "file", "/mnt/x")),
    ]
    report = verify(rules, STAGES, strict_targets=["to-stage", "to-file", "fine"])
    # Findings come in evaluation order: priority, then name.
    assert checks(report.errors) == [("write-loss", ("to-file",)), ("write-loss", ("to-stage",))]
    # Plain rules may name stages the agents provide themselves.
    assert verify(rules, STAGES).errors == []


def test_a_header_log_is_not_an_endpoint_in_strict_rules() -> None:
    # The header goes to a log file no stage declares; the data goes to a declared file.
    logged = rule("logged", tenant="a", path_prefix="/q")(
        ("io", "file", "/mnt/x"), ("header", "file", "/var/log/q.jsonl")
    )
    assert verify([logged], STAGES, strict_targets=["logged"]).errors == []


def test_detour_loops_are_refused() -> None:
    rules = [
        rule("a-to-b", path_prefix="/data/a")(("io", "file", "/data/b/f")),
        rule("b-to-a", path_prefix="/data/b")(("io", "file", "/data/a/f")),
        rule("c-to-d", path_prefix="/data/c")(("io", "file", "/data/d/f")),
    ]
    report = verify(rules, STAGES)
    assert checks(report.errors) == [("loop", ("a-to-b", "b-to-a"))]
    assert "a-to-b -> b-to-a -> a-to-b" in report.errors[0].message
    self_loop = verify([rule("self", path_prefix="/s")(("io", "file", "/s/x"))], STAGES)
    assert checks(self_loop.errors) == [("loop", ("self",))]


def test_paths_are_matched_by_component_as_the_switch_does() -> None:
    # /data never matches /database on an agent (agents/switch), so neither may the verifier:
    # a plain string prefix saw a loop here, and a shadowed rule below.
    to_database = verify([rule("data-to-database", path_prefix="/data")(("io", "file", "/database/f"))], STAGES)
    assert to_database.errors == []
    rules = [
        rule("data", priority=1, path_prefix="/data")(("io", "stage", "cache/shared")),
        rule("database", priority=2, path_prefix="/database")(("io", "stage", "cache/shared")),
        rule("data-sub", priority=3, path_prefix="/data/sub/")(("io", "stage", "cache/shared")),
    ]
    assert checks(verify(rules, STAGES).warnings) == [("shadowed", ("data-sub", "data"))]


def test_a_tenants_io_may_not_reach_another_tenants_stage() -> None:
    rules = [
        rule("b-into-a", tenant="b")(("io", "stage", "cache/a")),
        rule("all-into-a")(("io", "stage", "cache/a")),
        rule("c-into-b", tenant="c")(("io", "stage", "cache/b")),  # shared with c: fine
        rule("b-into-shared", tenant="b")(("io", "stage", "cache/shared")),  # no owner: fine
    ]
    assert checks(verify(rules, STAGES).errors) == [("isolation", ("all-into-a",)), ("isolation", ("b-into-a",))]


def test_shadowed_rules_are_warnings() -> None:
    rules = [
        rule("broad", priority=1, tenant="a")(("io", "stage", "cache/a")),
        rule("narrow", priority=5, tenant="a", ops=["read"], path_prefix="/x")(("io", "stage", "cache/a")),
        rule("other-tenant", priority=5, tenant="b", ops=["read"])(("io", "stage", "cache/b")),
        rule("same-priority-later-name", priority=1, tenant="a", hosts=["h1"])(("io", "stage", "cache/a")),
        rule("before-broad", priority=0, tenant="a", path_prefix="/y")(("io", "stage", "cache/a")),
    ]
    report = verify(rules, STAGES)
    assert report.errors == []
    assert checks(report.warnings) == [
        ("shadowed", ("same-priority-later-name", "broad")),
        ("shadowed", ("narrow", "broad")),
    ]


# --- through the API ----------------------------------------------------------------------

POLICY_HEAD = """\
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: p}
spec:
  tenants:
    - {name: a, classifiers: [{kind: uid, value: "1"}]}
    - {name: b, classifiers: [{kind: uid, value: "2"}]}
  stages:
    - {name: cache/a, kind: cache, owner: a, size_bytes: 1073741824}
    - {name: rep/a, kind: replica_set, owner: a, write_set: [/m/1, /m/2], read_set: [/m/1]}
  rules:
"""

UNSAFE = {
    "write-loss": "    - {name: bad, priority: 1, match: {tenant: a, ops: [write]},"
    " detours: [{what: header, to: {kind: stage, target: cache/a}}]}\n",
    # Stages take IO, not headers (the message names the detour).
    "header-target": "    - {name: bad, priority: 1, match: {tenant: a, ops: [read]},"
    " detours: [{what: header, to: {kind: stage, target: cache/a}}]}\n",
    # A controller application that does not exist (the message names the field).
    "controller": "    - {name: bad, priority: 1, match: {tenant: a, ops: [write]},"
    " detours: [{what: header, to: {kind: controller, target: ctl}}]}\n",
    "missing-stage": "    - {name: bad, priority: 1, match: {tenant: a},"
    " detours: [{what: io, to: {kind: stage, target: cache/gone}}]}\n",
    "loop": "    - {name: bad, priority: 1, match: {path_prefix: /m/1}, detours: [{what: io, to: {kind: file, target: /m/2}}]}\n"
    "    - {name: bad2, priority: 2, match: {path_prefix: /m/2}, detours: [{what: io, to: {kind: file, target: /m/1}}]}\n",
    "isolation": "    - {name: bad, priority: 1, match: {tenant: b}, detours: [{what: io, to: {kind: stage, target: cache/a}}]}\n",
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_policies_are_refused_naming_the_rules(client: TestClient, db: Engine, case: str) -> None:
    before = snapshot(db)
    response = client.post(
        "/api/v1/policies",
        content=(POLICY_HEAD + UNSAFE[case]).encode(),
        headers={"content-type": "application/yaml"},
    )
    body = assert_problem(response, 422)
    assert body["type"].endswith("/unsafe-rules")
    assert "bad" in body["violations"][0]["rules"]
    assert body["violations"][0]["check"] == ("write-loss" if case == "missing-stage" else case)
    if case == "controller":
        assert "detours[0].to.target" in body["errors"][0]["message"], body
    if case == "header-target":
        assert "detours[0]" in body["errors"][0]["message"], body
    # The offending rule's name in the document: line 12, "    - {name" puts it at column 8.
    assert body["errors"][0]["line"] == 12 and body["errors"][0]["column"] == 8
    assert snapshot(db) == before
    dry = client.post(
        "/api/v1/policies?dry_run=true",
        content=(POLICY_HEAD + UNSAFE[case]).encode(),
        headers={"content-type": "application/yaml"},
    )
    assert_problem(dry, 422)


def test_policy_warnings_come_back_on_dry_run_and_apply(client: TestClient) -> None:
    text = POLICY_HEAD + (
        "    - {name: first, priority: 1, match: {tenant: a}, detours: [{what: io, to: {kind: stage, target: cache/a}}]}\n"
        "    - {name: second, priority: 2, match: {tenant: a, ops: [read]}, detours: [{what: io, to: {kind: stage, target: cache/a}}]}\n"
    )
    for suffix, status in (("?dry_run=true", 200), ("", 201)):
        response = client.post(
            f"/api/v1/policies{suffix}", content=text.encode(), headers={"content-type": "application/yaml"}
        )
        assert response.status_code == status, response.text
        assert [(w["check"], w["rules"]) for w in response.json()["warnings"]] == [("shadowed", ["second", "first"])]


def test_plain_rules_are_verified_too(client: TestClient, db: Engine) -> None:
    assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
    before = snapshot(db)
    header_only = rule_body(
        "w",
        match={"tenant": "web", "ops": ["write"]},
        detours=[{"what": "header", "to": {"kind": "file", "target": "/var/log/w.jsonl"}}],
    )
    body = assert_problem(client.post("/api/v1/rules", json=header_only), 422)
    assert body["violations"] == [{"check": "write-loss", "rules": ["w"], "message": body["violations"][0]["message"]}]
    loop_a = rule_body(
        "la", match={"path_prefix": "/a"}, detours=[{"what": "io", "to": {"kind": "file", "target": "/b/x"}}]
    )
    loop_b = rule_body(
        "lb", match={"path_prefix": "/b"}, detours=[{"what": "io", "to": {"kind": "file", "target": "/a/x"}}]
    )
    assert client.post("/api/v1/rules", json=loop_a).status_code == 201
    mid = snapshot(db)
    body = assert_problem(client.post("/api/v1/rules", json=loop_b), 422)
    assert body["violations"][0]["check"] == "loop"
    assert snapshot(db) == mid
    # A replace that would make the loop is refused the same way.
    assert (
        client.post(
            "/api/v1/rules", json={**loop_b, "detours": [{"what": "io", "to": {"kind": "file", "target": "/c"}}]}
        ).status_code
        == 201
    )
    assert_problem(client.put("/api/v1/rules/lb", json=loop_b), 422)
    assert before != mid
