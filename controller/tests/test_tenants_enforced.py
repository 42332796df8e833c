"""Nothing accepted that is not enforced: a tenant classifier that a data path a host runs
would see the IO of but cannot decide (a `process` classifier on a host whose agent mounts
the FUSE switch) is refused, 422 `not-enforced` naming the field and the hosts, before
anything ships; what the hosts' data paths decide (a path prefix at a FUSE mount) goes
through. The hosts say what they decide in their registration (`capabilities.data_paths`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import FakeAgent, assert_problem, enroll, snapshot, wait_until
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from test_cli import cli, serve

from lachesis_controller.config import Settings

FUSE = {"fuse": {"classifiers": ["cgroup", "path_prefix", "uid"]}}
KV = {"kv": {"classifiers": ["key_prefix"]}}
SEARCH = {
    "name": "search",
    "classifiers": [{"kind": "path_prefix", "value": "/srv/search/"}, {"kind": "process", "value": "searchd"}],
}
POLICY = """\
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: search}
spec:
  tenants:
    - name: search
      classifiers:
        - {kind: path_prefix, value: /srv/search/}
        - {kind: process, value: searchd}
  rules: []
"""


def refused_here(body: dict[str, Any], field: str, hosts: list[str]) -> dict[str, Any]:
    assert body["type"].endswith("/not-enforced"), body
    assert body["hosts"] == hosts, body
    (error,) = body["errors"]
    assert error["field"] == field, body
    assert "process" in error["message"] and "FUSE switch" in error["message"], body
    assert all(h in error["message"] for h in hosts), body
    return error


def test_a_classifier_a_fuse_host_cannot_decide_is_refused_naming_field_and_hosts(
    client: TestClient, agents: Callable[[str], FakeAgent], db: Engine
) -> None:
    a, b, kv_only, old = agents("host-a"), agents("host-b"), agents("host-kv"), agents("host-old")
    enroll(client, a, FUSE | KV)
    enroll(client, b, FUSE)
    enroll(client, kv_only, KV)  # sees no file IO: not its to refuse
    enroll(client, old)  # registered no data paths: what it decides is unknown, not judged
    before = snapshot(db)

    body = assert_problem(client.post("/api/v1/tenants", json=SEARCH), 422)
    refused_here(body, "classifiers[1].kind", ["host-a", "host-b"])
    assert snapshot(db) == before
    assert [x.desired()["generation"] for x in (a, b, kv_only, old)] == [1, 1, 1, 1]

    # A path prefix is the FUSE switch's; a key prefix the KV front end's, and a host that
    # mounts no key-value front end sees no key-value request.
    web = {"name": "web", "classifiers": [{"kind": "path_prefix", "value": "/srv/web/"}]}
    sessions = {"name": "sessions", "classifiers": [{"kind": "key_prefix", "value": "sess:"}]}
    assert client.post("/api/v1/tenants", json=web).status_code == 201
    assert client.post("/api/v1/tenants", json=sessions).status_code == 201

    # Replacing a tenant's classifiers is judged the same way, and changes nothing.
    before = snapshot(db)
    body = assert_problem(client.put("/api/v1/tenants/web", json={**SEARCH, "name": "web"}), 422)
    refused_here(body, "classifiers[1].kind", ["host-a", "host-b"])
    assert snapshot(db) == before


def test_a_policy_with_such_a_classifier_is_refused_with_its_line(
    client: TestClient, agents: Callable[[str], FakeAgent], db: Engine
) -> None:
    enroll(client, agents("host-a"), FUSE)
    before = snapshot(db)
    for dry_run in ("true", "false"):
        response = client.post(
            f"/api/v1/policies?dry_run={dry_run}", content=POLICY, headers={"content-type": "application/yaml"}
        )
        error = refused_here(assert_problem(response, 422), "spec.tenants[0].classifiers[1].kind", ["host-a"])
        assert (error["line"], error["column"]) == (9, 12), error
    assert snapshot(db) == before


def test_without_a_host_that_would_see_the_io_nothing_is_refused(
    client: TestClient, agents: Callable[[str], FakeAgent]
) -> None:
    enroll(client, agents("host-kv"), KV)
    enroll(client, agents("host-old"))
    assert client.post("/api/v1/tenants", json=SEARCH).status_code == 201


def test_the_cli_exits_2_naming_the_field(
    settings: Settings, agents: Callable[[str], FakeAgent], tmp_path: Path
) -> None:
    for url in serve(settings):
        assert cli(url, "hosts", "enroll", "host-a").exit_code == 0
        agents("host-a").register(data_paths=FUSE)
        wait_until(lambda: json.loads(cli(url, "get", "hosts", "-o", "json").stdout), what="host-a registered")
        policy = tmp_path / "search.yaml"
        policy.write_text(POLICY)
        result = cli(url, "apply", "-f", str(policy))
        assert result.exit_code == 2, result.output
        assert "422" in result.stderr and "spec.tenants[0].classifiers[1].kind" in result.stderr, result.stderr
        assert "host-a" in result.stderr, result.stderr
        assert json.loads(cli(url, "get", "tenants", "-o", "json").stdout) == []


def test_a_value_no_switch_could_decide_is_refused_naming_it(client: TestClient, db: Engine) -> None:
    """Refused whatever hosts there are: the agents would nack it."""
    before = snapshot(db)
    for classifier, message in (
        ({"kind": "uid", "value": "www-data"}, "decimal number"),
        ({"kind": "uid", "value": "4294967296"}, "decimal number"),
        ({"kind": "cgroup", "value": "jobs/etl"}, "starts with /"),
    ):
        body = assert_problem(client.post("/api/v1/tenants", json={"name": "t", "classifiers": [classifier]}), 422)
        assert body["errors"][0]["field"] == "classifiers", body
        assert body["errors"][0]["message"].startswith("classifiers[0].value: "), body
        assert message in body["errors"][0]["message"], body
    assert snapshot(db) == before
    ok = {"name": "t", "classifiers": [{"kind": "uid", "value": "4294967295"}, {"kind": "cgroup", "value": "/jobs"}]}
    assert client.post("/api/v1/tenants", json=ok).status_code == 201


CGROUP_POLICY = """\
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: analytics}
spec:
  tenants:
    - name: analytics
      classifiers:
        - {kind: cgroup, value: /analytics/}
        - {kind: cgroup, value: /sys/fs/cgroup/unified/analytics}
  rules: []
"""


def test_a_cgroup_written_as_a_host_path_is_refused_naming_the_path_meant(
    client: TestClient, agents: Callable[[str], FakeAgent], db: Engine
) -> None:
    """The FUSE switch compares a cgroup classifier with /proc/PID/cgroup (`/analytics`), so a
    host path (`/sys/fs/cgroup/analytics`, `/sys/fs/cgroup/unified/analytics` beside cgroup v1)
    would be shipped and never match: refused whatever hosts there are, naming the field."""
    enroll(client, agents("host-a"), FUSE)
    assert (
        client.post(
            "/api/v1/tenants", json={"name": "web", "classifiers": [{"kind": "uid", "value": "33"}]}
        ).status_code
        == 201
    )
    before = snapshot(db)
    for host_path in ("/sys/fs/cgroup/analytics", "/sys/fs/cgroup/unified/analytics", "/sys/fs/cgroup/analytics/"):
        classifiers = [{"kind": "uid", "value": "1001"}, {"kind": "cgroup", "value": host_path}]
        for response in (
            client.post("/api/v1/tenants", json={"name": "analytics", "classifiers": classifiers}),
            client.put("/api/v1/tenants/web", json={"name": "web", "classifiers": classifiers}),
        ):
            body = assert_problem(response, 422)
            (error,) = body["errors"]
            assert error["field"] == "classifiers", body
            assert error["message"].startswith("classifiers[1].value: "), body
            assert "host path" in error["message"] and "'/analytics'" in error["message"], body
    for dry_run in ("true", "false"):
        response = client.post(
            f"/api/v1/policies?dry_run={dry_run}", content=CGROUP_POLICY, headers={"content-type": "application/yaml"}
        )
        body = assert_problem(response, 422)
        assert "spec.tenants[0].classifiers" in body["errors"][0]["field"], body
        assert "classifiers[1].value" in body["errors"][0]["message"], body
        assert "'/analytics'" in body["errors"][0]["message"], body
    assert snapshot(db) == before

    # The path /proc/PID/cgroup shows is the one meaning; a cgroup merely named like a mount's
    # last component is not a host path.
    for value in ("/analytics", "/sys", "/sys/fs/cgroupx/a"):
        created = client.post(
            "/api/v1/tenants", json={"name": "analytics", "classifiers": [{"kind": "cgroup", "value": value}]}
        )
        assert created.status_code == 201, created.text
        assert client.delete("/api/v1/tenants/analytics").status_code in (200, 204)
