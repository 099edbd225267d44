"""Where things live in the object store (architecture §4). Every key is under `t/<tenant>/`."""

from __future__ import annotations

import re

from caseshelf.domain.errors import BadRequest

_TENANT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
SHARED_TENANT = "_shared"


def check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant) or tenant in {".", ".."}:
        raise BadRequest(f"invalid tenant {tenant!r}", field="tenant")
    return tenant


def root(tenant: str) -> str:
    return f"t/{check_tenant(tenant)}/"


def pack_key(tenant: str, hex_digest: str) -> str:
    return f"{root(tenant)}packs/{hex_digest}"


def blob_key(tenant: str, hex_digest: str) -> str:
    return f"{root(tenant)}blobs/{hex_digest}"


def manifest_key(tenant: str, content_digest: str) -> str:
    return f"{root(tenant)}manifests/{content_digest.removeprefix('sha256:')}.json"


def chunk_key(tenant: str, hex_digest: str) -> str:
    """A manifest chunk (format 3): under `manifests/`, keyed by the sha256 of its bytes."""
    return f"{root(tenant)}manifests/chunks/{hex_digest}"


def sample_key(tenant: str, hex_digest: str) -> str:
    """A sample column a manifest root names (format 4), keyed by the sha256 of its bytes."""
    return f"{root(tenant)}manifests/sample/{hex_digest}"


def delta_key(tenant: str, hex_digest: str) -> str:
    """A version's change against its base, named by its root (format 4), keyed by sha256."""
    return f"{root(tenant)}manifests/delta/{hex_digest}"


def superseded_key(tenant: str, hex_digest: str) -> str:
    """The superseded copies a format 3 manifest names, keyed by the sha256 of the object."""
    return f"{root(tenant)}manifests/superseded/{hex_digest}"


def download_key(tenant: str, content_digest: str) -> str:
    return f"{root(tenant)}exports/downloads/{content_digest.removeprefix('sha256:')}.json"


def case_object_key(tenant: str, hex_digest: str) -> str:
    """One case's record as its own object (a case too large for a page), by its digest, in
    the transient exports area beside the downloads."""
    return f"{root(tenant)}exports/cases/{hex_digest}.json"
