"""What the API lets a caller store: how many of each thing, and text that means one thing.

Counts are bounded so that one request cannot make every later one slow (each rule and
classifier is shipped to every host in every generation). Paths are absolute and normal
(no `.` or `..` segment, no `//`): a prefix or a target must name the same file the agent
and a reader of the rule would think it names. Control characters (NUL above all) are
refused everywhere a host path, prefix or classifier is written, since C strings on the
agent's side end at the first NUL.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lachesis_controller.validation.problems import invalid

MAX_TENANTS = 1000
MAX_CLASSIFIERS = 64  # per tenant
MAX_RULES = 10_000  # in total, and per policy
MAX_DETOURS = 16  # per rule
MAX_HOSTS_PER_ITEM = 1024  # hosts a rule or stage names
MAX_STAGES = 1024  # per policy, as in the desired-state contract
MAX_PATHS = 16  # replica sets, tail-latency candidates, shared_with
MAX_PATH_CHARS = 4096  # PATH_MAX

# The same paths as normal_path(..., trailing_slash=False), for JSON Schema readers: the bus
# contract's $defs/host_path (api-schemas/bus/common.schema.json) and the policy schema.
_SEGMENT_CHAR = r"[^/\x00-\x1f\x7f]"
HOST_PATH_PATTERN = r"^(/([^/\x00-\x1f\x7f.]|\.[^/\x00-\x1f\x7f.]|\.\.[^/\x00-\x1f\x7f])" + _SEGMENT_CHAR + r"*)+$"
# A remote endpoint of a file detour (agents/fs forwards to it), not a host path.
REMOTE_ENDPOINT = re.compile(r"tcp://[^/\s]+:[0-9]{1,5}(/[^\s]*)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def no_control_characters(value: str) -> str:
    if match := _CONTROL.search(value):
        raise ValueError(f"control character {match.group()!r} at offset {match.start()} is not allowed")
    return value


def normal_path(value: str, *, trailing_slash: bool = False) -> str:
    """The value if it is an absolute, normal path; ValueError saying what is wrong otherwise."""
    check_prefix_text(value)
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path (it must start with /)")
    if "//" in value:
        raise ValueError(f"{value!r} has an empty segment (//)")
    if value == "/" and not trailing_slash:
        raise ValueError("'/' is the whole file system, not a path in it")
    trailing = len(value) > 1 and value.endswith("/")
    if trailing and not trailing_slash:
        raise ValueError(f"{value!r} ends with /")
    body = value[1:-1] if trailing else value[1:]
    if any(segment in {".", ".."} for segment in body.split("/")):
        raise ValueError(f"{value!r} has a . or .. segment")
    return value


def _prefix(value: str) -> str:
    return normal_path(value, trailing_slash=True)


def under(path: str, root: str) -> bool:
    """Whether path is root or lies below it (both normal; a root may end with /)."""
    root = root.rstrip("/")
    return path == root or path.startswith(root + "/") or root == ""


HostPath = Annotated[
    str,
    Field(
        min_length=2,
        max_length=MAX_PATH_CHARS,
        json_schema_extra={"pattern": HOST_PATH_PATTERN},
        description="Absolute, normal path (no . or .. segment, no //, no trailing /, no control character).",
    ),
    AfterValidator(normal_path),
]
PathPrefix = Annotated[
    str,
    Field(min_length=1, max_length=MAX_PATH_CHARS, description="Absolute, normal path prefix; may end with /."),
    AfterValidator(_prefix),
]
Text = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS), AfterValidator(no_control_characters)]


def check_prefix_text(value: str) -> str:
    if len(value) > MAX_PATH_CHARS:
        raise ValueError(f"longer than {MAX_PATH_CHARS} characters")
    return no_control_characters(value)


def check_classifier_value(kind: str, value: str) -> str:
    if kind == "path_prefix":
        return _prefix(value)
    # What the agents' switch could not decide would be refused there (a nacked rollout):
    # refuse it here, naming the field, before anything ships.
    if kind == "uid" and not (value.isascii() and value.isdigit() and int(value) < 1 << 32):
        raise ValueError("a uid is a decimal number from 0 to 4294967295")
    if kind == "cgroup" and not value.startswith("/"):
        raise ValueError("a cgroup is an absolute cgroup v2 path (it starts with /)")
    value = no_control_characters(value)
    if kind == "cgroup":
        _not_a_host_path(value)
    return value


# Where cgroup2 is mounted on most hosts (/sys/fs/cgroup, /sys/fs/cgroup/unified beside v1).
CGROUP_MOUNT = "/sys/fs/cgroup"


def _not_a_host_path(cgroup: str) -> None:
    """A cgroup classifier means the cgroup v2 path /proc/PID/cgroup shows, relative to the
    cgroup2 root (`/analytics`): the FUSE switch compares that at open, and the eBPF metrics
    find the directory under each host's own cgroup2 mount. A host path under /sys/fs/cgroup
    would never match at the switch (the agents refuse it too, lachesis_switch::cgroup), and
    which cgroup it names depends on each host's mounts, so it is refused rather than
    rewritten: one spelling, one meaning on every host."""
    if cgroup != CGROUP_MOUNT and not cgroup.startswith(CGROUP_MOUNT + "/"):
        return
    rest = cgroup[len(CGROUP_MOUNT) :]
    # /sys/fs/cgroup/unified/... on a hybrid host, /sys/fs/cgroup/... on a pure v2 one.
    if rest == "/unified" or rest.startswith("/unified/"):
        rest = rest[len("/unified") :]
    meant = rest.rstrip("/") or "/"
    raise ValueError(
        f"{cgroup!r} is a host path under the cgroup2 mount {CGROUP_MOUNT}: a cgroup is the cgroup v2 path "
        f"/proc/PID/cgroup shows, relative to the cgroup2 root (here probably {meant!r})"
    )


def check_detour_target(kind: str, target: str) -> str:
    no_control_characters(target)
    if kind == "file" and not REMOTE_ENDPOINT.fullmatch(target):
        try:
            normal_path(target)
        except ValueError as exc:
            raise ValueError(f"a file target is an absolute, normal path or tcp://HOST:PORT/...: {exc}") from None
    return target


def require_room(session: Session, model: type, limit: int, what: str) -> None:
    """422 when the table of `model` already holds `limit` rows: one more would pass the bound."""
    within((session.scalar(select(func.count()).select_from(model)) or 0) + 1, limit, what, "name")


def within(count: int, limit: int, what: str, field: str) -> None:
    """422 naming `field` when a change would leave `count` (more than `limit`) of `what`."""
    if count > limit:
        raise invalid([(field, f"{count} {what} in all would pass the limit of {limit}")])
