"""Wire shapes of `POST /refs/resolve`: many refs resolved in one request (what
`caseshelf check` asks of a lock file's pins)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import Field

from caseshelf.api.dto import Problem, TagMoveOut, VersionOut, Wire, tag_move_out, version_out
from caseshelf.domain.lockfile import PIN_REF_PATTERN
from caseshelf.domain.models import Digest, Label
from caseshelf.services.refs import MAX_REFS, RefAnswer, RefQuery


class RefQueryIn(Wire):
    ref: str = Field(
        pattern=PIN_REF_PATTERN,
        description="`ID@REF`: a label, `latest`, a version tag or `sha256:<hex>`.",
    )
    version: Label | None = Field(
        default=None, description="The label it was pinned to: answered as `pinned`."
    )
    digest: Digest | None = Field(
        default=None, description="The content digest it was pinned to: answered as `pinned`."
    )

    def query(self) -> RefQuery:
        name, _, ref = self.ref.partition("@")
        return RefQuery(name, ref, self.version, self.digest)


class RefsResolveIn(Wire):
    refs: list[RefQueryIn] = Field(description=f"At most {MAX_REFS} (413 beyond).")


class RefResolvedOut(Wire):
    """One ref's answer: `version` (what it resolves to now) or `problem`; `moved` the tag's
    last move when the ref is a tag; `pinned` (tombstoned versions included) or
    `pinned_problem` when the query named a version or digest."""

    ref: str
    version: VersionOut | None = None
    problem: Problem | None = None
    moved: TagMoveOut | None = None
    pinned: VersionOut | None = None
    pinned_problem: Problem | None = None


class RefsResolveOut(Wire):
    items: list[RefResolvedOut]


ProblemOf = Callable[[BaseException], Mapping[str, Any]]


def resolved_out(answers: Sequence[RefAnswer], problem_of: ProblemOf) -> RefsResolveOut:
    """The answer of `answers`, each error as the problem+json body `problem_of` (the API's one
    error mapping, `caseshelf.api.errors.problem_of`) makes of it."""

    def _problem(exc: BaseException | None) -> Problem | None:
        return None if exc is None else Problem.model_validate(problem_of(exc))

    items: list[Any] = []
    for a in answers:
        q = a.query
        items.append(
            RefResolvedOut(
                ref=f"{q.name}@{q.ref}",
                version=version_out(a.record) if a.record is not None else None,
                problem=_problem(a.error),
                moved=tag_move_out(a.move) if a.move is not None else None,
                pinned=version_out(a.pinned) if a.pinned is not None else None,
                pinned_problem=_problem(a.pinned_error),
            )
        )
    return RefsResolveOut(items=items)
