"""Bounded input: body size and depth on every route, YAML alias bombs and deep YAML on
policies. Each refusal is a problem+json 4xx that says what and where, and changes nothing."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TENANT, assert_problem, make_settings, secured_client, snapshot
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from lachesis_controller.app import create_app
from lachesis_controller.policy.parse import MAX_EXPANDED_NODES
from lachesis_controller.validation.body_limits import MAX_BODY_DEPTH, too_deep

BOOTSTRAP = "limits-bootstrap"
ADMIN = {"Authorization": f"Bearer {BOOTSTRAP}"}

# Nine levels of nine aliases: 9**9 (387 million) strings once expanded, in about 600 bytes.
BILLION_LAUGHS = """\
apiVersion: lachesis.dev/v1
kind: Policy
metadata:
  name: laughs
spec:
  tenants:
    - name: web
      classifiers: [{kind: path_prefix, value: /srv/web/}]
      description: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
  f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
  g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
  h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
  i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


@pytest.fixture
def secured(tmp_path: Path, redis_url: str) -> Iterator[TestClient]:
    with secured_client(tmp_path, redis_url, BOOTSTRAP) as client:
        yield client


def tenant_operator(client: TestClient) -> dict[str, str]:
    assert client.post("/api/v1/tenants", json=TENANT, headers=ADMIN).status_code == 201
    made = client.post("/api/v1/tokens", json={"name": "web-op", "role": "operator", "tenant": "web"}, headers=ADMIN)
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def test_billion_laughs_is_refused_with_where_and_memory_stays_bounded(secured: TestClient) -> None:
    headers = tenant_operator(secured) | {"Content-Type": "application/yaml"}
    engine = create_engine(secured.app.state.test_db_url)  # type: ignore[attr-defined]
    before = snapshot(engine)
    tracemalloc.start()
    try:
        response = secured.post("/api/v1/policies?dry_run=true", content=BILLION_LAUGHS, headers=headers)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    body = assert_problem(response, 422)
    assert body["type"].endswith("/document-out-of-bounds")
    assert f"expands beyond {MAX_EXPANDED_NODES} nodes" in body["detail"]
    # The alias that crossed the budget, on the line of `f` (the 14th: f holds 9**6 strings).
    assert body["errors"][0]["line"] == 14 and body["detail"].startswith("line 14, ")
    # Bounded by the expansion budget, not by 9**9 strings (gigabytes).
    assert peak < 64 << 20, peak
    assert snapshot(engine) == before
    engine.dispose()


@pytest.mark.parametrize(
    ("document", "message", "line"),
    [
        ("spec: " + "[" * 5000 + "]" * 5000, f"nests deeper than {MAX_BODY_DEPTH} levels", 1),
        ("".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v", "nests deeper than", MAX_BODY_DEPTH),
        ("a: &a [1, *a]", "has an alias inside the node it names", 1),
        ("\n".join(f"k{i}: *a" if i else "k0: &a 1" for i in range(200)), "has more than 100 aliases", 102),
    ],
    ids=["flow", "block", "self-alias", "aliases"],
)
def test_yaml_out_of_bounds_is_a_422_naming_the_line(
    secured: TestClient, document: str, message: str, line: int
) -> None:
    response = secured.post(
        "/api/v1/policies?dry_run=true", content=document, headers=ADMIN | {"Content-Type": "application/yaml"}
    )
    body = assert_problem(response, 422)
    assert message in body["detail"]
    assert body["errors"][0]["field"] == "body" and body["errors"][0]["line"] == line


def test_a_few_aliases_still_work(secured: TestClient) -> None:
    document = """\
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: shared}
spec:
  tenants:
    - name: web
      classifiers: &paths [{kind: path_prefix, value: /srv/web/}]
    - name: web2
      classifiers: *paths
"""
    response = secured.post(
        "/api/v1/policies?dry_run=true", content=document, headers=ADMIN | {"Content-Type": "application/yaml"}
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/api/v1/tenants", "application/json"),
        ("/api/v1/rules", "application/json"),
        ("/api/v1/tokens", "application/json"),
        ("/api/v1/policies?dry_run=true", "application/json"),
        ("/api/v1/tenants", None),
    ],
)
def test_deep_json_is_a_422_on_every_route(secured: TestClient, path: str, content_type: str | None) -> None:
    deep = '{"name": ' + "[" * 50_000 + "]" * 50_000 + "}"
    headers = ADMIN | ({"Content-Type": content_type} if content_type else {})
    engine = create_engine(secured.app.state.test_db_url)  # type: ignore[attr-defined]
    before = snapshot(engine)
    body = assert_problem(secured.post(path, content=deep, headers=headers), 422)
    assert body["type"].endswith("/too-deep")
    assert body["max_depth"] == MAX_BODY_DEPTH
    assert body["errors"] == [{"field": "body", "message": body["detail"], "line": 1, "column": 9 + MAX_BODY_DEPTH}]
    assert snapshot(engine) == before
    engine.dispose()


def test_depth_counts_brackets_outside_strings_only() -> None:
    assert too_deep(b'{"a": "' + b"[" * 100 + b'\\"[[["}', 2) is None
    assert too_deep(b"[[[]]]", 3) is None
    assert too_deep(b"[[[]]]", 2) == 2
    assert too_deep(b'[{"x": [1]}]', 2) == 7


def test_oversized_body_is_a_413_with_the_limit(tmp_path: Path, redis_url: str) -> None:
    settings = make_settings(tmp_path, redis_url, max_body_bytes=4096)
    big = {"name": "web", "classifiers": [{"kind": "path_prefix", "value": "/srv/" + "x" * 4096}]}
    with TestClient(create_app(settings)) as client:
        body = assert_problem(client.post("/api/v1/tenants", json=big), 413)
        assert body["max_bytes"] == 4096 and "4096 bytes" in body["detail"]

        # Without a Content-Length (chunked), the limit holds while the body is read.
        def chunks() -> Iterator[bytes]:
            for _ in range(10):
                yield b"x" * 1000

        body = assert_problem(
            client.post("/api/v1/tenants", content=chunks(), headers={"Content-Type": "application/json"}), 413
        )
        assert body["max_bytes"] == 4096
        assert client.get("/api/v1/tenants").json() == []
        # Under the limit, the same route works.
        assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
