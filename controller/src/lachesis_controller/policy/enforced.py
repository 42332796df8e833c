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

Rules' operations are judged the same way: each data path registers the operations its IO
carries (`ops`; the FUSE switch sees reads and writes, the key-value front end reads, writes
and deletes). A rule whose `match.ops` names an operation that a data path in its scope would
route the rule's IO through but never sees (a `create` rule on a host with a FUSE mount) is
refused: it would be shipped and never match. A data path that registered no `ops` is not
judged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Decides:
    """What one data path of a host registered: the classifier kinds it decides, and the
    operations its IO carries (None: not registered, not judged)."""

    classifiers: frozenset[str]
    ops: frozenset[str] | None


def _decided(session: Session) -> dict[str, dict[str, Decides]]:
    """host -> data path -> what it decides, for hosts that registered their data paths."""
    out: dict[str, dict[str, Decides]] = {}
    # Two columns as rows, not Host objects: every rule change reads all hosts here, and at
    # 1,000 hosts loading them as ORM objects was 5% of a rollout's controller CPU.
    for host_id, capabilities in session.execute(select(Host.id, Host.capabilities).order_by(Host.id)):
        paths = (capabilities or {}).get("data_paths")
        if isinstance(paths, dict):
            out[host_id] = {
                name: Decides(
                    frozenset(p.get("classifiers", [])), frozenset(p["ops"]) if isinstance(p.get("ops"), list) else None
                )
                for name, p in paths.items()
                if isinstance(p, dict)
            }
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
            if path is None:  # a kind no data path decides
                continue
            refusing = sorted(
                h for h, paths in decided.items() if path in paths and kind not in paths[path].classifiers
            )
            if not refusing:
                continue
            hosts += refusing
            can = sorted({k for h in refusing for k in decided[h][path].classifiers})
            where = position(t_index, c_index)
            errors.append(
                FieldError(
                    field=field_of(t_index, c_index),
                    message=(
                        f"{DATA_PATH_NAMES[path]} of host(s) {', '.join(refusing)} cannot classify tenant "
                        f"{tenant['name']!r} by {kind} (it classifies by {', '.join(can) or 'nothing'}): "
                        "its IO there would match none of its rules"
                    ),
                    line=where[0] if where else None,
                    column=where[1] if where else None,
                )
            )
    if errors:
        raise not_enforced(errors, hosts)


def rule_data_paths(match: Mapping[str, Any], tenants: Mapping[str, Sequence[Mapping[str, Any]]]) -> set[str]:
    """The data paths whose IO a rule's match can select: a key prefix only key-value
    requests, a path prefix only file IO; a tenant the data paths of its classifiers' kinds,
    and the key-value front end too (which also binds tenants to ports); else both."""
    if match.get("key_prefix") is not None:
        return {"kv"}
    if match.get("path_prefix") is not None:
        return {"fuse"}
    tenant = match.get("tenant")
    if tenant is not None and tenants.get(tenant):
        return {DATA_PATH_OF[c["kind"]] for c in tenants[tenant]} | {"kv"}
    return set(DATA_PATH_NAMES)


def check_rule_ops(
    session: Session,
    rules: Sequence[Mapping[str, Any]],
    tenants: Mapping[str, Sequence[Mapping[str, Any]]],
    field_of: Callable[[int, int], str],
    position: Callable[[int, int], tuple[int, int] | None] = lambda _r, _o: None,
) -> None:
    """Refuse (422 `not-enforced`) every operation in a rule's `match.ops` that a data path
    in the rule's scope (its hosts, or every host) would route its IO through but whose IO
    never carries that operation; `tenants`: tenant name -> its classifiers."""
    if not any((rule.get("match") or {}).get("ops") for rule in rules):
        return  # no operation to judge: the hosts need not be read
    decided = _decided(session)
    errors: list[FieldError] = []
    hosts: list[str] = []
    for r_index, rule in enumerate(rules):
        scope = rule.get("hosts")
        paths = rule_data_paths(rule.get("match") or {}, tenants)
        for o_index, op in enumerate((rule.get("match") or {}).get("ops") or []):
            refusing: dict[str, set[str]] = {}
            for host, registered in decided.items():
                if scope is not None and host not in scope:
                    continue
                for path in sorted(paths & registered.keys()):
                    ops = registered[path].ops
                    if ops is not None and op not in ops:
                        refusing.setdefault(path, set()).add(host)
            for path, on in sorted(refusing.items()):
                hosts += on
                where = position(r_index, o_index)
                errors.append(
                    FieldError(
                        field=field_of(r_index, o_index),
                        message=(
                            f"{DATA_PATH_NAMES[path]} of host(s) {', '.join(sorted(on))} never sees a {op} "
                            f"(its IO is {', '.join(sorted(decided[min(on)][path].ops or ()))}): rule "
                            f"{rule['name']!r} would never match there"
                        ),
                        line=where[0] if where else None,
                        column=where[1] if where else None,
                    )
                )
    if errors:
        raise not_enforced(errors, hosts)
