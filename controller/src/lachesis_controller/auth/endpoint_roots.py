"""Where a tenant-scoped token may send IO on a host: its host paths confined to roots.

A tenant-scoped operator names host paths: a rule's file detour targets, a policy's log
directories, replica sets and tail-latency candidates. The switch opens them on the host, so
each must lie under the tenant's own path_prefix classifiers or under one of the
controller's LACHESIS_ENDPOINT_ROOTS. Neither can be widened by that token: the roots are the
controller's configuration, and a tenant's classifiers are not a tenant-scoped token's to
change (a policy from one may not declare tenants). Unscoped tokens (admins, operators of all
tenants) are not confined here; the agent confines every target to its own roots besides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.orm import Session

from lachesis_controller.auth.authz import Principal
from lachesis_controller.models import Tenant
from lachesis_controller.validation.bounds import REMOTE_ENDPOINT, under
from lachesis_controller.validation.problems import invalid


def file_targets(detours: Iterable[Mapping[str, Any]], field: str) -> list[tuple[str, str]]:
    """(field, path) of each detour to a host path (remote tcp:// endpoints are not one)."""
    return [
        (f"{field}[{index}].to.target", str(detour["to"]["target"]))
        for index, detour in enumerate(detours)
        if detour["to"]["kind"] == "file" and not REMOTE_ENDPOINT.fullmatch(str(detour["to"]["target"]))
    ]


def roots_of(session: Session, tenant: str, configured: Iterable[str]) -> list[str]:
    row = session.get(Tenant, tenant)
    own = [c["value"] for c in (row.classifiers if row else []) if c["kind"] == "path_prefix"]
    return sorted({*own, *configured})


def confine(
    session: Session, principal: Principal, configured: Iterable[str], paths: Iterable[tuple[str, str]]
) -> None:
    """422 naming each (field, path) outside the roots of the principal's tenant; nothing for
    a principal of all tenants."""
    if principal.tenant is None:
        return
    roots = roots_of(session, principal.tenant, configured)
    allowed = ", ".join(roots) if roots else "none"
    errors = [
        (field, f"{path!r} is outside the roots tenant {principal.tenant!r} may use ({allowed})")
        for field, path in paths
        if not any(under(path, root) for root in roots)
    ]
    if errors:
        raise invalid(errors)
