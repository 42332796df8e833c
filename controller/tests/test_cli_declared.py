"""`lachesis-cli declared` against a live controller: declare, list, pause, resume, cancel;
bad input exits 2 and declares nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import httpx
import pytest
from conftest import TENANT, FakeAgent, enroll
from test_cli import cli, serve

from lachesis_cli.declared import deadline_of
from lachesis_controller.config import Settings


@pytest.fixture
def live_url(settings: Settings, agents: Callable[[str], FakeAgent]) -> Iterator[str]:
    for url in serve(settings):
        with httpx.Client(base_url=url) as client:
            assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
            enroll(client, agents("host-a"))  # type: ignore[arg-type]
        yield url


def test_declare_list_pause_resume_cancel(live_url: str, agents: Callable[[str], FakeAgent]) -> None:
    made = cli(
        live_url,
        "declared",
        "create",
        "/mnt/data/a",
        "/mnt/data/b",
        "--host",
        "host-a",
        "--tenant",
        TENANT["name"],
        "--by",
        "2h",
        "--id",
        "scrub-1",
        "--paused",
    )
    assert made.exit_code == 0, made.output
    assert "declared scrub-1 on host-a" in made.stdout
    (job,) = json.loads(cli(live_url, "declared", "list", "--json").stdout)
    assert ([f["path"] for f in job["files"]], job["paused"], job["state"]) == (
        ["/mnt/data/a", "/mnt/data/b"],
        True,
        "pending",
    )
    assert "scrub-1  host-a" in cli(live_url, "declared", "resume", "scrub-1").stdout
    assert json.loads(cli(live_url, "declared", "show", "scrub-1").stdout)["paused"] is False
    assert "cancelled" in cli(live_url, "declared", "cancel", "scrub-1").stdout
    again = cli(live_url, "declared", "cancel", "scrub-1")
    assert again.exit_code == 2 and "is cancelled" in again.output


def test_bad_input_exits_2_and_declares_nothing(live_url: str) -> None:
    for args in (["--by", "soon"], ["--by", "2030-01-01T00:00:00"], ["--by", "2h", "--host", "nowhere"]):
        base = {"--host": "host-a", "--tenant": TENANT["name"]}
        flags = [x for k, v in base.items() if k not in args for x in (k, v)]
        result = cli(live_url, "declared", "create", "/mnt/data/a", *flags, *args)
        assert result.exit_code == 2, (args, result.output)
    assert cli(live_url, "declared", "list").stdout.strip() == "no declared jobs"


def test_deadlines_are_durations_or_times_with_a_zone() -> None:
    now = datetime(2026, 11, 25, 8, 0, tzinfo=UTC)
    assert deadline_of("90m", now) == "2026-11-25T09:30:00+00:00"
    assert deadline_of("7d", now) == "2026-12-02T08:00:00+00:00"
    assert deadline_of("2026-11-26T00:00:00Z") == "2026-11-26T00:00:00Z"
