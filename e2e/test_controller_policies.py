"""Policies and tokens against real processes: a policy compiled by the controller is
installed by a real agent, and a tenant-scoped token is held to its tenant."""

from __future__ import annotations

from pathlib import Path

import httpx
from conftest import HOST, Cluster

EXAMPLE = Path(__file__).resolve().parents[1] / "policies" / "examples" / "tenant-cache-isolation.yaml"


def test_a_policy_reaches_the_agent_and_a_tenant_token_stays_in_its_tenant(running: Cluster) -> None:
    with running.api() as api:
        dry = api.post(
            "/api/v1/policies?dry_run=true", content=EXAMPLE.read_bytes(), headers={"content-type": "application/yaml"}
        )
        assert dry.status_code == 200, dry.text
        added = dry.json()["diff"]["hosts"][HOST]["rules"]["added"]
        assert [r["name"] for r in added] == ["alpha-cached", "beta-cached"]

        applied = api.post(
            "/api/v1/policies", content=EXAMPLE.read_bytes(), headers={"content-type": "application/yaml"}
        )
        assert applied.status_code == 201, applied.text
        rollout = running.wait_rollout_done(applied.json()["rollout_id"], timeout=30)
        assert rollout["state"] == "succeeded", rollout
        assert [t["status"] for t in rollout["targets"]] == ["applied"]

        token = api.post("/api/v1/tokens", json={"name": "alpha-ops", "role": "operator", "tenant": "alpha"})
        assert token.status_code == 201, token.text
        secret = token.json()["token"]

    with httpx.Client(base_url=running.url, headers={"Authorization": f"Bearer {secret}"}, timeout=10) as alpha:
        assert [r["name"] for r in alpha.get("/api/v1/rules").json()] == ["alpha-cached"]
        refused = alpha.delete("/api/v1/rules/beta-cached")
        assert refused.status_code == 403
        assert refused.headers["content-type"].startswith("application/problem+json")
    with httpx.Client(base_url=running.url, timeout=10) as anonymous:
        assert anonymous.get("/api/v1/rules").status_code == 401
