"""The one composition root: settings -> adapters -> services.

Handlers and the CLI call `services()`; nothing else builds a client or an adapter. Importing this
module does no I/O: settings are read and adapters built on first use, then cached.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from caseshelf.domain.errors import BadRequest
from caseshelf.ports import BlobStore, Index
from caseshelf.services.registry import RegistryService


class Settings(BaseModel):
    """Every setting, validated once. Read from the environment by `load_settings`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["local", "aws"] = "local"
    home: Path = Path(".caseshelf")
    bucket: str | None = None
    table: str | None = None
    endpoint_url: str | None = None
    region: str = "us-east-1"
    tenant: str = "local"
    principal: str = "local"
    roles: tuple[str, ...] = ()
    max_body_bytes: int = Field(default=6 * 1024 * 1024, ge=1)
    max_case_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    presign_expiry: int = Field(default=900, ge=1, le=7 * 24 * 3600)
    gc_grace_seconds: int = Field(default=24 * 3600, ge=0)
    hf_endpoint: str = "https://huggingface.co"
    hf_viewer_url: str = "https://datasets-server.huggingface.co"


_ENV = {
    "backend": "CASESHELF_BACKEND",
    "home": "CASESHELF_HOME",
    "bucket": "CASESHELF_BUCKET",
    "table": "CASESHELF_TABLE",
    "endpoint_url": "AWS_ENDPOINT_URL",
    "region": "AWS_DEFAULT_REGION",
    "tenant": "CASESHELF_TENANT",
    "principal": "CASESHELF_PRINCIPAL",
    "roles": "CASESHELF_ROLES",
    "max_body_bytes": "CASESHELF_MAX_BODY_BYTES",
    "max_case_bytes": "CASESHELF_MAX_CASE_BYTES",
    "presign_expiry": "CASESHELF_PRESIGN_EXPIRY",
    "gc_grace_seconds": "CASESHELF_GC_GRACE_SECONDS",
    "hf_endpoint": "HF_ENDPOINT",
    "hf_viewer_url": "CASESHELF_HF_VIEWER_URL",
}


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for name, var in _ENV.items():
        raw = env.get(var)
        if raw not in (None, ""):
            values[name] = (
                tuple(r.strip() for r in raw.split(",") if r.strip()) if name == "roles" else raw
            )
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        name = str(err["loc"][0])
        raise BadRequest(f"setting {_ENV.get(name, name)}: {err['msg']}", field=name) from None
    if settings.backend == "aws" and not (settings.bucket and settings.table):
        raise BadRequest("CASESHELF_BACKEND=aws needs CASESHELF_BUCKET and CASESHELF_TABLE")
    return settings


@dataclass
class Services:
    settings: Settings
    store: BlobStore
    index: Index
    registry: RegistryService


def build_adapters(settings: Settings) -> tuple[BlobStore, Index]:
    if settings.backend == "aws":
        import boto3

        from caseshelf.adapters.dynamodb import DynamoIndex
        from caseshelf.adapters.s3 import S3BlobStore

        session = boto3.session.Session(region_name=settings.region)
        s3 = session.client("s3", endpoint_url=settings.endpoint_url)
        ddb = session.client("dynamodb", endpoint_url=settings.endpoint_url)
        assert settings.bucket and settings.table
        return S3BlobStore(s3, settings.bucket), DynamoIndex(ddb, settings.table)
    from caseshelf.adapters.localfs import LocalBlobStore
    from caseshelf.adapters.sqlite import SqliteIndex

    home = settings.home.expanduser()
    return LocalBlobStore(home / "objects"), SqliteIndex(home / "index.sqlite")


def build(
    settings: Settings, *, store: BlobStore | None = None, index: Index | None = None
) -> Services:
    if store is None or index is None:
        built_store, built_index = build_adapters(settings)
        store = store or built_store
        index = index or built_index
    registry = RegistryService(
        store,
        index,
        max_case_bytes=settings.max_case_bytes,
        presign_expiry=settings.presign_expiry,
    )
    return Services(settings=settings, store=store, index=index, registry=registry)


_lock = threading.Lock()
_current: Services | None = None


def services() -> Services:
    """The process-wide services, built from the environment on first use."""
    global _current
    if _current is None:
        with _lock:
            if _current is None:
                _current = build(load_settings())
    return _current


def use(svc: Services | None) -> None:
    """Install (or with None, forget) the process-wide services: for the CLI, the local server
    and tests."""
    global _current
    with _lock:
        _current = svc
