"""Datasets as code from the client: the lock file (`caseshelf.client.pins`) and the verified
local cache (`caseshelf.client.cache`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from caseshelf.client.compare import CompareMixin

if TYPE_CHECKING:
    from caseshelf.client.cache import Cache
    from caseshelf.client.pins import CheckOut, PinnedOut, Pins, SyncOut, UnpinnedOut, UpdateOut


class PinsMixin(CompareMixin):
    """The lock file and the local cache."""

    _cache: Cache | None

    @property
    def cache(self) -> Cache:
        """The verified local cache of versions by content digest (`CASESHELF_CACHE`, else the
        user cache directory; `CASESHELF_CACHE_MAX` bounds it). Assign another to use it."""
        if self._cache is None:
            from caseshelf.client.cache import Cache  # lazy: pydantic, ~0.2 s

            self._cache = Cache.from_env()
        return self._cache

    @cache.setter
    def cache(self, value: Cache) -> None:
        self._cache = value

    def pins(self, lock: str | Path | None = None) -> Pins:
        """The lock file at `lock` (default: the nearest `caseshelf.lock`, see
        `caseshelf.client.pins.find_lock`) on this registry and this client's cache."""
        from caseshelf.client.pins import Pins  # lazy: pydantic, ~0.2 s

        return Pins(self, lock, self.cache)

    def pin(
        self,
        ref: str,
        *,
        name: str | None = None,
        ids: list[str] | None = None,
        tags: list[str] | None = None,
        limit: int | None = None,
        sample: int | None = None,
        seed: int | str | None = None,
        lock: str | Path | None = None,
    ) -> PinnedOut:
        """Pin `ref` in the lock file as `name` (default the dataset id): the version it
        resolves to and its content digest; with `ids`/`tags`/`limit`/`sample`, that subset of
        it (as `subset` selects it, stamped)."""
        from caseshelf.client.pins import selection_of  # lazy: pydantic, ~0.2 s

        sel = selection_of(ids=ids, tags=tags, limit=limit, sample=sample, seed=seed)
        return self.pins(lock).pin(ref, name=name, selection=sel)

    def unpin(self, name: str, *, lock: str | Path | None = None) -> UnpinnedOut:
        """Take pin `name` out of the lock file."""
        return self.pins(lock).unpin(name)

    def update(self, *names: str, lock: str | Path | None = None) -> UpdateOut:
        """Resolve the named pins (every pin when none is named) again and rewrite the lock
        file; `.pins` says what changed."""
        return self.pins(lock).update(names)

    def check(self, *, strict: bool = False, lock: str | Path | None = None) -> CheckOut:
        """Every pin against the registry in one request: `.ok`, and `.problems` (a pinned
        version gone, tombstoned or other content under its label; with `strict`, a ref that
        moved since it was locked, who moved it and the diff's counts)."""
        return self.pins(lock).check(strict=strict)

    def sync(self, *, lock: str | Path | None = None) -> SyncOut:
        """Every pinned version into the local cache, verified: loads need no registry after."""
        return self.pins(lock).sync()

    def load(self, name: str, *, lock: str | Path | None = None) -> list[dict[str, Any]]:
        """The cases of the version pin `name` of the nearest lock file pins (a subset pin: its
        selection), from the local cache when it holds them, verified; else fetched, verified
        and cached. Errors name the lock file, the line and the pin."""
        return self.pins(lock).load(name)
