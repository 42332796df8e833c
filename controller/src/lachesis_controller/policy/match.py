"""The rule algebra: which IO a rule's match selects (`matches`), whether one match selects
all the IO another does (`covers`) and whether some IO is selected by both (`overlaps`).

The same three relations are defined once in Rust (`agents/switch/src/algebra.rs`, what the
agents run); both are held to the shared cases in api-schemas/fixtures/rule-match/.
Matches are the bus form (`bus.messages.Match` dumped to a dict): an absent or null field
matches anything, `ops` absent or empty means every operation, `path_prefix` matches by
path component (`/data` matches `/data/x`, never `/database`), `key_prefix` by plain string
prefix, and `range` is half-open (a zero-length IO matches when its offset lies inside).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lachesis_controller.validation.bounds import under

MatchDict = Mapping[str, Any]


@dataclass(frozen=True)
class Io:
    """The header fields a match looks at; None where the IO has no such field."""

    op: str
    tenant: str | None = None
    path: str | None = None
    key: str | None = None
    offset: int = 0
    length: int = 0


def path_prefix_matches(prefix: str, path: str) -> bool:
    """Component-wise: trailing slashes of the prefix are ignored, so `/` matches every
    absolute path; an empty prefix matches nothing (the schema forbids it)."""
    if not prefix:
        return False
    if not prefix.rstrip("/"):
        return path.startswith("/")
    return under(path, prefix)


def _range_overlaps_io(r: Mapping[str, int], offset: int, length: int) -> bool:
    if length == 0:
        return r["start"] <= offset < r["end"]
    return offset < r["end"] and offset + length > r["start"]


OPS = frozenset({"read", "write", "create", "delete"})


def _ops(m: MatchDict) -> set[str] | None:
    """The operations a match selects; None for every operation (listing all four is the same)."""
    ops = set(m.get("ops") or ())
    return None if not ops or ops >= OPS else ops


def matches(m: MatchDict, io: Io) -> bool:
    """Whether the match selects the IO; a field the IO lacks (tenant, path, key) does not match."""
    if m.get("tenant") is not None and io.tenant != m["tenant"]:
        return False
    ops = _ops(m)
    if ops is not None and io.op not in ops:
        return False
    if m.get("path_prefix") is not None and (io.path is None or not path_prefix_matches(m["path_prefix"], io.path)):
        return False
    if m.get("key_prefix") is not None and (io.key is None or not io.key.startswith(m["key_prefix"])):
        return False
    return m.get("range") is None or _range_overlaps_io(m["range"], io.offset, io.length)


def covers(a: MatchDict, b: MatchDict) -> bool:
    """Whether every IO `b` selects is selected by `a` too."""
    if a.get("tenant") is not None and b.get("tenant") != a["tenant"]:
        return False
    ops_a, ops_b = _ops(a), _ops(b)
    if ops_a is not None and (ops_b is None or not ops_b <= ops_a):
        return False
    pa, pb = a.get("path_prefix"), b.get("path_prefix")
    # b's own trailing slash does not widen it: `/data/` selects what `/data` does.
    if pa is not None and (pb is None or not path_prefix_matches(pa, pb.rstrip("/") or "/")):
        return False
    ka, kb = a.get("key_prefix"), b.get("key_prefix")
    if ka is not None and (kb is None or not kb.startswith(ka)):
        return False
    ra, rb = a.get("range"), b.get("range")
    return ra is None or (rb is not None and ra["start"] <= rb["start"] and rb["end"] <= ra["end"])


def overlaps(a: MatchDict, b: MatchDict) -> bool:
    """Whether some IO is selected by both (the fields are independent, so each must meet)."""
    if a.get("tenant") is not None and b.get("tenant") is not None and a["tenant"] != b["tenant"]:
        return False
    ops_a, ops_b = _ops(a), _ops(b)
    if ops_a is not None and ops_b is not None and not ops_a & ops_b:
        return False
    pa, pb = a.get("path_prefix"), b.get("path_prefix")
    if pa is not None and pb is not None and not (path_prefix_matches(pa, pb) or path_prefix_matches(pb, pa)):
        return False
    ka, kb = a.get("key_prefix"), b.get("key_prefix")
    if ka is not None and kb is not None and not (ka.startswith(kb) or kb.startswith(ka)):
        return False
    ra, rb = a.get("range"), b.get("range")
    return ra is None or rb is None or (ra["start"] < rb["end"] and rb["start"] < ra["end"])
