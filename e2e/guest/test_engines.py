"""Cache engines on the real path: the same engine and workload through the passthrough
backend in the guest and on the host's measuring device (data in a file, the FDP simulator
beside it) send the same bytes on each placement handle, and the devices count the same."""

from __future__ import annotations

import pytest
from vm import replay

# What in_guest.sh runs on /dev/ng0n1.
ARGS = ("--span-mib", "16", "--requests", "6000")


@pytest.mark.parametrize("engine", ["loc", "hybrid"])
def test_engine_on_the_passthrough_device_matches_the_simulator(guest, engine, tmp_path) -> None:
    real = guest.json(f"engine-{engine}.json")
    sim = replay(f"measured:{tmp_path / 'flash.img'}:1GiB:handles=8,ru=1MiB", engine, *ARGS)
    # Every hit returned the object that was set, on both.
    assert real["bad_hits"] == sim["bad_hits"] == 0
    assert real["hits"] == sim["hits"] > 0
    # The device took each write on the handle it was sent with, and nothing elsewhere.
    assert real["other_handle_changes"] == 0
    assert real["device_counted"] == real["sent"]
    assert sim["device_counted"] == sim["sent"]
    # Same bytes per handle on the emulated drive and on the simulator.
    assert real["device_counted"] == sim["device_counted"]
    handles = {"loc": {"0"}, "hybrid": {"0", "1"}}[engine]
    assert set(real["device_counted"]) == handles


def test_the_data_paths_cache_stage_runs_on_the_drive(guest) -> None:
    """`lachesis-fs mount` (the agent's FUSE data path) with a LOC cache stage on
    `nvme:/dev/ng0n1`, handle 6: a file written and read back through the mount is intact, the
    second read after dropping the page cache hits the stage, and what the drive took while
    mounted is what the stage says it wrote to flash, none of it on another handle."""
    written = (guest.root / "fs-sha-written").read_text().strip()
    assert written
    for name in ("fs-sha-read-1", "fs-sha-read-2", "fs-sha-backing"):
        assert (guest.root / name).read_text().strip() == written, name
    stats = guest.json("fs-stats.json")
    # Taken after the reads: two snapshots later than the one current when they ended.
    assert stats["snapshot"] > int((guest.root / "fs-snapshot-seen").read_text()) + 1
    (stage,) = [s["stats"] for s in stats["stages"] if s["name"] == "cache/t"]
    assert stage["hits"] > 0 and stage["flash_bytes_written"] > 0
    before, after = guest.json("fs-p0.json"), guest.json("fs-p1.json")
    took = after["statistics"]["host_bytes_written"] - before["statistics"]["host_bytes_written"]
    assert took == stage["flash_bytes_written"]
    for b, a in zip(before["ruh_status"], after["ruh_status"], strict=True):
        if b["placement_id"] != 6:
            assert a["available_media_writes"] == b["available_media_writes"], b["placement_id"]
