"""Subset selection over a version's manifest (DESIGN §6 "Subset"). Pure.

The steps run in a fixed order, each over what the previous one kept: `ids` (exactly these) ->
`tags` (a case matches when it carries any of them) -> `limit` (the first N in dataset order) ->
`sample` (N cases chosen by a seeded rule). Cases always keep dataset order.

The sample rule gives the same answer on every machine and in every language: each candidate
case is ranked by `sha256(utf8("<seed>:<case digest>"))` (the case digest written
`sha256:<hex>`, the seed as its decimal or string form), the N smallest ranks (ties, which cannot
happen for distinct digests, broken by dataset position) are taken, and dataset order is
restored. Only the manifest is read: ids, digests and tags are all there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, compress, count, groupby, islice, repeat
from operator import itemgetter, sub
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.manifest import CaseTags, Manifest
from caseshelf.domain.models import BumpKind, DatasetId, Label

# Unknown ids are listed in full up to this many; beyond it, the first ones and a count.
MAX_LISTED_IDS = 50
DEFAULT_SEED = 0

Seed = int | Annotated[str, StringConstraints(min_length=1, max_length=256)]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RegisterAs(_Wire):
    """Register the selection as a derived version (same packs, no case bytes copied)."""

    id: DatasetId
    version: Label | None = None
    bump: BumpKind | None = None

    @model_validator(mode="after")
    def _version_or_bump(self) -> RegisterAs:
        if (self.version is None) == (self.bump is None):
            raise ValueError("register_as takes either a version or a bump (major|minor|patch)")
        return self


class SubsetRequest(_Wire):
    """The body of `POST /datasets/{id}/versions/{ref}/subset`."""

    ids: list[str] | None = Field(default=None, description="Exactly these case ids.")
    tags: list[str] | None = Field(default=None, description="Cases carrying any of these tags.")
    limit: int | None = Field(default=None, description="The first N cases, in dataset order.")
    sample: int | None = Field(
        default=None, description="N cases chosen by the seeded sample rule."
    )
    seed: Seed | None = Field(
        default=None, description=f"Seed of the sample rule (default {DEFAULT_SEED})."
    )
    register_as: RegisterAs | None = None

    def selection(self) -> Selection:
        return Selection(
            ids=tuple(self.ids) if self.ids is not None else None,
            tags=tuple(self.tags) if self.tags is not None else None,
            limit=self.limit,
            sample=self.sample,
            seed=self.seed,
        )


class SubsetStamp(_Wire):
    """What a partial run carries so it can never pass for the whole version."""

    id: str = Field(description="The dataset id.")
    version: str
    content_digest: str = Field(description="The whole version's content digest.")
    total: int = Field(description="Cases in the whole version.")
    selected: int = Field(description="Cases selected.")
    ids: list[str] | None = None
    tags: list[str] | None = None
    limit: int | None = None
    sample: int | None = None
    seed: Seed | None = None


@dataclass(frozen=True)
class Selection:
    """A selection as plain values; `empty` when nothing narrows the version."""

    ids: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    limit: int | None = None
    sample: int | None = None
    seed: int | str | None = None

    @property
    def empty(self) -> bool:
        return self.ids is None and self.tags is None and self.limit is None and self.sample is None

    def as_record(self) -> dict[str, Any]:
        """The selection as recorded in a stamp and in `produced_by`: only what was given, with
        the seed made explicit whenever a sample was drawn."""
        out: dict[str, Any] = {}
        if self.ids is not None:
            out["ids"] = list(dict.fromkeys(self.ids))
        if self.tags is not None:
            out["tags"] = sorted(set(self.tags))
        if self.limit is not None:
            out["limit"] = self.limit
        if self.sample is not None:
            out["sample"] = self.sample
            out["seed"] = DEFAULT_SEED if self.seed is None else self.seed
        return out


@dataclass(frozen=True)
class Subset:
    indices: list[int]  # manifest positions, ascending (dataset order)
    stamp: SubsetStamp | None  # None when the selection was empty (the whole version)


def check_selection(sel: Selection) -> None:
    for name, value in (("limit", sel.limit), ("sample", sel.sample)):
        if value is not None and (isinstance(value, bool) or value < 1):
            raise BadRequest(f"{name} must be at least 1, got {value}", field=name)
    if sel.seed is not None and sel.sample is None:
        raise BadRequest("seed is used only with sample", field="seed")
    if sel.ids is not None and not sel.ids:
        raise BadRequest("ids is empty: give at least one case id, or leave ids out", field="ids")
    if sel.tags is not None and not sel.tags:
        raise BadRequest("tags is empty: give at least one tag, or leave tags out", field="tags")


def sample_rank(seed: int | str, digest_hex: str) -> bytes:
    """The rank of one case under the sample rule (smaller is taken first)."""
    return hashlib.sha256(f"{seed}:sha256:{digest_hex}".encode()).digest()


def sample_positions(
    candidates: Sequence[int], digests: Sequence[str], n: int, seed: int | str
) -> list[int]:
    """The `n` candidates with the smallest ranks (`sample_rank`), back in dataset order. Equal
    ranks (only equal digests give them) are taken in dataset order."""
    if n >= len(candidates):
        return list(candidates)
    # The hash state after the common prefix is copied rather than recomputed for every case.
    copy_prefix = hashlib.sha256(f"{seed}:sha256:".encode()).copy
    ranks: list[bytes] = []
    append = ranks.append
    for i in candidates:
        h = copy_prefix()
        h.update(digests[i].encode())
        append(h.digest())
    cut = _nth_smallest(ranks, n)
    # Every candidate ranked at or below the cut, picked without a Python-level loop.
    chosen = list(compress(candidates, map(cut.__ge__, ranks)))
    if len(chosen) > n:  # candidates tied at the cut: the earlier ones are taken
        room = n - sum(1 for r in ranks if r < cut)
        chosen = []
        for c, r in zip(candidates, ranks, strict=True):
            if r < cut or (r == cut and room > 0):
                room -= r == cut
                chosen.append(c)
    return chosen


def _nth_smallest(ranks: list[bytes], n: int) -> bytes:
    """The `n`-th smallest of `ranks` (1-based, counting repeats), `0 < n < len(ranks)`.

    Ranks are uniform: those under a bound a little above the expected `n`-th are kept (by a
    filter that runs in C) and only those are sorted; the bound doubles in the unlikely case
    too few are under it."""
    bound = (n * 5 // 4 + 64) * (1 << 32) // len(ranks)
    while bound < 1 << 32:
        under = sorted(filter(bound.to_bytes(4, "big").__gt__, ranks))
        if len(under) >= n:
            return under[n - 1]
        bound *= 2
    return sorted(ranks)[n - 1]


def _cases_tagged(case_tags: Sequence[Sequence[int]], wanted: set[int]) -> Iterator[int]:
    """Positions of the cases carrying any of the `wanted` tag indices, ascending, lazily."""
    if not isinstance(case_tags, CaseTags):
        return (i for i, tags in enumerate(case_tags) if not wanted.isdisjoint(tags))
    # Scan the flat tag column once, in C: the owning case of each tag entry, kept where the
    # tag is wanted, with repeats (a case with two wanted tags) folded.
    starts, values = case_tags.starts, case_tags.values
    owners = chain.from_iterable(map(repeat, count(), map(sub, islice(starts, 1, None), starts)))
    hits = compress(owners, map(wanted.__contains__, values))
    return map(itemgetter(0), groupby(hits))


def _unknown_ids_error(unknown: list[str]) -> BadRequest:
    shown = unknown[:MAX_LISTED_IDS]
    more = len(unknown) - len(shown)
    listed = ", ".join(repr(u) for u in shown) + (f" and {more} more" if more else "")
    return BadRequest(
        f"{len(unknown)} unknown case id(s): {listed}",
        case_ids=shown,
        unknown_count=len(unknown),
        field="ids",
    )


def select_subset(manifest: Manifest, sel: Selection, *, dataset_id: str, version: str) -> Subset:
    """Decide which cases of a version a selection keeps, and stamp the result."""
    check_selection(sel)
    total = len(manifest)
    if sel.empty:
        return Subset(list(range(total)), None)

    candidates: Iterable[int]
    if sel.ids is not None:
        wanted = dict.fromkeys(sel.ids)
        position = {cid: i for i, cid in enumerate(manifest.ids) if cid in wanted}
        unknown = [cid for cid in wanted if cid not in position]
        if unknown:
            raise _unknown_ids_error(unknown)
        candidates = sorted(position.values())
    else:
        candidates = range(total)

    if sel.tags is not None:
        tag_index = {name: t for t, name in enumerate(manifest.tag_names)}
        wanted_tags = {tag_index[t] for t in sel.tags if t in tag_index}
        case_tags = manifest.case_tags
        if not wanted_tags:
            candidates = ()
        elif sel.ids is not None:  # a few named cases: look at each
            candidates = (i for i in candidates if not wanted_tags.isdisjoint(case_tags[i]))
        else:
            candidates = _cases_tagged(case_tags, wanted_tags)

    if sel.limit is not None:
        # Lazily: tags + limit stops at the limit-th match instead of scanning every case.
        candidates = islice(candidates, sel.limit)
    chosen = list(candidates)

    if sel.sample is not None:
        seed = DEFAULT_SEED if sel.seed is None else sel.seed
        chosen = sample_positions(chosen, manifest.digest_list(), sel.sample, seed)

    if not chosen:
        raise BadRequest(
            f"the selection matches no case of {dataset_id}@{version}; check tags and limit",
            field="tags" if sel.tags is not None else None,
        )
    stamp = SubsetStamp(
        id=dataset_id,
        version=version,
        content_digest=manifest.content_digest,
        total=total,
        selected=len(chosen),
        **sel.as_record(),
    )
    return Subset(chosen, stamp)
