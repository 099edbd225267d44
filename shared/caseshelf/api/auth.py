"""Who is calling, read only from what the authorizer put in the request context.

API Gateway fills `requestContext.authorizer` after it has verified the caller; the client cannot
write there. Headers, the path and the body are never consulted: a tenant named anywhere else
would be a tenant the caller chose.

Two shapes are understood:
- a Cognito user-pool authorizer: `authorizer.claims` with `custom:tenant`, `sub` (or
  `cognito:username`) and `custom:roles` (a comma list);
- a Lambda authorizer (and the local server): `authorizer.tenant`, `authorizer.principalId`,
  `authorizer.roles` (a comma list).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from caseshelf.domain.errors import BadRequest, Forbidden
from caseshelf.domain.identity import Identity


def _roles(raw: Any) -> frozenset[str]:
    if raw is None:
        return frozenset()
    parts = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else []
    return frozenset(p.strip() for p in parts if isinstance(p, str) and p.strip())


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def identity_from_event(event: Mapping[str, Any]) -> Identity:
    """The caller's Identity; 403 when the authorizer gave no tenant or principal."""
    ctx = event.get("requestContext") if isinstance(event, Mapping) else None
    authorizer = ctx.get("authorizer") if isinstance(ctx, Mapping) else None
    if not isinstance(authorizer, Mapping):
        raise Forbidden("no authorizer context: the request was not authenticated")
    claims = authorizer.get("claims")
    if isinstance(claims, Mapping):
        tenant = _text(claims.get("custom:tenant"))
        principal = _text(claims.get("sub")) or _text(claims.get("cognito:username"))
        roles = _roles(claims.get("custom:roles"))
    else:
        tenant = _text(authorizer.get("tenant"))
        principal = _text(authorizer.get("principalId"))
        roles = _roles(authorizer.get("roles"))
    if tenant is None:
        raise Forbidden("the authorizer context names no tenant")
    if principal is None:
        raise Forbidden("the authorizer context names no principal")
    try:
        return Identity(tenant=tenant, principal=principal, roles=roles)
    except BadRequest:
        raise Forbidden("the authorizer context names an invalid tenant") from None
