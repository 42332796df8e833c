"""lachesis-cli against a live controller (uvicorn on a free port in a thread)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from conftest import FakeAgent, free_port, wait_until
from fastapi import FastAPI
from typer.testing import CliRunner, Result

from lachesis_cli.main import app
from lachesis_cli.settings import DEFAULT_URL, resolve
from lachesis_controller.app import create_app
from lachesis_controller.config import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def live_url(settings: Settings) -> Iterator[str]:
    yield from serve(settings)


def serve(settings: Settings, app: FastAPI | None = None) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(app or create_app(settings), host="127.0.0.1", port=port, log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, what="uvicorn to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"LACHESIS_URL": url, "LACHESIS_TOKEN": None})


def write(tmp_path: Path, name: str, content: str) -> Path:
    path = tmp_path / name
    path.write_text(content)
    return path


def test_apply_examples_then_get_and_delete(live_url: str) -> None:
    result = cli(live_url, "apply", "-f", str(EXAMPLES / "tenant.yaml"))
    assert result.exit_code == 0, result.output
    assert "tenant/analytics created, rollout " in result.stdout
    assert " succeeded" in result.stdout  # no hosts: nothing to wait for

    result = cli(live_url, "apply", "-f", str(EXAMPLES / "rule.yaml"))
    assert result.exit_code == 0, result.output
    assert "rule/analytics-reads-to-cache created" in result.stdout

    again = cli(live_url, "apply", "-f", str(EXAMPLES / "rule.yaml"))
    assert again.exit_code == 0, again.output
    assert "rule/analytics-reads-to-cache unchanged" in again.stdout

    rules = cli(live_url, "get", "rules", "-o", "json")
    assert rules.exit_code == 0
    listed = json.loads(rules.stdout)
    assert [r["name"] for r in listed] == ["analytics-reads-to-cache"]
    assert listed[0]["match"] == {"tenant": "analytics", "ops": ["read"], "path_prefix": "/data/"}

    table = cli(live_url, "get", "tenants")
    assert table.exit_code == 0
    assert table.stdout.splitlines()[0].split() == ["TENANT", "CLASSIFIERS", "DESCRIPTION"]
    assert "analytics" in table.stdout

    status = cli(live_url, "status")
    assert status.exit_code == 0, status.output
    assert "ready       yes" in status.stdout
    assert "tenants     1" in status.stdout and "rules       1" in status.stdout

    deleted = cli(live_url, "delete", "rule", "analytics-reads-to-cache")
    assert deleted.exit_code == 0, deleted.output
    assert "rule/analytics-reads-to-cache deleted, rollout" in deleted.stdout
    assert json.loads(cli(live_url, "get", "rules", "-o", "json").stdout) == []


def test_apply_updates_a_changed_rule_and_orders_tenants_first(live_url: str, tmp_path: Path) -> None:
    both = write(
        tmp_path,
        "both.yaml",
        """\
kind: Rule
spec: {name: r1, priority: 5, match: {tenant: web}, detours: [{what: io, to: {kind: stage, target: c}}]}
---
kind: Tenant
spec: {name: web, classifiers: [{kind: uid, value: "33"}]}
""",
    )
    first = cli(live_url, "apply", "-f", str(both))
    assert first.exit_code == 0, first.output
    assert first.stdout.index("tenant/web created") < first.stdout.index("rule/r1 created")

    changed = write(
        tmp_path,
        "changed.json",
        json.dumps(
            [
                {
                    "kind": "Rule",
                    "spec": {
                        "name": "r1",
                        "priority": 7,
                        "match": {"tenant": "web"},
                        "detours": [{"what": "io", "to": {"kind": "stage", "target": "c"}}],
                    },
                },
            ]
        ),
    )
    second = cli(live_url, "apply", "-f", str(changed))
    assert second.exit_code == 0, second.output
    assert "rule/r1 updated" in second.stdout
    rule = json.loads(cli(live_url, "get", "rule", "r1", "-o", "json").stdout)
    assert rule["priority"] == 7


def test_apply_waits_for_the_hosts_and_prints_each(live_url: str, redis_url: str) -> None:
    agent = FakeAgent(redis_url, "host-a")
    assert cli(live_url, "hosts", "enroll", "host-a").exit_code == 0
    stop = threading.Event()

    def play_agent() -> None:
        acked = 0
        agent.register()
        while not stop.is_set():
            state = agent.desired()
            if state and state["generation"] > acked:
                agent.ack(state)
                acked = state["generation"]
            stop.wait(0.05)

    thread = threading.Thread(target=play_agent, daemon=True)
    thread.start()
    try:
        wait_until(lambda: json.loads(cli(live_url, "get", "hosts", "-o", "json").stdout), what="host")
        result = cli(live_url, "apply", "-f", str(EXAMPLES / "tenant.yaml"), "--wait", "20")
        assert result.exit_code == 0, result.output
        assert "succeeded" in result.stdout
        assert "  host-a: generation 2 applied" in result.stdout
    finally:
        stop.set()
        thread.join(timeout=5)
        agent.close()


def test_invalid_yaml_exits_2_with_the_line(live_url: str, tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", "kind: Rule\nspec:\n  name: r1\n  match: {tenant: [web\n")
    result = cli(live_url, "apply", "-f", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:5:" in result.stderr and "invalid YAML" in result.stderr


def test_invalid_json_exits_2_with_the_line(live_url: str, tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.json", '{"kind": "Tenant",\n "spec": {,}}')
    result = cli(live_url, "apply", "-f", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:2:" in result.stderr and "invalid JSON" in result.stderr


def test_invalid_spec_exits_2_naming_field_and_line_and_applies_nothing(live_url: str, tmp_path: Path) -> None:
    bad = write(
        tmp_path,
        "bad.yaml",
        """\
kind: Tenant
spec: {name: web, classifiers: []}
---
kind: Rule
spec:
  name: r1
  priority: 1
  match:
    tenant: web
    inode: 42
  detours: [{what: io, to: {kind: stage, target: c}}]
""",
    )
    result = cli(live_url, "apply", "-f", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:10:" in result.stderr
    assert "spec.match.inode: unknown field" in result.stderr
    # The valid tenant before it was not applied either.
    assert json.loads(cli(live_url, "get", "tenants", "-o", "json").stdout) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kind: Widget\nspec: {name: x}\n", "kind must be one of Tenant, Rule"),
        ("kind: Tenant\n", "needs a spec mapping"),
        ("kind: Tenant\nspec: {name: x, classifiers: []}\nextra: 1\n", "unknown key(s) extra"),
        ("# nothing\n", "no documents"),
        (
            "kind: Tenant\nspec: {name: x, classifiers: []}\n---\nkind: Tenant\nspec: {name: x, classifiers: []}\n",
            "also defined at",
        ),
    ],
)
def test_malformed_documents_exit_2(live_url: str, tmp_path: Path, content: str, message: str) -> None:
    result = cli(live_url, "apply", "-f", str(write(tmp_path, "doc.yaml", content)))
    assert result.exit_code == 2
    assert message in result.stderr


def test_missing_file_exits_2(live_url: str, tmp_path: Path) -> None:
    result = cli(live_url, "apply", "-f", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "no such file" in result.stderr


def test_server_refusal_exits_2_with_problem_detail(live_url: str, tmp_path: Path) -> None:
    rule = write(
        tmp_path,
        "rule.yaml",
        """\
kind: Rule
spec: {name: r1, priority: 1, match: {tenant: ghost}, detours: [{what: io, to: {kind: stage, target: c}}]}
""",
    )
    result = cli(live_url, "apply", "-f", str(rule))
    assert result.exit_code == 2
    assert "422" in result.stderr and "match.tenant" in result.stderr and "ghost" in result.stderr

    missing = cli(live_url, "delete", "tenant", "ghost")
    assert missing.exit_code == 2
    assert "does not exist" in missing.stderr
    assert cli(live_url, "get", "widgets").exit_code == 2


def test_unreachable_controller_exits_1() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for args in (["status"], ["get", "hosts"]):
        result = cli(url, *args)
        assert result.exit_code == 1
        assert "cannot reach the controller" in result.stderr


def test_console_script_runs(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "lachesis-cli"
    result = subprocess.run(
        [str(script), "apply", "-f", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no such file" in result.stderr


def test_token_is_sent(settings: Settings) -> None:
    for url in serve(dataclasses.replace(settings, api_token="sekrit")):
        denied = cli(url, "get", "tenants")
        assert denied.exit_code == 2
        assert "401" in denied.stderr
        env = {"LACHESIS_URL": url, "LACHESIS_TOKEN": "sekrit"}
        allowed = CliRunner().invoke(app, ["get", "tenants", "-o", "json"], env=env)
        assert allowed.exit_code == 0, allowed.output
        assert json.loads(allowed.stdout) == []


def test_url_and_token_resolution(tmp_path: Path) -> None:
    assert resolve(env={}, cwd=tmp_path).url == DEFAULT_URL
    (tmp_path / ".lachesis").mkdir()
    (tmp_path / ".lachesis" / "controller-url").write_text("http://127.0.0.1:9999/\n")
    (tmp_path / ".lachesis" / "token").write_text("from-file\n")
    assert resolve(env={}, cwd=tmp_path) == resolve(env={}, cwd=tmp_path)
    target = resolve(env={}, cwd=tmp_path)
    assert (target.url, target.token) == ("http://127.0.0.1:9999", "from-file")
    home = tmp_path / "home"
    (home / ".lachesis").mkdir(parents=True)
    (home / ".lachesis" / "controller-url").write_text("http://10.0.0.1:8080")
    assert resolve(env={"LACHESIS_HOME": str(home)}, cwd=tmp_path).url == "http://10.0.0.1:8080"
    env = {"LACHESIS_URL": "http://env:1", "LACHESIS_TOKEN": "from-env"}
    assert resolve(env=env, cwd=tmp_path) == type(target)(url="http://env:1", token="from-env")
    assert resolve(url="http://flag:2", env=env, cwd=tmp_path).url == "http://flag:2"


POLICY_EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"


def test_apply_a_policy_document(live_url: str) -> None:
    result = cli(live_url, "apply", "-f", str(POLICY_EXAMPLES / "tenant-cache-isolation.yaml"))
    assert result.exit_code == 0, result.output
    assert "policy/isolated-caches applied as version 1, rollout " in result.stdout
    rules = json.loads(cli(live_url, "get", "rules", "-o", "json").stdout)
    assert [r["name"] for r in rules] == ["alpha-cached", "beta-cached"]
    again = cli(live_url, "apply", "-f", str(POLICY_EXAMPLES / "tenant-cache-isolation.yaml"))
    assert "applied as version 2" in again.stdout


def test_policy_errors_point_into_the_file(live_url: str, tmp_path: Path) -> None:
    text = (POLICY_EXAMPLES / "tenant-cache-isolation.yaml").read_text()
    # Locally invalid: caught before sending, with the file's line.
    bad = write(
        tmp_path, "bad.yaml", text.replace("size_bytes: 4294967296}", "size_bytes: 4294967296, colour: red}", 1)
    )
    result = cli(live_url, "apply", "-f", str(bad))
    assert result.exit_code == 2
    line = next(i for i, l in enumerate(bad.read_text().splitlines(), 1) if "colour" in l)
    assert f"bad.yaml:{line}: Policy spec.stages[0].colour: unknown field" in result.output
    # Valid but unsafe: the controller refuses, naming the rule, and nothing is applied.
    unsafe = write(
        tmp_path,
        "unsafe.yaml",
        "kind: Tenant\nspec: {name: other, classifiers: []}\n---\n"
        + text.replace("match: {tenant: beta}", "match: {tenant: other}"),
    )
    result = cli(live_url, "apply", "-f", str(unsafe))
    assert result.exit_code == 2, result.output
    assert "beta-cached" in result.output and "unsafe" in result.output
    assert json.loads(cli(live_url, "get", "rules", "-o", "json").stdout) == []
