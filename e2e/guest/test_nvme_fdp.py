"""The passthrough backend (`lachesis-nvme`, io_uring uring_cmd on /dev/ng0n1) against nvme-cli
on QEMU's emulated FDP namespace: every log page field the project decodes agrees, and a write
on placement handle k is taken by reclaim unit handle k."""

from __future__ import annotations

from vm import BLOCK, HANDLES, NAMESPACE_BYTES, RU_BYTES

TIMESTAMP_MASK = (1 << 48) - 1  # nvme-cli prints the field's 8 bytes; 48 bits are the time


def test_the_backend_opens_the_namespace_with_its_fdp_geometry(guest) -> None:
    p = guest.json("p0.json")
    assert p["nsid"] == 1
    assert p["geometry"] == {
        "capacity_bytes": NAMESPACE_BYTES,
        "block_size": BLOCK,
        "placement_handles": HANDLES,
        "reclaim_unit_bytes": RU_BYTES,
        "reclaim_groups": 1,
    }


def test_configurations_agree_with_nvme_cli(guest) -> None:
    ours = guest.json("p0.json")["configurations"]
    cli = guest.json("c0-configs.json")
    assert len(ours) == cli["n"] + 1 == len(cli["configs"])  # NUMFDPC is zero-based
    for o, c in zip(ours, cli["configs"], strict=True):
        assert o["rgif"] == c["fdpa"] & 0xF
        assert o["volatile_write_cache"] == bool(c["fdpa"] & 0x10)
        assert o["valid"] == bool(c["fdpa"] & 0x80)
        assert o["reclaim_groups"] == c["nrg"]
        assert len(o["ruh_types"]) == c["nruh"] == HANDLES
        assert o["namespaces"] == c["nnss"]
        assert o["reclaim_unit_bytes"] == c["runs"] == RU_BYTES
        assert o["ru_time_limit_s"] == c["erutl"]


def test_ruh_usage_agrees_with_nvme_cli(guest) -> None:
    for ours, cli in (("p0.json", "c0-usage.json"), ("p1.json", "c1-usage.json")):
        o = guest.json(ours)["ruh_usage"]
        c = guest.json(cli)
        assert len(o) == c["nruh"] == HANDLES
        for u, d in zip(o, c["ruhus"], strict=True):
            assert u["host_specified"] == bool(d["ruha"] & 1)
            assert u["controller_specified"] == bool(d["ruha"] & 2)
        assert all(u["host_specified"] for u in o)  # the namespace lists every handle


def test_statistics_agree_with_nvme_cli_and_count_the_writes(guest) -> None:
    written = sum(w["bytes"] for w in guest.json("exercise.json")["written"])
    for ours, cli in (("p0.json", "c0-stats.json"), ("p1.json", "c1-stats.json")):
        o = guest.json(ours)["statistics"]
        c = guest.json(cli)
        assert o["host_bytes_written"] == int(c["hbmw"])
        assert o["media_bytes_written"] == int(c["mbmw"])
        assert o["media_bytes_erased"] == int(c["mbe"])
    before = guest.json("p0.json")["statistics"]["host_bytes_written"]
    assert guest.json("p1.json")["statistics"]["host_bytes_written"] - before == written


def test_ruh_status_agrees_and_each_write_is_taken_by_its_handle(guest) -> None:
    for ours, cli in (("p0.json", "c0-status.json"), ("pm.json", "cm-status.json"), ("p1.json", "c1-status.json")):
        o = guest.json(ours)["ruh_status"]
        c = guest.json(cli)
        assert len(o) == c["nruhsd"] == HANDLES
        for s, d in zip(o, c["ruhss"], strict=True):
            assert (s["placement_id"], s["ruh_id"], s["time_remaining_s"], s["available_media_writes"]) == (
                d["pid"],
                d["ruhid"],
                d["earutr"],
                d["ruamw"],
            )
    by_handle = {w["handle"]: w["bytes"] for w in guest.json("exercise.json")["written"]}
    assert len(by_handle) >= 3
    before = guest.json("p0.json")["ruh_status"]
    after = guest.json("pm.json")["ruh_status"]
    for b, a in zip(before, after, strict=True):
        taken = (b["available_media_writes"] - a["available_media_writes"]) * BLOCK
        assert taken == by_handle.get(b["placement_id"], 0), b["placement_id"]


def test_host_events_agree_with_nvme_cli(guest) -> None:
    """`nvme fdp update` on placement id 3 after writes on it: the reclaim unit was not fully
    written, a host event both decoders read the same."""
    ours = guest.json("p1.json")["host_events"]
    cli = guest.json("c1-events-host.json")
    assert len(ours) == cli["n"] == len(cli["events"]) >= 1
    assert any(e["kind"] == "ru_not_fully_written" and e["placement_id"] == 3 for e in ours)
    kinds = {
        0x00: "ru_not_fully_written",
        0x01: "ru_time_limit_exceeded",
        0x02: "controller_reset_modified_ruh",
        0x03: "invalid_placement_id",
    }
    for o, c in zip(ours, cli["events"], strict=True):
        assert o["kind"] == kinds.get(c["type"], f"other_{c['type']:#04x}")
        assert o["timestamp_ms"] == c["timestamp"] & TIMESTAMP_MASK
        flags = c["fdpef"]
        assert (o["placement_id"] is not None) == bool(flags & 1)
        assert (o["nsid"] is not None) == bool(flags & 2)
        assert (o["ruh_id"] is not None) == bool(flags & 4)
        if flags & 1:
            assert o["placement_id"] == c["pid"]
        if flags & 2:
            assert o["nsid"] == c["nsid"]
    # Controller events (media reallocated): QEMU does not garbage-collect, so none, on both.
    assert guest.json("p1.json")["controller_events"] == []
    assert guest.json("c1-events-controller.json")["n"] == 0


def test_data_reads_back_and_a_deallocated_range_reads_zero(guest) -> None:
    e = guest.json("exercise.json")
    assert e["mismatched_bytes"] == 0
    assert {w["handle"] for w in e["written"]} == {0, 1, 3, 5}
    assert e["trimmed"]["handle"] == 1 and e["trimmed"]["reads_zero"] is True
