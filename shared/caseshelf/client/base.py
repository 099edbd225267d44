"""What every area of the client stands on: the transport, one call of the API, and its
answer read into the API's own wire model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from caseshelf.client.transport import Request, Transport

if TYPE_CHECKING:
    from pydantic import BaseModel

    from caseshelf.api.dto import PageOut


M = TypeVar("M", bound="BaseModel")


PAGE_MAX = 1000


Progress = Callable[[int], None]


def _body(model: Any) -> Any:
    """A request body: a pydantic model as the JSON it stands for (fields left unset stay out,
    so server defaults apply), anything else as it is."""
    dump = getattr(model, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True, by_alias=True)
    return model


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class ClientBase:
    """The transport and the plumbing of a call; each area of the API is a mixin on it."""

    transport: Transport
    page_size: int

    def call(
        self,
        method: str,
        *segments: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        """One API call; its decoded JSON answer."""
        answer = self.transport.send(Request(method, segments, dict(query or {}), _body(body)))
        return answer.json()

    def _as(self, model: type[M], data: Any) -> M:
        """The answer read into its wire model (unknown keys are errors, as everywhere)."""
        return model.model_validate(data)

    def _page(self, item: type[Any], data: Any) -> PageOut[Any]:
        from caseshelf.api.dto import PageOut  # lazy: pydantic, ~0.2 s

        return PageOut[item].model_validate(data)  # type: ignore[valid-type]
