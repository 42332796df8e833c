"""The agent's switch cannot be made to write anywhere as root (the agent half of tenant confinement).

A generation whose rules name a file endpoint outside the agent's endpoint roots (`/etc`, or a
directory beside the roots) is refused by the agent with the reason in its ack, nothing is
created there, and the rules it had stay in force. Files the switch creates in an endpoint on
behalf of an unprivileged writer belong to that writer, with the writer's file mode.

The refused generation is published straight onto the agent's bus keys, as the controller
would, so the test holds whatever the controller itself accepts. Needs root and /dev/fuse
(under CI=true a missing one fails).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import HOST, Cluster, mounted, wait_for

WRITER_UID = 4321


def to_file(name: str, prefix: str, target: Path | str) -> dict:
    return {
        "name": name,
        "priority": 10,
        "match": {"path_prefix": prefix},
        "detours": [{"what": "io", "to": {"kind": "file", "target": str(target)}}],
    }


def publish_as_controller(cluster: Cluster, rules: list[dict]) -> int:
    """Sends the agent the next generation with `rules`, as the controller publishes one."""
    r = cluster.redis()
    desired = json.loads(r.get(f"lachesis:agent:{HOST}:desired"))
    desired.update(generation=desired["generation"] + 1, rules=rules, rollout_id=None)
    for key in ("phase", "quiesce", "restores"):
        desired.pop(key, None)
    text = json.dumps(desired)
    r.set(f"lachesis:agent:{HOST}:desired", text)
    r.xadd(f"lachesis:agent:{HOST}:inbox", {"msg": text})
    return desired["generation"]


def ack_of(cluster: Cluster, generation: int) -> dict | None:
    for ack in cluster.agent_messages("acks", HOST):
        if ack["generation"] == generation:
            return ack
    return None


def as_writer(directory: Path, name: str, data: bytes) -> None:
    """Creates `directory/name` as uid/gid WRITER_UID with mode 0640 (umask 0)."""
    dfd = os.open(directory, os.O_DIRECTORY)
    pid = os.fork()
    if pid == 0:  # the child drops to the writer and opens relative to the directory
        try:
            os.setgroups([])
            os.setgid(WRITER_UID)
            os.setuid(WRITER_UID)
            os.umask(0)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640, dir_fd=dfd)
            os.write(fd, data)
            os.fsync(fd)
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.close(dfd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the writer could not create {name}"


def test_endpoints_outside_the_roots_are_refused_and_copies_belong_to_the_writer(
    cluster: Cluster, confined_home: Path
) -> None:
    endpoint = cluster.tmp / "endpoints" / "shared"
    mnt = confined_home / "mnt"
    with cluster.api() as api:
        created = api.post("/api/v1/rules", json=to_file("shared-to-endpoint", "/shared", endpoint))
        assert created.status_code == 201, created.text
    assert cluster.wait_rollout_done(created.json()["rollout_id"], timeout=60)["state"] == "succeeded"
    wait_for("the FUSE mount", lambda: mounted(mnt), timeout=60)
    (mnt / "shared").mkdir()
    os.chmod(mnt / "shared", 0o777)

    as_writer(mnt / "shared", "mine", b"the writer's bytes")
    copy = (endpoint / "shared" / "mine").stat()
    assert (copy.st_uid, copy.st_gid) == (WRITER_UID, WRITER_UID)
    assert copy.st_mode & 0o777 == 0o640
    assert (endpoint / "shared" / "mine").read_bytes() == b"the writer's bytes"

    # Outside the roots: /etc, and a directory beside them. Refused with the reason; nothing made.
    beside = cluster.tmp / "beside"
    held = cluster.host(HOST)["acked_generation"]
    probe = Path("/etc") / f"lachesis-e2e-{os.getpid()}"
    for target in (probe, beside):
        generation = publish_as_controller(cluster, [to_file("escape", "/shared", target)])
        ack = wait_for(f"the agent's ack of generation {generation}", lambda g=generation: ack_of(cluster, g))
        assert ack["status"] == "rejected", ack
        assert f'"{target}" is outside' in ack["reason"], ack["reason"]
        assert not target.exists()

    # The rules in force are still the old ones, and the agent says it holds their generation.
    heartbeat = json.loads(cluster.redis().get(f"lachesis:agent:{HOST}:heartbeat"))
    assert heartbeat["generation"] == held, heartbeat
    as_writer(mnt / "shared", "still", b"after the refusals")
    assert (endpoint / "shared" / "still").read_bytes() == b"after the refusals"
