"""Who is calling and what they may touch: roles and tenant scope.

Roles nest: a viewer reads, an operator also changes tenants, rules and policies, an admin
also manages API tokens. A token with a tenant sees and changes only what belongs to that
tenant: its rules, its audit trail, the rollouts its changes caused. Rules without a
tenant apply to every tenant's IO, so they are not any one tenant's to see or change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from lachesis_controller.models import Role
from lachesis_controller.validation.problems import ProblemError

ADMIN: Final = "admin"
OPERATOR: Final = "operator"
VIEWER: Final = "viewer"
ROLES = (ADMIN, OPERATOR, VIEWER)


@dataclass(frozen=True)
class Principal:
    actor: str
    role: Role
    tenant: str | None
    token_id: str | None

    def sees_tenant(self, tenant: str | None) -> bool:
        return self.tenant is None or self.tenant == tenant


def refusal(principal: Principal, what: str) -> str:
    scope = f" scoped to tenant {principal.tenant!r}" if principal.tenant else ""
    return f"{principal.actor} ({principal.role}{scope}) may not {what}"


def forbidden(principal: Principal, what: str) -> ProblemError:
    return ProblemError(403, refusal(principal, what), kind="forbidden")


def require_tenant(principal: Principal, tenant: str | None, what: str) -> None:
    """403 unless the principal may act on a resource of `tenant` (None: all tenants')."""
    if not principal.sees_tenant(tenant):
        owner = f"tenant {tenant!r}" if tenant else "all tenants"
        raise forbidden(principal, f"{what} (it belongs to {owner})")
