"""Declarative maintenance IO (DINGOS) end to end: a real agent with a FUSE mount, a scrub of
a file set declared through the controller while a foreground reader reads part of it
through the mount. The job completes; the dispatcher's bytes and the foreground-covered
bytes add up to what was declared, the dispatcher read no more than what the foreground left,
the scrub's checksums are the files', and bad declarations change nothing. The deadline is an
hour away: met-ness is the job's state from its counters, never elapsed time. Needs root and
/dev/fuse (as the other data path tests; CI fails without them)."""

from __future__ import annotations

import os
import struct
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import HOST, Cluster, mounted, start_with_datapath, wait_for

MiB = 1 << 20
BLOCK = 64 << 10
URL = "/api/v1/apps/declared-io"
FILES = {"f0": 2 * MiB, "f1": 3 * MiB + 12345, "f2": 2 * MiB, "f3": 1 * MiB + 1}
# What the foreground reader reads through the mount: whole files, so every block of them.
FOREGROUND = ("f2", "f3")


def digest(data: bytes, start: int = 0) -> int:
    """The agent's range checksum: CRC-32 of the CRC-32s (little endian) of the range's bytes
    in each 64 KiB block aligned to file offsets (lachesis_declared::coverage::digest_of)."""
    crcs = b""
    off = start
    while off < start + len(data):
        end = min((off // BLOCK + 1) * BLOCK, start + len(data))
        crcs += struct.pack("<I", zlib.crc32(data[off - start : end - start]))
        off = end
    return zlib.crc32(crcs)


@pytest.fixture
def datapath(monkeypatch: pytest.MonkeyPatch, cluster: Cluster) -> tuple[Cluster, Path]:
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "300")
    return cluster, start_with_datapath(cluster, "64MiB")


def test_a_declared_scrub_counts_the_foreground_and_reads_the_rest(datapath: tuple[Cluster, Path]) -> None:
    cluster, home = datapath
    contents = {name: os.urandom(size) for name, size in FILES.items()}
    (home / "data" / "set").mkdir()
    for name, data in contents.items():
        (home / "data" / "set" / name).write_bytes(data)
    mnt = home / "mnt" / "set"
    deadline = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    job = {
        "id": "scrub-set",
        "host": HOST,
        "tenant": "archive",
        "deadline": deadline,
        "pace": "budget",
        "paused": True,
        "files": [{"path": str(mnt / name)} for name in FILES],
    }

    with cluster.api() as api:
        created = api.post("/api/v1/tenants", json={"name": "archive", "classifiers": [{"kind": "uid", "value": "0"}]})
        assert created.status_code == 201, created.text
        cluster.wait_rollout_done(created.json()["rollout_id"], timeout=60)
        wait_for("the FUSE mount", lambda: mounted(home / "mnt"), timeout=60)

        # Bad declarations: 4xx problems, and nothing declared anywhere.
        for bad, field in [
            ({**job, "host": "elsewhere"}, "host"),
            ({**job, "tenant": "nobody"}, "tenant"),
            ({**job, "deadline": (datetime.now(UTC) - timedelta(minutes=1)).isoformat()}, "deadline"),
            ({**job, "files": []}, "files"),
        ]:
            refused = api.post(URL, json=bad)
            assert refused.status_code == 422 and field in refused.text, refused.text
            assert refused.headers["content-type"].startswith("application/problem+json")
        assert api.get(URL).json() == []
        assert cluster.redis().get(f"lachesis:agent:{HOST}:declared-io") is None

        # Declared paused: the agent sizes it and reads nothing itself.
        created = api.post(URL, json=job)
        assert created.status_code == 201, created.text
        declared = sum(FILES.values())
        accepted = wait_for(
            "the agent to accept the job",
            lambda: (
                (j := api.get(f"{URL}/scrub-set").json())["state"] == "paused" and j["bytes_declared"] == declared and j
            ),
        )
        assert accepted["dispatched_bytes"] == 0

        # The foreground reads two of the files through the mount.
        share = 0
        for name in FOREGROUND:
            with open(mnt / name, "rb") as f:
                assert f.read() == contents[name]
            share += FILES[name]
        covered = wait_for(
            "the foreground reads to count",
            lambda: ((j := api.get(f"{URL}/scrub-set").json())["foreground_bytes"] >= share and j),
        )
        assert covered["dispatched_bytes"] == 0

        # Resumed: the dispatcher reads the rest.
        assert api.patch(f"{URL}/scrub-set", json={"paused": False}).status_code == 200
        done = wait_for(
            "the job done",
            lambda: ((j := api.get(f"{URL}/scrub-set").json())["state"] in ("done", "missed", "failed") and j),
            timeout=120,
        )

    assert done["state"] == "done", done
    assert done["bytes_declared"] == declared
    assert done["dispatched_bytes"] + done["foreground_bytes"] + done["shared_bytes"] == declared
    assert done["shared_bytes"] == 0
    # Every block the foreground read counted: the dispatcher read at most what it left.
    assert done["foreground_bytes"] >= share
    assert done["dispatched_bytes"] <= declared - share
    assert {c["path"]: c["crc32"] for c in done["checksums"]} == {
        str(mnt / name): digest(data) for name, data in contents.items()
    }
    # Done jobs leave the host's key.
    wait_for(
        "the job to leave the key",
        lambda: "scrub-set" not in (cluster.redis().get(f"lachesis:agent:{HOST}:declared-io") or ""),
    )
