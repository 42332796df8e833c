"""Nothing accepted that is not enforced, for rules' operations: each data path registers the
operations its IO carries (the FUSE switch reads and writes; the key-value front end reads,
writes and deletes). A rule whose `match.ops` names an operation that a data path in the
rule's scope would route its IO through but never sees (`create` on a host with a FUSE mount:
names are created in the backing directory, no rule ever matches one) is refused with 422
`not-enforced` naming the op's field and the hosts, before anything ships, through the REST
API and in a policy (with its line); what the data paths see goes through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conftest import FakeAgent, assert_problem, enroll, snapshot
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

FUSE = {"fuse": {"classifiers": ["cgroup", "path_prefix", "uid"], "ops": ["read", "write"]}}
KV = {"kv": {"classifiers": ["key_prefix"], "ops": ["read", "write", "delete"]}}
STAGE = {"what": "header", "to": {"kind": "controller", "target": "approve"}}


def rule(name: str, match: dict[str, Any], hosts: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "priority": 10, "hosts": hosts, "match": match, "detours": [STAGE]}


def refused(body: dict[str, Any], field: str, hosts: list[str], op: str, data_paths: int = 1) -> None:
    """One error per data path that never sees `op`, each naming the field and its hosts."""
    assert body["type"].endswith("/not-enforced"), body
    assert body["hosts"] == hosts, body
    assert len(body["errors"]) == data_paths, body
    for error in body["errors"]:
        assert error["field"] == field, body
        assert f"never sees a {op}" in error["message"], body
    assert all(any(h in e["message"] for e in body["errors"]) for h in hosts), body


def test_an_op_a_data_path_never_sees_is_refused_naming_the_field_and_hosts(
    client: TestClient, agents: Callable[[str], FakeAgent], db: Engine
) -> None:
    fuse, both, kv_only, old = agents("host-fuse"), agents("host-both"), agents("host-kv"), agents("host-old")
    enroll(client, fuse, FUSE)
    enroll(client, both, FUSE | KV)
    enroll(client, kv_only, KV)
    enroll(client, old, {"fuse": {"classifiers": ["path_prefix"]}})  # registered no ops: not judged
    assert (
        client.post(
            "/api/v1/tenants", json={"name": "files", "classifiers": [{"kind": "path_prefix", "value": "/srv/files/"}]}
        ).status_code
        == 201
    )
    assert (
        client.post(
            "/api/v1/tenants", json={"name": "sessions", "classifiers": [{"kind": "key_prefix", "value": "sess:"}]}
        ).status_code
        == 201
    )
    before = snapshot(db)

    # Every host and both data paths: neither the FUSE switches nor the key-value front ends
    # ever see a create.
    body = assert_problem(client.post("/api/v1/rules", json=rule("creates", {"ops": ["read", "create"]})), 422)
    refused(body, "match.ops[1]", ["host-both", "host-fuse", "host-kv"], "create", data_paths=2)
    # A path tenant's deletes: file IO, which the switches see no delete of.
    body = assert_problem(client.post("/api/v1/rules", json=rule("rm", {"tenant": "files", "ops": ["delete"]})), 422)
    refused(body, "match.ops[0]", ["host-both", "host-fuse"], "delete")
    # Scoped to one host, only that host is named.
    body = assert_problem(
        client.post(
            "/api/v1/rules",
            json=rule("rm1", {"path_prefix": "/srv/", "ops": ["delete"]}, hosts=["host-fuse", "host-kv"]),
        ),
        422,
    )
    refused(body, "match.ops[0]", ["host-fuse"], "delete")
    # Nobody's front end creates: a create by key is refused by the key-value front ends.
    body = assert_problem(client.post("/api/v1/rules", json=rule("kc", {"key_prefix": "k:", "ops": ["create"]})), 422)
    refused(body, "match.ops[0]", ["host-both", "host-kv"], "create")
    assert snapshot(db) == before

    # What the data paths see goes through: a key-value tenant's deletes (only the key-value
    # front ends see its IO), reads and writes anywhere.
    created = client.post("/api/v1/rules", json=rule("kv-del", {"tenant": "sessions", "ops": ["delete"]}))
    assert created.status_code == 201, created.text
    assert (
        client.post("/api/v1/rules", json=rule("kv-del2", {"key_prefix": "k:", "ops": ["delete"]})).status_code == 201
    )
    assert client.post("/api/v1/rules", json=rule("rw", {"ops": ["read", "write"]})).status_code == 201
    # Replacing a rule is judged the same way, and changes nothing.
    before = snapshot(db)
    body = assert_problem(client.put("/api/v1/rules/rw", json=rule("rw", {"ops": ["write", "delete"]})), 422)
    refused(body, "match.ops[1]", ["host-both", "host-fuse"], "delete")
    assert snapshot(db) == before


POLICY = """\
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: audit}
spec:
  tenants:
    - name: docs
      classifiers: [{kind: path_prefix, value: /srv/docs/}]
  rules:
    - name: docs-reads
      priority: 10
      match: {tenant: docs, ops: [read]}
      detours: [{what: header, to: {kind: controller, target: approve}}]
    - name: docs-deletes
      priority: 11
      match:
        tenant: docs
        ops: [write, delete]
      detours: [{what: header, to: {kind: controller, target: approve}}]
"""


def test_a_policy_with_such_an_op_is_refused_with_its_line(
    client: TestClient, agents: Callable[[str], FakeAgent], db: Engine
) -> None:
    enroll(client, agents("host-a"), FUSE)
    before = snapshot(db)
    for dry_run in ("true", "false"):
        response = client.post(
            f"/api/v1/policies?dry_run={dry_run}", content=POLICY, headers={"content-type": "application/yaml"}
        )
        body = assert_problem(response, 422)
        refused(body, "spec.rules[1].match.ops[1]", ["host-a"], "delete")
        (error,) = body["errors"]
        assert error["line"] == 17, error
    assert snapshot(db) == before
    fixed = POLICY.replace("ops: [write, delete]", "ops: [write]")
    response = client.post("/api/v1/policies", content=fixed, headers={"content-type": "application/yaml"})
    assert response.status_code == 201, response.text
