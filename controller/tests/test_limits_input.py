"""Input bounds and meaning: counts and sizes, NUL and control characters, normal absolute
paths, bounded quantities, tokens only for tenants that exist, and a tenant-scoped token's
host paths confined to its roots. Every refusal is a 422 naming the field and changes nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SCHEMAS, TENANT, assert_problem, rule_body, secured_client, snapshot
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from lachesis_controller.validation.bounds import (
    HOST_PATH_PATTERN,
    MAX_CLASSIFIERS,
    MAX_DETOURS,
    MAX_PATH_CHARS,
    MAX_TENANTS,
    normal_path,
)

BOOTSTRAP = "input-bootstrap"
ADMIN = {"Authorization": f"Bearer {BOOTSTRAP}"}
SHARED_ROOT = "/srv/shared"


@pytest.fixture
def secured(tmp_path: Path, redis_url: str) -> Iterator[TestClient]:
    with secured_client(tmp_path, redis_url, BOOTSTRAP, endpoint_roots=(SHARED_ROOT,)) as client:
        client.headers.update(ADMIN)
        yield client


@pytest.fixture
def state(secured: TestClient) -> Iterator[Engine]:
    engine = create_engine(secured.app.state.test_db_url)  # type: ignore[attr-defined]
    yield engine
    engine.dispose()


def refused(
    client: TestClient, engine: Engine, method: str, path: str, field: str, message: str, **kwargs: Any
) -> None:
    before = snapshot(engine)
    body = assert_problem(client.request(method, path, **kwargs), 422)
    fields = {e["field"]: e["message"] for e in body["errors"]}
    assert field in fields, body
    assert message in fields[field], body
    assert snapshot(engine) == before


def tenant(*classifiers: dict[str, str], name: str = "web") -> dict[str, Any]:
    return {"name": name, "classifiers": list(classifiers)}


def path_prefix(value: str) -> dict[str, str]:
    return {"kind": "path_prefix", "value": value}


def file_detour(target: str) -> list[dict[str, Any]]:
    return [{"what": "io", "to": {"kind": "file", "target": target}}]


@pytest.mark.parametrize(
    ("classifier", "message"),
    [
        (path_prefix("/srv/we\x00b/"), "classifiers[0].value: control character '\\x00' at offset 7"),
        ({"kind": "cgroup", "value": "/sys/fs/cgroup/a\nb"}, "control character '\\n'"),
        (path_prefix("srv/web/"), "is not an absolute path"),
        (path_prefix("/srv/../etc/"), "has a . or .. segment"),
        (path_prefix("/srv//web/"), "has an empty segment"),
    ],
)
def test_classifiers_must_mean_one_thing(
    secured: TestClient, state: Engine, classifier: dict[str, str], message: str
) -> None:
    refused(secured, state, "POST", "/api/v1/tenants", "classifiers", message, json=tenant(classifier))


def test_classifiers_per_tenant_are_bounded(secured: TestClient, state: Engine) -> None:
    many = [path_prefix(f"/srv/web/{i}/") for i in range(MAX_CLASSIFIERS + 1)]
    refused(
        secured, state, "POST", "/api/v1/tenants", "classifiers", f"at most {MAX_CLASSIFIERS} items", json=tenant(*many)
    )
    assert secured.post("/api/v1/tenants", json=tenant(*many[:MAX_CLASSIFIERS])).status_code == 201


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        (
            {"match": {"tenant": "web", "path_prefix": "/srv/web/" + "x" * MAX_PATH_CHARS}},
            "match",
            f"longer than {MAX_PATH_CHARS}",
        ),
        ({"match": {"tenant": "web", "path_prefix": "/srv/web/\x00"}}, "match", "path_prefix: control character"),
        ({"match": {"tenant": "web", "path_prefix": "/srv/web/../../etc"}}, "match", "has a . or .. segment"),
        ({"match": {"tenant": "web", "key_prefix": "k\x01"}}, "match", "key_prefix: control character"),
        (
            {"detours": file_detour("../etc")},
            "detours",
            "detours[0].to.target: a file target is an absolute, normal path",
        ),
        ({"detours": file_detour("relative/out")}, "detours", "is not an absolute path"),
        ({"detours": file_detour("/srv/web/out\x00")}, "detours", "control character"),
        ({"detours": file_detour("/srv/web/./out")}, "detours", "has a . or .. segment"),
        ({"detours": file_detour("/srv/web/out")[0:1] * (MAX_DETOURS + 1)}, "detours", f"at most {MAX_DETOURS} items"),
        ({"hosts": [f"h{i}" for i in range(1025)]}, "hosts", "at most 1024 items"),
    ],
)
def test_rules_are_bounded_and_mean_one_thing(
    secured: TestClient, state: Engine, overrides: dict[str, Any], field: str, message: str
) -> None:
    assert secured.post("/api/v1/tenants", json=TENANT).status_code == 201
    refused(secured, state, "POST", "/api/v1/rules", field, message, json=rule_body(**overrides))


@pytest.mark.parametrize(
    ("scope", "field", "message"),
    [
        ({"flow": {"path_prefix": "/srv/web/../db/"}}, "flow", "path_prefix: '/srv/web/../db/' has a . or .. segment"),
        ({"flow": {"key_prefix": "k\x00"}}, "flow", "key_prefix: control character"),
        ({"hosts": [f"h{i}" for i in range(1025)]}, "hosts", "at most 1024 items"),
    ],
)
def test_switch_scopes_are_bounded_and_mean_one_thing(
    secured: TestClient, state: Engine, scope: dict[str, Any], field: str, message: str
) -> None:
    refused(secured, state, "POST", "/api/v1/switch/quiesce", field, message, json=scope)


def test_remote_and_normal_file_targets_are_accepted(secured: TestClient) -> None:
    assert secured.post("/api/v1/tenants", json=TENANT).status_code == 201
    for index, target in enumerate(["tcp://10.0.0.2:7000/ep", "/srv/web/out"]):
        response = secured.post(
            "/api/v1/rules", json=rule_body(f"r{index}", priority=index, detours=file_detour(target))
        )
        assert response.status_code == 201, response.text


def test_rules_and_tenants_in_total_are_bounded(
    secured: TestClient, state: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("api.tenants", "policy.service"):
        monkeypatch.setattr(f"lachesis_controller.{module}.MAX_TENANTS", 2)
    for module in ("api.rules", "policy.service"):
        monkeypatch.setattr(f"lachesis_controller.{module}.MAX_RULES", 2)
    for name in ("web", "db"):
        assert secured.post("/api/v1/tenants", json=tenant(path_prefix(f"/srv/{name}/"), name=name)).status_code == 201
    refused(
        secured,
        state,
        "POST",
        "/api/v1/tenants",
        "name",
        "3 tenants in all would pass the limit of 2",
        json=tenant(path_prefix("/srv/x/"), name="x"),
    )
    refused(
        secured,
        state,
        "POST",
        "/api/v1/policies?dry_run=true",
        "spec.tenants",
        "3 tenants in all would pass the limit of 2",
        content=policy(tenants="    - {name: x, classifiers: [{kind: path_prefix, value: /srv/x/}]}"),
        headers={"Content-Type": "application/yaml"},
    )
    for index in range(2):
        assert secured.post("/api/v1/rules", json=rule_body(f"r{index}", priority=index)).status_code == 201
    refused(
        secured,
        state,
        "POST",
        "/api/v1/rules",
        "name",
        "3 rules in all would pass the limit of 2",
        json=rule_body("r2"),
    )
    refused(
        secured,
        state,
        "POST",
        "/api/v1/policies?dry_run=true",
        "spec.rules",
        "3 rules in all would pass the limit of 2",
        content=policy(
            rules="    - {name: r2, priority: 5, match: {tenant: web}, detours: [{what: io, to: {kind: stage, target: cache/web}}]}"
        ),
        headers={"Content-Type": "application/yaml"},
    )


def test_a_token_for_a_tenant_that_does_not_exist_is_refused(secured: TestClient, state: Engine) -> None:
    refused(
        secured,
        state,
        "POST",
        "/api/v1/tokens",
        "tenant",
        "no tenant named 'ghost'",
        json={"name": "ghost-op", "role": "operator", "tenant": "ghost"},
    )
    assert secured.post("/api/v1/tenants", json=TENANT).status_code == 201
    assert (
        secured.post("/api/v1/tokens", json={"name": "web-op", "role": "operator", "tenant": "web"}).status_code == 201
    )


@pytest.mark.parametrize(
    ("guarantee", "field"),
    [
        ({"kind": "fixed_size", "size_bytes": 1e308}, "guarantee.fixed_size.size_bytes"),
        ({"kind": "bandwidth", "sla": 1e308, "storage": 1e9, "memory": 1e10}, "guarantee.bandwidth.sla"),
        ({"kind": "bandwidth", "sla": 1e6, "storage": 1e9, "memory": 1e308}, "guarantee.bandwidth.memory"),
    ],
)
def test_guarantees_are_bounded(secured: TestClient, state: Engine, guarantee: dict[str, Any], field: str) -> None:
    assert secured.post("/api/v1/tenants", json=TENANT).status_code == 201
    refused(
        secured,
        state,
        "PUT",
        "/api/v1/allocations/guarantees/web",
        field,
        "less than or equal to 1000000000000000000",
        json={"guarantee": guarantee},
    )


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"idle": [f"t{i}" for i in range(MAX_TENANTS + 1)]}, "idle"),
        (
            {"guarantees": {f"t{i}": {"kind": "min_hit_ratio", "ratio": 0.5} for i in range(MAX_TENANTS + 1)}},
            "guarantees",
        ),
    ],
)
def test_allocation_proposals_are_bounded(
    secured: TestClient, state: Engine, extra: dict[str, Any], field: str
) -> None:
    refused(
        secured,
        state,
        "POST",
        "/api/v1/allocations/proposals",
        field,
        f"at most {MAX_TENANTS}",
        json={"capacity_bytes": 1e9, **extra},
    )


def policy(*, tenants: str = "", rules: str = "", stages: str = "") -> str:
    return f"""\
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {{name: web-policy}}
spec:
  tenants:
{tenants or "    []"}
  stages:
{stages or "    []"}
  rules:
{rules or "    []"}
"""


def test_policy_host_paths_are_normal_with_their_line(secured: TestClient, state: Engine) -> None:
    assert secured.post("/api/v1/tenants", json=TENANT).status_code == 201
    text = policy(stages="    - {kind: log, name: log/web, owner: web, dir: /var/log/../../etc}")
    before = snapshot(state)
    body = assert_problem(
        secured.post("/api/v1/policies?dry_run=true", content=text, headers={"Content-Type": "application/yaml"}), 422
    )
    assert body["errors"][0]["field"] == "spec.stages[0].dir"
    assert "has a . or .. segment" in body["errors"][0]["message"] and body["errors"][0]["line"] == 8
    assert snapshot(state) == before


@pytest.fixture
def web_operator(secured: TestClient) -> dict[str, str]:
    assert secured.post("/api/v1/tenants", json=TENANT).status_code == 201
    made = secured.post("/api/v1/tokens", json={"name": "web-op", "role": "operator", "tenant": "web"})
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def test_a_tenant_operators_file_endpoints_stay_under_its_roots(
    secured: TestClient, state: Engine, web_operator: dict[str, str]
) -> None:
    refused(
        secured,
        state,
        "POST",
        "/api/v1/rules",
        "detours[0].to.target",
        "'/etc' is outside the roots tenant 'web' may use (/srv/shared, /srv/web/)",
        json=rule_body("escape", detours=file_detour("/etc")),
        headers=web_operator,
    )
    # /srv/webby is not under /srv/web/.
    refused(
        secured,
        state,
        "POST",
        "/api/v1/rules",
        "detours[0].to.target",
        "is outside the roots",
        json=rule_body("sibling", detours=file_detour("/srv/webby/out")),
        headers=web_operator,
    )
    for index, target in enumerate(["/srv/web/out", f"{SHARED_ROOT}/web", "tcp://10.0.0.2:7000/ep"]):
        made = secured.post(
            "/api/v1/rules",
            json=rule_body(f"ok{index}", priority=index, detours=file_detour(target)),
            headers=web_operator,
        )
        assert made.status_code == 201, made.text
    # Replacing a rule is confined the same way.
    refused(
        secured,
        state,
        "PUT",
        "/api/v1/rules/ok0",
        "detours[0].to.target",
        "is outside the roots",
        json=rule_body("ok0", priority=0, detours=file_detour("/etc/cron.d")),
        headers=web_operator,
    )
    # An admin is not confined by the controller (the agent's own roots still apply).
    assert (
        secured.post(
            "/api/v1/rules", json=rule_body("admin", priority=9, detours=file_detour("/var/backup"))
        ).status_code
        == 201
    )


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (
            policy(
                rules="    - {name: esc, priority: 1, match: {tenant: web}, detours: [{what: io, to: {kind: file, target: /etc}}]}"
            ),
            "spec.rules[0].detours[0].to.target",
        ),
        (policy(stages="    - {kind: log, name: log/web, owner: web, dir: /etc/lachesis}"), "spec.stages[0].dir"),
        (
            policy(
                stages="    - {kind: replica_set, name: rs/web, owner: web, write_set: [/srv/web/a, /root/b], read_set: [/srv/web/a]}"
            ),
            "spec.stages[0].write_set[1]",
        ),
    ],
)
def test_a_tenant_operators_policy_is_confined_too(
    secured: TestClient, state: Engine, web_operator: dict[str, str], document: str, field: str
) -> None:
    refused(
        secured,
        state,
        "POST",
        "/api/v1/policies?dry_run=true",
        field,
        "is outside the roots tenant 'web' may use",
        content=document,
        headers=web_operator | {"Content-Type": "application/yaml"},
    )


def test_host_path_pattern_is_the_bus_contracts() -> None:
    """One rule for host paths: the pattern the schemas publish accepts what normal_path does."""
    common = json.loads((SCHEMAS / "bus" / "common.schema.json").read_text())
    assert common["$defs"]["host_path"]["pattern"] == HOST_PATH_PATTERN
    pattern = re.compile(HOST_PATH_PATTERN)
    for path in [
        "/var/lib/x",
        "/...",
        "/.a",
        "/..x",
        "/a/../b",
        "/a/./b",
        "/a//b",
        "/a/",
        "/",
        "rel",
        "/a\x00",
        "/a\tb",
    ]:
        try:
            normal_path(path)
            accepted = True
        except ValueError:
            accepted = False
        assert bool(pattern.fullmatch(path)) == accepted, path
