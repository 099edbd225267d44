"""Subset selection over a version's manifest (architecture §6 "Subset"). Pure.

The steps run in a fixed order, each over what the previous one kept: `ids` (exactly these) ->
`tags` (a case matches when it carries any of them) -> `limit` (the first N in dataset order) ->
`sample` (N cases chosen by a seeded rule). Cases always keep dataset order.

The sample rule gives the same answer on every machine and in every language (`sample_rank`):
the seed picks a key `K = sha256(utf8("caseshelf-sample:<seed>"))` (the seed as its decimal or
string form); each candidate case is ranked by `(A * D + B) mod 2**64`, where `D` is the first 16
hex digits of its case digest read as an unsigned integer, `A` the first 8 bytes of `K`
(big-endian) with the lowest bit set and `B` the next 8 bytes. The N smallest ranks are taken
(equal ranks, which need equal digest prefixes, broken by dataset position) and dataset order is
restored. Case digests are uniformly random, and `D -> A * D + B` is a bijection modulo 2**64, so
every seed draws a uniform sample; seeds draw unrelated samples because `A` and `B` come from a
cryptographic hash of the seed. Ranking needs only integer arithmetic, which runs over the
whole digest column at once (`_column_lanes`). Only the manifest is read: ids, digests and tags
are all there; a selection is decided from the version's sample
columns covering it (ids, digest prefixes and tags, `columns_for_selection`,
`select_from_columns`).
"""

from __future__ import annotations

import hashlib
import re
import sys
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, compress, count, groupby, islice, repeat
from operator import itemgetter, sub
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from caseshelf.domain.chunks import Root, SampleColumn, digest_prefixes
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.manifest import CaseTags, Manifest, TagSetColumn, column_array
from caseshelf.domain.models import BumpKind, DatasetId, Label

# Unknown ids are listed in full up to this many; beyond it, the first ones and a count.
MAX_LISTED_IDS = 50
DEFAULT_SEED = 0

Seed = int | Annotated[str, StringConstraints(min_length=1, max_length=256)]


class _Wire(BaseModel):
    # Built on first use, as the other wire models are (`caseshelf.domain.models.Strict`).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)


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


_U64 = (1 << 64) - 1
_UNDER = re.compile(b"\x00")


def sample_key(seed: int | str) -> tuple[int, int]:
    """`(A, B)` of the sample rule for `seed`."""
    key = hashlib.sha256(f"caseshelf-sample:{seed}".encode()).digest()
    return int.from_bytes(key[:8], "big") | 1, int.from_bytes(key[8:16], "big")


def sample_rank(seed: int | str, digest_hex: str) -> int:
    """The rank of one case under the sample rule (smaller is taken first)."""
    a, b = sample_key(seed)
    return (a * int(digest_hex[:16], 16) + b) & _U64


def sample_positions(
    candidates: Sequence[int], digests: str | Sequence[str], n: int, seed: int | str
) -> list[int]:
    """The `n` candidates with the smallest ranks (`sample_rank`), back in dataset order. Equal
    ranks are taken in dataset order. `digests` is every case's digest (64 hex each), as a list
    or as the manifest's column text (all of them back to back)."""
    if n >= len(candidates):
        return list(candidates)
    text = digests if isinstance(digests, str) else "".join(digests)
    return sample_of_prefixes(candidates, digest_prefixes(text), n, seed)


def sample_of_prefixes(
    candidates: Sequence[int], prefixes: bytes, n: int, seed: int | str
) -> list[int]:
    """`sample_positions` from every case's digest prefix (`digest_prefixes`, 8 bytes a case):
    what a version's sample column holds (`caseshelf.domain.chunks.SampleColumn`)."""
    if n >= len(candidates):
        return list(candidates)
    a, b = sample_key(seed)
    total = len(prefixes) // 8
    if candidates == range(total):  # every case: chosen over the whole column
        return _column_smallest(_column_lanes(prefixes, a, b), n)
    ranks: list[int]
    if len(candidates) * 8 < total:  # a few candidates: rank each of them
        ranks = [
            (a * int.from_bytes(prefixes[8 * i : 8 * i + 8], "big") + b) & _U64 for i in candidates
        ]
    else:
        every = _column_ranks(_column_lanes(prefixes, a, b))
        ranks = list(map(every.__getitem__, candidates))
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


def _column_lanes(prefixes: bytes, a: int, b: int) -> bytes:
    """`a * D + b` for the `D` of every digest prefix (8 bytes a case, `digest_prefixes`),
    computed over the whole column at once: the prefixes go into 128-bit lanes of one big
    integer, so that one multiplication and one addition rank every case (a lane's product
    never carries into the next). Little-endian, 16 bytes a case: the first 8 are its rank (the
    value mod 2**64)."""
    count = len(prefixes) // 8
    column_prefixes = array("Q", prefixes)
    if sys.byteorder == "little":
        column_prefixes.byteswap()  # read them big-endian, as the hex digits are written
    lanes = array("Q", bytes(16 * count))
    lanes[::2] = column_prefixes
    if sys.byteorder == "big":
        lanes.byteswap()
    column = int.from_bytes(lanes, "little")
    offsets = int.from_bytes((b.to_bytes(8, "little") + bytes(8)) * count, "little")
    return (column * a + offsets).to_bytes(16 * count, "little")


def _column_ranks(lanes: bytes) -> list[int]:
    """Every rank of `_column_lanes`, in dataset order."""
    out = array("Q", lanes)
    if sys.byteorder == "big":
        out.byteswap()
    return out[::2].tolist()


def _column_smallest(lanes: bytes, n: int) -> list[int]:
    """The positions of the `n` smallest ranks of `_column_lanes` (equal ranks in dataset
    order), ascending; `0 < n < the number of cases`.

    Ranks are uniform: the cases whose rank's top byte is at most a bound a little above the
    expected `n`-th are found by a scan in C over the top bytes alone, and only those are
    ranked and sorted; the bound widens in the unlikely case too few are under it."""
    count = len(lanes) // 16
    top = lanes[7::16]  # the most significant byte of each rank
    bound = min(255, 256 * (n * 5 // 4 + 64) // count)
    while True:
        marks = top.translate(bytes(0 if v <= bound else 1 for v in range(256)))
        hits = [m.start() for m in _UNDER.finditer(marks)]
        if len(hits) >= n or bound == 255:
            break
        bound = min(255, bound * 2 + 1)
    # Every case outside `hits` ranks above every case in it, so the n smallest are in it.
    ranked = sorted((int.from_bytes(lanes[16 * i : 16 * i + 8], "little"), i) for i in hits)
    return sorted(i for _, i in ranked[:n])


def _nth_smallest(ranks: list[int], n: int) -> int:
    """The `n`-th smallest of `ranks` (1-based, counting repeats), `0 < n < len(ranks)`.

    Ranks are uniform over 64 bits: those under a bound a little above the expected `n`-th are
    kept (by a filter that runs in C) and only those are sorted; the bound doubles in the
    unlikely case too few are under it."""
    bound = (n * 5 // 4 + 64) * (1 << 64) // len(ranks)
    while bound < 1 << 64:
        under = sorted(filter(bound.__gt__, ranks))
        if len(under) >= n:
            return under[n - 1]
        bound *= 2
    return sorted(ranks)[n - 1]


def _cases_tagged(case_tags: Sequence[Sequence[int]], wanted: set[int]) -> Iterator[int]:
    """Positions of the cases carrying any of the `wanted` tag indices, ascending, lazily."""
    if isinstance(case_tags, TagSetColumn):
        return case_tags.tagged(wanted)
    if not isinstance(case_tags, CaseTags):
        return (i for i, tags in enumerate(case_tags) if not wanted.isdisjoint(tags))
    # Scan the flat tag column once, in C: the owning case of each tag entry, kept where the
    # tag is wanted, with repeats (a case with two wanted tags) folded.
    starts, values = column_array(case_tags.starts), column_array(case_tags.values)
    owners = chain.from_iterable(map(repeat, count(), map(sub, islice(starts, 1, None), starts)))
    hits = compress(owners, map(wanted.__contains__, values))
    return map(itemgetter(0), groupby(hits))


def count_tagged(case_tags: Sequence[Sequence[int]], wanted: set[int]) -> int:
    """How many cases carry any of the `wanted` tag indices: the scan of `_cases_tagged`, in C
    (tens of times faster than a loop over each case's tags)."""
    return len(list(_cases_tagged(case_tags, wanted))) if wanted else 0


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


def chunks_for_selection(root: Root, sel: Selection) -> list[int] | None:
    """The chunks of a version a selection must read (their id, tag and digest columns), or
    None for every chunk. Ids can be anywhere (ids are not sorted): every chunk. Tags: the
    chunks whose cases carry one of them (the root lists each chunk's tags). A limit alone (a
    sample may follow): the first chunks holding that many cases. Nothing narrowing: none."""
    if sel.empty:
        return []
    if sel.ids is not None:
        return None
    if sel.tags is not None:
        wanted = {t for t, name in enumerate(root.tag_names) if name in set(sel.tags)}
        return [n for n, tags in enumerate(root.chunk_tags) if not wanted.isdisjoint(tags)]
    if sel.limit is not None:
        out, held = [], 0
        for n, count in enumerate(root.chunk_counts):
            if held >= sel.limit:
                break
            out.append(n)
            held += count
        return out
    return None


def columns_answer(sel: Selection, *, tags: bool) -> bool:
    """Whether a version's sample columns decide a selection: they hold every case's id and
    digest prefix, and with `tags` (`Root.sample_tags`) its tags too, so every selection that
    narrows the version, bar one by tags from columns without them (format 4 roots)."""
    return not sel.empty and (tags or sel.tags is None)


def columns_for_selection(root: Root, sel: Selection) -> list[int]:
    """The sample columns of a version (numbers into `root.sample_keys`) a selection reads: the
    ones covering the chunks `chunks_for_selection` names, or every one."""
    numbers = chunks_for_selection(root, sel)
    if numbers is None:
        return list(range(len(root.sample_keys)))
    ends = list(accumulate(root.sample_chunks))
    return list(dict.fromkeys(bisect_right(ends, n) for n in numbers))


def select_subset(
    manifest: Manifest,
    sel: Selection,
    *,
    dataset_id: str,
    version: str,
    positions: Sequence[int] | None = None,
    total: int | None = None,
) -> Subset:
    """Decide which cases of a version a selection keeps, and stamp the result.

    `manifest` is the whole version's, or (with `positions` and `total`) the cases of the
    chunks `chunks_for_selection` names, back to back: `positions[i]` is case i's position in
    the version, which has `total` cases. The answer is the same either way."""
    check_selection(sel)
    total = len(manifest) if total is None else total
    if sel.empty:
        return Subset(list(range(total)), None)
    text = manifest.digest_text

    def prefixes(upto: int) -> bytes:
        return digest_prefixes(text()[: 64 * upto])

    chosen = _choose(sel, manifest.ids, manifest.tag_names, manifest.case_tags, prefixes)
    if positions is not None:
        chosen = [positions[i] for i in chosen]
    return _stamped(chosen, sel, dataset_id, version, manifest.content_digest, total)


def _choose(
    sel: Selection,
    ids: Sequence[str],
    tag_names: Sequence[str],
    case_tags: Sequence[Sequence[int]],
    prefixes: Callable[[int], bytes],
) -> list[int]:
    """The positions a selection that narrows keeps of cases with these `ids` and `case_tags`
    (numbers into `tag_names`), ascending. `prefixes(n)` is the first `n` cases' digest
    prefixes (`digest_prefixes`), asked for only when a sample is drawn."""
    candidates: Iterable[int]
    if sel.ids is not None:
        wanted = dict.fromkeys(sel.ids)
        position = {cid: i for i, cid in enumerate(ids) if cid in wanted}
        unknown = [cid for cid in wanted if cid not in position]
        if unknown:
            raise _unknown_ids_error(unknown)
        candidates = sorted(position.values())
    else:
        candidates = range(len(ids))

    if sel.tags is not None:
        tag_index = {name: t for t, name in enumerate(tag_names)}
        wanted_tags = {tag_index[t] for t in sel.tags if t in tag_index}
        if not wanted_tags:
            candidates = ()
        elif sel.ids is not None:  # a few named cases: look at each
            candidates = (i for i in candidates if not wanted_tags.isdisjoint(case_tags[i]))
        else:
            candidates = _cases_tagged(case_tags, wanted_tags)

    if sel.limit is not None:
        # Lazily: tags + limit stops at the limit-th match instead of scanning every case.
        if isinstance(candidates, range):
            candidates = candidates[: sel.limit]
        else:
            candidates = islice(candidates, sel.limit)
    if sel.sample is None:
        return list(candidates)
    seed = DEFAULT_SEED if sel.seed is None else sel.seed
    # (the first cases, when nothing else narrowed them: a range, never built as a list)
    pool = candidates if isinstance(candidates, range) else list(candidates)
    if sel.sample >= len(pool):
        return list(pool)
    return sample_of_prefixes(pool, prefixes(pool[-1] + 1), sel.sample, seed)


def select_from_columns(
    column: SampleColumn,
    sel: Selection,
    *,
    dataset_id: str,
    version: str,
    content_digest: str,
    total: int,
    positions: Sequence[int] | None = None,
) -> Subset:
    """`select_subset` of a selection `columns_answer` holds for, from the sample columns
    `columns_for_selection` names, joined (`caseshelf.domain.chunks.join_sample_columns`):
    `positions[i]` is case i's position in the version (None when the columns are the
    version's first ones), which has `total` cases. The same answer."""
    check_selection(sel)
    if not columns_answer(sel, tags=column.tags is not None):
        raise ValueError("select_from_columns takes a selection its columns answer")

    def prefixes(upto: int) -> bytes:
        return column.prefixes[: 8 * upto]

    case_tags: Sequence[Sequence[int]] = column.tags if column.tags is not None else ()
    chosen = _choose(sel, column.ids, column.tag_names, case_tags, prefixes)
    if positions is not None:
        chosen = [positions[i] for i in chosen]
    return _stamped(chosen, sel, dataset_id, version, content_digest, total)


def select_cases(
    ids: Sequence[str],
    case_tags: Sequence[Sequence[str]],
    digests: Sequence[str],
    sel: Selection,
) -> list[int]:
    """The positions a selection keeps of a version's cases given as plain values (each case's
    id, tags and digest, 64 hex), ascending: the same answer as `select_subset` gives from the
    manifest, for cases held elsewhere (a verified local copy of the version)."""
    check_selection(sel)
    if sel.empty:
        return list(range(len(ids)))
    names: dict[str, int] = {}
    numbered = [[names.setdefault(t, len(names)) for t in tags] for tags in case_tags]

    def prefixes(upto: int) -> bytes:
        return digest_prefixes("".join(digests[:upto]))

    return _choose(sel, ids, list(names), numbered, prefixes)


def _stamped(
    chosen: list[int],
    sel: Selection,
    dataset_id: str,
    version: str,
    content_digest: str,
    total: int,
) -> Subset:
    if not chosen:
        raise BadRequest(
            f"the selection matches no case of {dataset_id}@{version}; check tags and limit",
            field="tags" if sel.tags is not None else None,
        )
    stamp = SubsetStamp(
        id=dataset_id,
        version=version,
        content_digest=content_digest,
        total=total,
        selected=len(chosen),
        **sel.as_record(),
    )
    return Subset(chosen, stamp)
