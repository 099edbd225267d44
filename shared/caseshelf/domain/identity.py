"""Who is asking. Built by the API from the authorizer context (or by the CLI from settings)."""

from __future__ import annotations

from dataclasses import dataclass

from caseshelf.domain.errors import Forbidden
from caseshelf.domain.layout import SHARED_TENANT, check_tenant


@dataclass(frozen=True)
class Identity:
    tenant: str
    principal: str
    roles: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        check_tenant(self.tenant)

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles

    def read_tenants(self) -> tuple[str, ...]:
        """Owner first, then the `_shared` fallback."""
        if self.tenant == SHARED_TENANT:
            return (SHARED_TENANT,)
        return (self.tenant, SHARED_TENANT)

    def check_can_write(self) -> str:
        """The tenant this identity writes to; `_shared` needs the admin role."""
        if self.tenant == SHARED_TENANT and not self.is_admin:
            raise Forbidden("writing to the _shared tenant needs the admin role")
        return self.tenant
