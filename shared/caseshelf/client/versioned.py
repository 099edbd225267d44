"""What datasets and recipes share on the client: both are versioned kinds with the same routes
(`/{kind}`, `/{kind}/ID/versions`, `DELETE /{kind}/ID/versions/V`, `.../revive`), so their
listing, tombstoning and reviving are written once, here, for the collection and the wire
model each names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from caseshelf.client.base import ClientBase, M
from caseshelf.client.refs import parse_version

if TYPE_CHECKING:
    from caseshelf.api.dto import PageOut


class VersionedMixin(ClientBase):
    """The routes of a versioned kind (`datasets`, `recipes`)."""

    def _listed(
        self, collection: str, item: type[Any], shared: bool, cursor: str | None, limit: int
    ) -> PageOut[Any]:
        """One page of the kind's ids (`shared`: the `_shared` tenant's)."""
        query = {"shared": shared, "cursor": cursor, "limit": limit}
        return self._page(item, self.call("GET", collection, query=query))

    def _versions_page(
        self,
        collection: str,
        item: type[Any],
        name: str,
        include_deleted: bool,
        cursor: str | None,
        limit: int,
    ) -> PageOut[Any]:
        """One page of an id's versions, newest first."""
        query = {"include_deleted": include_deleted, "cursor": cursor, "limit": limit}
        return self._page(item, self.call("GET", collection, name, "versions", query=query))

    def _tombstone(self, collection: str, model: type[M], ref: str) -> M:
        """Tombstone version `ID@VERSION`: hidden, content kept."""
        name, v = parse_version(ref)
        return self._as(model, self.call("DELETE", collection, name, "versions", v))

    def _revive(self, collection: str, model: type[M], ref: str) -> M:
        """Restore tombstoned version `ID@VERSION`."""
        name, v = parse_version(ref)
        return self._as(model, self.call("POST", collection, name, "versions", v, "revive"))
