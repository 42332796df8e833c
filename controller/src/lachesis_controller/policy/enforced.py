"""Whether the agents can enforce a tenant's classifiers, from what they registered.

Every agent registers the data paths it runs and the classifier kinds each decides
(`registration.capabilities.data_paths`): the FUSE switch (`--mount`) sees file IO and
decides `cgroup`, `uid` and `path_prefix` at open; the key-value front end (`--kv-listen`)
sees requests and decides `key_prefix`. Each kind is about one data path's IO: a key prefix
about key-value requests, the others about file IO (who opens a file, or which file). A
tenant classifier is refused when a host runs the data path its kind is about and that data
path cannot decide it (a `process` classifier on a host with a FUSE mount): the tenant's IO
would reach the host's switch unrecognised and match none of its rules. A host that does
not run that data path sees none of that IO, so it does not refuse it (a key-prefix tenant
on a host with only a FUSE mount, a path tenant on a host with only the key-value front end).

A host whose registration has no `data_paths` (an agent from before they were registered,
or a host enrolled that never registered) is not judged: what it can decide is unknown.
The agent refuses (nacks) a generation with a classifier its switch cannot decide, so such
a host does not ignore one either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.models import Host
from lachesis_controller.validation.problems import FieldError, not_enforced

# The data path whose IO each classifier kind is about (bus/messages.py Classifier.kind).
DATA_PATH_OF = {
    "cgroup": "fuse",
    "uid": "fuse",
    "process": "fuse",
    "path_prefix": "fuse",
    "key_prefix": "kv",
}
DATA_PATH_NAMES = {"fuse": "the FUSE switch", "kv": "the key-value front end"}


def _decided(session: Session) -> dict[str, dict[str, set[str]]]:
    """host -> data path -> the classifier kinds it decides, for hosts that registered them."""
    out: dict[str, dict[str, set[str]]] = {}
    for host in session.scalars(select(Host).order_by(Host.id)):
        paths = (host.capabilities or {}).get("data_paths")
        if isinstance(paths, dict):
            out[host.id] = {name: set(p.get("classifiers", [])) for name, p in paths.items() if isinstance(p, dict)}
    return out


def check_classifiers(
    session: Session,
    tenants: Sequence[dict[str, Any]],
    field_of: Callable[[int, int], str],
    position: Callable[[int, int], tuple[int, int] | None] = lambda _t, _c: None,
) -> None:
    """Refuse (422 `not-enforced`) every classifier of `tenants` that a registered host's
    data path would see the IO of and cannot decide; each error names the field
    (`field_of(tenant index, classifier index)`), the data path and the hosts, and the
    problem lists every such host under `hosts`."""
    decided = _decided(session)
    errors: list[FieldError] = []
    hosts: list[str] = []
    for t_index, tenant in enumerate(tenants):
        for c_index, classifier in enumerate(tenant.get("classifiers", [])):
            kind = classifier["kind"]
            path = DATA_PATH_OF.get(kind)
            refusing = sorted(h for h, paths in decided.items() if path in paths and kind not in paths[path])
            if not refusing:
                continue
            hosts += refusing
            can = sorted({k for h in refusing for k in decided[h][path]})
            where = position(t_index, c_index)
            errors.append(FieldError(
                field=field_of(t_index, c_index),
                message=(
                    f"{DATA_PATH_NAMES[path]} of host(s) {', '.join(refusing)} cannot classify tenant "
                    f"{tenant['name']!r} by {kind} (it classifies by {', '.join(can) or 'nothing'}): "
                    "its IO there would match none of its rules"
                ),
                line=where[0] if where else None, column=where[1] if where else None,
            ))
    if errors:
        raise not_enforced(errors, hosts)

