"""Declared stages (policies, REST) -> the stage contract one host runs, and its rules.

This is where the policy vocabulary becomes the agents' vocabulary, once, before shipping
(api-schemas/README.md, "Stages"):

| declared kind | shipped as |
|---|---|
| `cache` | a `cache` stage; `size_bytes` is the owner's allocation while one is in force, engine and placement handles are chosen per host; `parent` becomes `next`; with `serves` it is the server level of a two-level cache (run by the host's forwarding server), sized by the owner's (and `shared_with`'s) a2 while a two-level split is in force, while level 1 gets a1; `exclusive` ships with it (it holds what level 1 demotes) |
| `qos` | a `ratelimit` stage: the owner's class in the host's IO scheduler, `min_bandwidth_bytes_per_s` its reservation, `priority` its weight, `max_bandwidth_bytes_per_s` / `max_iops` its limits |
| `log` | a `log` stage |
| `replica_set` | no stage: a rule sending IO there becomes a read rule to `read_set` and a rule for the other ops to `write_set` (file detours) |
| `tail_latency` | with `candidates`: no stage, reads go to them (file detours; the switch spreads reads over them). With `servers`: IO goes to `servers[0]`; while `stages/forwarding.py` says the owner's writes are forwarded, a remote `log` stage `fwd/NAME` on that server comes first (with `reclaim_bytes_per_s` while reclaiming) |
| `fdp_placement` | no stage: the owner's cache stages on that device write with that handle; rules pass over it |

A rule left with no detour after passing over stages is not shipped (it has nothing to do).
Pure functions of their inputs, so the whole mapping is tested without a database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lachesis_controller.contracts.engine_parts import ENGINE_PARTS
from lachesis_controller.placement import Placement, Stream, assign
from lachesis_controller.stages.forwarding import LOG_ROOT, Forwarding, log_name, server_addr

MAX_NAME = 63


@dataclass(frozen=True)
class HostView:
    """What the resolution needs to know of one host."""

    host_id: str
    devices: tuple[str, ...] = ()  # flash devices in registration order
    # (device, tenant, part) -> handle, from a placement an operator asked the broker for
    # (POST /api/v1/placements); devices without one are placed automatically.
    handles: Mapping[tuple[str, str, str], int] = field(default_factory=dict)
    # device -> (placement handles, capacity bytes), as registered.
    geometry: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # (device, tenant, part) -> handle in the state last shipped to the host: automatic
    # placement keeps them (a stage whose handle changes is rebuilt, cold).
    previous: Mapping[tuple[str, str, str], int] = field(default_factory=dict)


# The measuring device's default spare share (agents/device/src/measured.rs).
AUTO_OVERPROVISIONING = 0.07


def assignments(stages: Iterable[Mapping[str, Any]], devices: Sequence[str]) -> dict[tuple[str, str, str], int]:
    """(device, tenant, part) -> handle of the owned flash cache stages in a shipped stage list
    (a stage without a device is on the host's first): what `HostView.previous` is next time."""
    out: dict[tuple[str, str, str], int] = {}
    for s in stages:
        device = s.get("device") or (devices[0] if devices else None)
        if s["kind"] != "cache" or not s.get("owner") or device is None:
            continue
        for p in s.get("placement", []):
            out.setdefault((device, s["owner"], p["part"]), int(p["handle"]))
    return out


def auto_placements(declared: Iterable[Mapping[str, Any]], host: HostView) -> dict[str, Placement]:
    """Device -> the broker's placement of the owned flash cache stages' streams on it, for
    devices with placement handles and no operator-requested placement. Spaces are the
    declared sizes, not the allocation, and writes are taken in proportion to space: the
    handles stay put while the allocation loop resizes stages (a new handle would rebuild
    a stage cold)."""
    out = {}
    for device, streams in cache_streams(declared, host).items():
        handles, _ = host.geometry.get(device, (0, 0))
        if handles < 2 or any(k[0] == device for k in host.handles):
            continue
        previous = {f"{t}/{p}": h for (d, t, p), h in host.previous.items() if d == device}
        placement = assign(streams, handles, AUTO_OVERPROVISIONING, previous)
        out[device] = placement
    return out


def cache_streams(declared: Iterable[Mapping[str, Any]], host: HostView) -> dict[str, list[Stream]]:
    """Device -> the write streams (tenant x engine part) of the owned flash cache stages on
    it, space and writes in proportion to the declared sizes."""
    by_device: dict[str, dict[str, float]] = {}
    for s in declared:
        if s["kind"] != "cache" or not s.get("owner") or not applies_to(s, host.host_id):
            continue
        engine = s.get("engine") or ("loc" if host.devices else "dram")
        device = s.get("device") or (host.devices[0] if host.devices else None)
        if device is None or engine == "dram":
            continue
        for part in ENGINE_PARTS[engine]:
            by_device.setdefault(device, {})[f"{s['owner']}/{part}"] = float(s["size_bytes"])
    out = {}
    for device, spaces in by_device.items():
        total = sum(spaces.values())
        out[device] = [
            Stream(name.split("/")[0], name.split("/")[1], space=v / total, writes=v / total)
            for name, v in sorted(spaces.items())
        ]
    return out


def applies_to(stage: Mapping[str, Any], host_id: str) -> bool:
    hosts = stage.get("hosts")
    return hosts is None or host_id in hosts


def _server_shares(declared: Iterable[Mapping[str, Any]], server: Mapping[str, int]) -> dict[str, int]:
    """Server-level stage name -> bytes: the a2 of its owner and of the tenants it is shared
    with (one consolidated pool at the server, Moirai §5.3.4), while a two-level split of one
    of them is in force."""
    out = {}
    for s in declared:
        tenants = [t for t in [s.get("owner"), *s.get("shared_with", [])] if t in server]
        if s["kind"] == "cache" and s.get("serves") and tenants:
            out[s["name"]] = sum(server[t] for t in tenants)
    return out


def _owner_shares(declared: Iterable[Mapping[str, Any]], allocation: Mapping[str, int]) -> dict[str, int]:
    """Stage name -> allocated bytes: each tenant's allocation goes to its level-1 cache
    stages, split in proportion to their declared sizes."""
    by_owner: dict[str, list[Mapping[str, Any]]] = {}
    for s in declared:
        if s["kind"] == "cache" and s.get("owner") in allocation and s.get("level", 1) == 1 and not s.get("serves"):
            by_owner.setdefault(s["owner"], []).append(s)
    out: dict[str, int] = {}
    for owner, stages in by_owner.items():
        total = sum(s["size_bytes"] for s in stages)
        left = int(allocation[owner])
        for i, s in enumerate(sorted(stages, key=lambda s: s["name"])):
            share = left if i == len(stages) - 1 else int(allocation[owner] * s["size_bytes"] / total)
            out[s["name"]] = share
            left -= share
    return out


def _cache(stage: Mapping[str, Any], host: HostView, size: int, fdp: Mapping[tuple[str, str], int]) -> dict[str, Any]:
    engine = stage.get("engine") or ("loc" if host.devices else "dram")
    device = stage.get("device")
    placement = []
    if engine != "dram":
        on = device or (host.devices[0] if host.devices else None)
        owner = stage.get("owner")
        for part in ENGINE_PARTS[engine]:
            handle = fdp.get((on or "", owner or "")) if owner else None
            if handle is None and owner is not None:
                handle = host.handles.get((on or "", owner, part))
            if handle is not None:
                placement.append({"part": part, "handle": handle})
    return {
        "kind": "cache",
        "name": stage["name"],
        "owner": stage.get("owner"),
        "engine": engine,
        "size_bytes": int(size),
        "write_mode": stage.get("write_mode", "through"),
        "eviction": "fifo" if stage.get("eviction") == "fifo" else "lru",
        "max_dirty_bytes": stage.get("max_dirty_bytes", 16 << 20),
        "device": device,
        "placement": placement,
        "next": stage.get("parent"),
        **({"serves": list(stage["serves"])} if stage.get("serves") else {}),
        **({"exclusive": True} if stage.get("serves") and stage.get("exclusive") else {}),
    }


def shipped_stages(
    declared: Iterable[Mapping[str, Any]],
    host: HostView,
    allocation: Mapping[str, int] | None,
    server: Mapping[str, int] | None = None,
    forwarding: Mapping[str, Forwarding] | None = None,
) -> list[dict[str, Any]]:
    """The stage contract for `host`: every declared data-plane stage that applies to it.
    `server`: tenant -> a2 of the two-level splits in force (sizes the server-level stages)."""
    mine = [s for s in declared if applies_to(s, host.host_id)]
    # Stream names are "tenant/part" (placement.Stream.name).
    auto = {
        (device, tenant, part): handle
        for device, placement in auto_placements(mine, host).items()
        for name, handle in placement.handles.items()
        for tenant, _, part in [name.partition("/")]
    }
    host = HostView(host.host_id, host.devices, {**auto, **host.handles}, host.geometry, host.previous)
    sized = {**_owner_shares(mine, allocation or {}), **_server_shares(mine, server or {})}
    fdp = {
        (s["device"], s["owner"]): s["placement_handle"]
        for s in mine
        if s["kind"] == "fdp_placement" and s.get("owner")
    }
    out = []
    for s in sorted(mine, key=lambda s: s["name"]):
        if s["kind"] == "cache":
            out.append(_cache(s, host, sized.get(s["name"], s["size_bytes"]), fdp))
        elif s["kind"] == "qos":
            out.append(_qos(s))
        elif s["kind"] == "log":
            out.append({"kind": "log", "name": s["name"], "owner": s.get("owner"), "dir": s["dir"]})
        elif s["kind"] == "tail_latency" and s.get("servers") and s["name"] in (forwarding or {}):
            out.append(_forward_log(s, (forwarding or {})[s["name"]]))
    # A parent that does not run on this host (the server level of a two-level cache, on the
    # storage server) is reached through the route's remote endpoint, not chained here.
    names = {s["name"] for s in out}
    for s in out:
        if s["kind"] == "cache" and s["next"] not in names:
            s["next"] = None
    return fit_devices(out, host)


# Share of a device its flash cache stages may take together: the rest covers rounding to
# whole regions and the engines' minimum of a few regions each.
DEVICE_SHARE = 0.9


def fit_devices(stages: list[dict[str, Any]], host: HostView) -> list[dict[str, Any]]:
    """Flash cache stages declared larger together than their device can hold are scaled
    down in proportion to fit it (a 64 GiB declaration on a 1 GiB device installs what the
    device holds); the REST API shows the shipped size as the stage's allocated size."""
    by_device: dict[str, list[dict[str, Any]]] = {}
    for s in stages:
        if s["kind"] == "cache" and s["engine"] != "dram":
            device = s["device"] or (host.devices[0] if host.devices else None)
            if device is not None:
                by_device.setdefault(device, []).append(s)
    for device, on in by_device.items():
        _, capacity = host.geometry.get(device, (0, 0))
        total = sum(s["size_bytes"] for s in on)
        if capacity and total > DEVICE_SHARE * capacity:
            scale = DEVICE_SHARE * capacity / total
            for s in on:
                s["size_bytes"] = int(s["size_bytes"] * scale)
    return stages


def _qos(stage: Mapping[str, Any]) -> dict[str, Any]:
    """A qos stage: its owner's class in the host's IO scheduler (reservation, weight from the
    priority, limits), so even one without limits ships: its priority is enforced."""
    out = {
        "kind": "ratelimit",
        "name": stage["name"],
        "owner": stage.get("owner"),
        "iops": stage.get("max_iops"),
        "bytes_per_s": stage.get("max_bandwidth_bytes_per_s"),
        "priority": stage.get("priority") or "normal",
    }
    if stage.get("min_bandwidth_bytes_per_s"):
        out["min_bytes_per_s"] = stage["min_bandwidth_bytes_per_s"]
    return out


def _forward_log(stage: Mapping[str, Any], fwd: Forwarding) -> dict[str, Any]:
    """The remote log a tail_latency stage's owner's writes are forwarded into."""
    log = {
        "kind": "log",
        "name": log_name(stage["name"]),
        "owner": stage.get("owner"),
        "dir": f"{LOG_ROOT}/{stage['name'].replace('/', '-')}",
        "remote": "tcp://" + server_addr(fwd.to),
    }
    if fwd.reclaim_bytes_per_s is not None:
        log["reclaim_bytes_per_s"] = fwd.reclaim_bytes_per_s
    return log


def _files(paths: Iterable[str]) -> list[dict[str, Any]]:
    return [{"what": "io", "to": {"kind": "file", "target": p}} for p in paths]


def _suffixed(name: str, suffix: str) -> str:
    return name[: MAX_NAME - len(suffix)].rstrip("-") + suffix


def shipped_rules(
    rules: Iterable[Mapping[str, Any]],
    declared: Mapping[str, Mapping[str, Any]],
    shipped: Iterable[str],
    host_id: str,
) -> list[dict[str, Any]]:
    """The rules as `host_id` runs them: detours to stages that are not data-plane stages
    resolved to what they stand for (see the module's table). `shipped`: names of the
    stages in the host's contract. A detour to a stage scoped to other hosts is dropped here,
    whatever its kind: a replica set or tail-latency stage has no data-plane stage of its own,
    so its `hosts` is honoured here or nowhere."""
    shipped = set(shipped)
    out: list[dict[str, Any]] = []
    for rule in rules:
        detours: list[dict[str, Any]] = []
        split: Mapping[str, Any] | None = None
        for d in rule["detours"]:
            target = d["to"]["target"]
            stage = declared.get(target) if d["to"]["kind"] == "stage" else None
            if stage is None or target in shipped:
                detours.append(dict(d))
            elif not applies_to(stage, host_id):
                continue
            elif stage["kind"] == "replica_set" and split is None:
                split = stage
            elif stage["kind"] == "tail_latency" and d["what"] == "io" and stage.get("servers"):
                # The owner's endpoint, behind the forwarding log while one is shipped.
                if log_name(target) in shipped:
                    detours.append({"what": "io", "to": {"kind": "stage", "target": log_name(target)}})
                detours.extend(_files(stage["servers"][:1]))
            elif stage["kind"] == "tail_latency" and d["what"] == "io":
                detours.extend(_files(stage["candidates"]))
            # fdp_placement: nothing on the IO path.
        base = {k: v for k, v in rule.items() if k not in ("detours",)}
        if split is None:
            if detours:
                out.append({**base, "detours": detours})
            continue
        ops = rule["match"].get("ops") or ["read", "write", "create", "delete"]
        reads = [o for o in ops if o == "read"]
        others = [o for o in ops if o != "read"]
        if reads:
            out.append(
                {
                    **base,
                    "match": {**rule["match"], "ops": reads},
                    "detours": detours + _files(split["read_set"]),
                }
            )
        if others:
            out.append(
                {
                    **base,
                    "name": _suffixed(rule["name"], "-writes") if reads else rule["name"],
                    "match": {**rule["match"], "ops": others},
                    "detours": detours + _files(split["write_set"]),
                }
            )
    return out
