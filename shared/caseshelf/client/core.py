"""`Client`: every operation of the API as a method, over a transport.

A method builds one request (method, path, query, body) and reads the answer into the API's own
wire model (`caseshelf.api.dto`, `caseshelf.api.import_dto`): there is no third copy of any
shape. Errors are the API's typed errors, rebuilt from problem+json by the transport, the same
in process and over HTTP.

The methods live in one module an area, each a mixin on `caseshelf.client.base.ClientBase`,
layered so that each uses only those below it: `jobs` (uploads and jobs), `downloads`,
`datasets` (datasets and their versions), `cases`, `compare` (subset and diff), `pinning`
(the lock file and the local cache), `exports`, `imports` and `recipes`; what datasets and
recipes share (listing, tombstoning, reviving a version) is written once, in `versioned`.
`Client` is their front.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from caseshelf.client.base import PAGE_MAX
from caseshelf.client.datasets import STREAM_FILE_BYTES
from caseshelf.client.downloads import Downloaded, safe_filename
from caseshelf.client.exports import ExportsMixin
from caseshelf.client.imports import ImportsMixin
from caseshelf.client.pinning import PinsMixin
from caseshelf.client.recipes import RecipesMixin
from caseshelf.client.transport import InProcess, Transport

if TYPE_CHECKING:
    from caseshelf.client.cache import Cache

__all__ = ["PAGE_MAX", "STREAM_FILE_BYTES", "Client", "Downloaded", "safe_filename"]


class Client(PinsMixin, ExportsMixin, ImportsMixin, RecipesMixin):
    """The registry, from Python. Build one with `caseshelf.connect()`.

    Refs are `ID@REF` strings: `gsm8k@1.2.0`, `gsm8k@stable`, `gsm8k` (latest) or
    `gsm8k@sha256:<hex>`. Changes (`tag`, `delete`, `revive`) take `ID@VERSION`."""

    def __init__(self, transport: Transport, *, page_size: int = PAGE_MAX) -> None:
        self.transport = transport
        self.page_size = page_size
        self._cache: Cache | None = None

    def __repr__(self) -> str:
        return f"caseshelf.Client({self.transport!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.transport.close()

    @property
    def in_process(self) -> bool:
        return isinstance(self.transport, InProcess)
