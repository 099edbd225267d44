"""Fold legacy dataset item shapes into the inputs + expectations envelope.

`normalise_legacy_item` is pure: it returns a new item in the envelope and the notice codes it
raised (each at most once), and raises `BadRequest` naming the item id when the input is
ambiguous (a value given twice, a key both on `expectations` and under `details`, a tool
fixture that is neither a path nor `{by_tool: ...}`). An item already in the envelope comes back
equal to itself with no codes. The field map is documented in `docs/migration.md`.
"""

from __future__ import annotations

from typing import Any

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.notices import (
    LEGACY_EXPECTATIONS,
    LEGACY_ITEM,
    ROLE_LIST_USER,
)

# Item-level keys that held the prompt before `inputs.user`.
PROMPT_KEYS = ("prompt", "query", "question", "text", "input", "user", "task")
# Item-level keys that held the reference answer before `expectations.ground_truth`.
ANSWER_KEYS = ("expected_answer", "ground_truth", "expected")
# Item-level keys that move under `inputs` unchanged.
INPUT_KEYS = ("memory_seeds", "session_id", "tool_fixtures")
# Lab Dataset item keys that experiments filter on: they live in `metadata` (not deprecated).
METADATA_KEYS = ("category", "group", "type", "scenario", "target_agents")

EXPECTATION_KEYS = frozenset({"ground_truth", "metrics", "details"})
HITL_ROLES = frozenset({"hitl", "human", "operator"})

# camelCase keys of an older JSON dataset format, renamed to the envelope's snake_case. Only
# keys whose snake_case form is an envelope field are renamed; grader `config` is the grader's
# own business and is left as it is.
CASE_CAMEL = {
    "timeoutSec": "timeout_sec",
    "sessionId": "session_id",
    "memorySeeds": "memory_seeds",
    "toolFixtures": "tool_fixtures",
    "groundTruth": "ground_truth",
    "expectedAnswer": "expected_answer",
}
ENV_CAMEL = {
    "screenshotPath": "screenshot_path",
    "startUrl": "start_url",
}
RESOURCE_CAMEL = {
    "cpuMillicores": "cpu_millicores",
    "memoryMb": "memory_mb",
    "storageMb": "storage_mb",
}
NETWORK_CAMEL = {"allowedHosts": "allowed_hosts"}


def _who(item: dict[str, Any], index: int | None) -> str:
    cid = item.get("id")
    if isinstance(cid, str):
        return f"item {cid!r}"
    return f"item at index {index}" if index is not None else "item"


class _Fold:
    """One item being folded; collects codes and names the item in every error."""

    def __init__(self, item: dict[str, Any], index: int | None) -> None:
        self.src = item
        self.who = _who(item, index)
        self.case_id = item.get("id") if isinstance(item.get("id"), str) else None
        self.index = index
        self.codes: list[str] = []

    def note(self, code: str) -> None:
        if code not in self.codes:
            self.codes.append(code)

    def fail(self, message: str, field: str) -> BadRequest:
        return BadRequest(
            f"{self.who}: {message}", case_id=self.case_id, index=self.index, field=field
        )


def _rename(obj: dict[str, Any], table: dict[str, str], fold: _Fold, where: str) -> dict[str, Any]:
    if not any(k in table for k in obj):
        return obj
    out: dict[str, Any] = {}
    for key, value in obj.items():
        new = table.get(key, key)
        if new != key:
            if new in obj:
                raise fold.fail(f"both {key!r} and {new!r} are given", f"{where}{new}")
            fold.note(LEGACY_ITEM)
        out[new] = value
    return out


class RoleListProblem(ValueError):
    """A `{role, content}` list that cannot be read; `field` is where."""

    def __init__(self, where: str, problem: str, field: str) -> None:
        super().__init__(f"{where} {problem}")
        self.message = f"{where} {problem}"
        self.problem = problem
        self.field = field


def split_role_list(
    value: list[Any], field: str
) -> tuple[list[str], list[str], list[dict[str, str]]]:
    """`[{role, content}, ...]` as (user contents, HITL contents, conversation). The
    conversation is the whole list as `{role, content}` turns, kept only when it holds a turn
    that is neither the user's nor a HITL answer (an earlier assistant turn, a system prompt):
    then it is `inputs.messages`; otherwise it is `[]` and the case has no `messages`.
    A turn without `role` is the user's. Pure; raises `RoleListProblem`."""
    users: list[str] = []
    hitl: list[str] = []
    turns: list[dict[str, str]] = []
    other = False
    for n, turn in enumerate(value):
        if not isinstance(turn, dict) or "content" not in turn:
            raise RoleListProblem(
                f"{field}[{n}]", "is not a {role, content} message", f"{field}.{n}"
            )
        extra = set(turn) - {"role", "content"}
        if extra:
            raise RoleListProblem(
                f"{field}[{n}]", f"has unknown keys {sorted(extra)}", f"{field}.{n}"
            )
        role = turn.get("role", "user")
        content = turn["content"]
        if not isinstance(content, str):
            raise RoleListProblem(
                f"{field}[{n}].content", "is not a string", f"{field}.{n}.content"
            )
        if not isinstance(role, str) or not role:
            raise RoleListProblem(f"{field}[{n}].role", "is not a role name", f"{field}.{n}.role")
        if role == "user":
            users.append(content)
        elif role in HITL_ROLES:
            hitl.append(content)
        else:
            other = True
        turns.append({"role": role, "content": content})
    return users, hitl, turns if other else []


def _role_list(
    value: list[Any], fold: _Fold, field: str
) -> tuple[list[str], list[str], list[dict[str, str]]]:
    """Split `[{role, content}, ...]` into (user contents, HITL contents, conversation)."""
    try:
        return split_role_list(value, field)
    except RoleListProblem as exc:
        raise fold.fail(exc.message, exc.field) from None


def _is_role_list(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(v, dict) for v in value)


def _one_or_many(texts: list[str]) -> str | list[str]:
    return texts[0] if len(texts) == 1 else texts


def _user_value(value: Any, fold: _Fold, field: str) -> tuple[Any, list[str], list[dict[str, str]]]:
    """A legacy prompt value as `inputs.user`, plus any HITL contents it carried and the
    conversation (`inputs.messages`) when it has turns of other roles."""
    if isinstance(value, str) or value is None:
        return value, [], []
    if _is_role_list(value):
        fold.note(ROLE_LIST_USER)
        users, hitl, messages = _role_list(value, fold, field)
        if not users:
            raise fold.fail(f"{field} has no user message", field)
        return _one_or_many(users), hitl, messages
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value, [], []
    if isinstance(value, dict) and set(value) == {"ref"}:
        return value, [], []
    raise fold.fail(
        f"{field} must be a string, a list of strings or {{ref: path}}, not {type(value).__name__}",
        field,
    )


def _tool_fixtures(value: Any, fold: _Fold) -> Any:
    field = "inputs.tool_fixtures"
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        keys = set(value)
        if keys in ({"ref"}, {"by_tool"}):
            return value
        if len(value) == 1 and isinstance(next(iter(value.values())), str):
            key, path = next(iter(value.items()))
            raise fold.fail(
                f"tool_fixtures key {key!r} is not allowed; a fixture file is {{ref: {path!r}}} "
                "or the bare path (the migrator rewrites this pointer)",
                field,
            )
        if all(isinstance(v, str) for v in value.values()):
            raise fold.fail(
                f"tool_fixtures has several keys {sorted(keys)}; give one {{ref: path}} "
                "or {by_tool: {tool: payload}}",
                field,
            )
        raise fold.fail(
            f"tool_fixtures holds an inline payload (keys {sorted(keys)}); "
            "write it as {by_tool: {'*': payload}}",
            field,
        )
    raise fold.fail(
        f"tool_fixtures holds an inline {type(value).__name__}; "
        "write it as {by_tool: {'*': payload}}",
        field,
    )


def _strip_dot(value: Any) -> Any:
    """`./seeds/a.yaml` and `seeds/a.yaml` name the same file; keep the second spelling."""
    if isinstance(value, str) and value.startswith("./"):
        while value.startswith("./"):
            value = value[2:]
        return value
    if isinstance(value, dict) and set(value) == {"ref"}:
        return {"ref": _strip_dot(value["ref"])}
    return value


_ENVELOPE_KEYS = frozenset(
    {
        "id", "inputs", "expectations", "env", "image", "resources", "network",
        "timeout_sec", "graders", "tags", "metadata", "files",
    }
)  # fmt: skip
# Fixture and memory pointers are always folded (paths are tidied, mappings checked).
_INPUTS_KEYS = frozenset({"user", "hitl", "session_id", "messages"})


def _no_keys_of(value: Any, table: dict[str, str]) -> bool:
    return not isinstance(value, dict) or not any(k in table for k in value)


def already_envelope(item: dict[str, Any]) -> bool:
    """True when nothing in `item` is a legacy shape, so folding would give it back unchanged.

    The common case (every item of a file written in the envelope) then costs a few set checks
    instead of a full fold: large registrations load items by the hundred thousand."""
    if not item.keys() <= _ENVELOPE_KEYS:
        return False
    inputs = item.get("inputs")
    if inputs is not None:
        if not isinstance(inputs, dict) or not inputs.keys() <= _INPUTS_KEYS:
            return False
        user = inputs.get("user")
        if isinstance(user, list) and not all(isinstance(u, str) for u in user):
            return False
    expectations = item.get("expectations")
    if expectations is not None and (
        not isinstance(expectations, dict) or not expectations.keys() <= EXPECTATION_KEYS
    ):
        return False
    return (
        _no_keys_of(item.get("env"), ENV_CAMEL)
        and _no_keys_of(item.get("resources"), RESOURCE_CAMEL)
        and _no_keys_of(item.get("network"), NETWORK_CAMEL)
    )


def normalise_legacy_item(
    item: dict[str, Any], *, index: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The envelope form of one dataset item and the notice codes its legacy shapes raised."""
    if not isinstance(item, dict) or already_envelope(item):
        return item, []
    return _fold_item(item, index)


def _fold_item(item: dict[str, Any], index: int | None) -> tuple[dict[str, Any], list[str]]:
    fold = _Fold(item, index)
    out = _rename(item, CASE_CAMEL, fold, "")
    out = dict(out)

    inputs_raw = out.get("inputs")
    inputs: dict[str, Any] = dict(inputs_raw) if isinstance(inputs_raw, dict) else {}
    exp_raw = out.get("expectations")
    expectations: dict[str, Any] = dict(exp_raw) if isinstance(exp_raw, dict) else {}
    if inputs_raw is not None and not isinstance(inputs_raw, dict):
        return out, fold.codes  # left for validation to name
    if exp_raw is not None and not isinstance(exp_raw, dict):
        return out, fold.codes

    _fold_prompt(out, inputs, fold)
    _fold_inputs(out, inputs, fold)
    _fold_expectations(out, expectations, fold)
    _fold_metadata(out, fold)
    _fold_nested(out, fold)

    if inputs or inputs_raw is not None:
        out["inputs"] = inputs
    if expectations or exp_raw is not None:
        out["expectations"] = expectations
    return out, fold.codes


def _fold_prompt(out: dict[str, Any], inputs: dict[str, Any], fold: _Fold) -> None:
    """Prompt keys and turns -> inputs.user, inputs.hitl and inputs.messages."""
    given = [k for k in PROMPT_KEYS if k in out]
    if len(given) > 1:
        raise fold.fail(f"several prompt keys {given}; keep one as inputs.user", "inputs.user")
    hitl: list[str] = []
    messages: list[dict[str, str]] = []
    if given:
        key = given[0]
        if inputs.get("user") is not None:
            raise fold.fail(f"both {key!r} and inputs.user are given", "inputs.user")
        fold.note(LEGACY_ITEM)
        user, more, messages = _user_value(out.pop(key), fold, key)
        hitl.extend(more)
        if user is not None:
            inputs["user"] = user
    elif "user" in inputs:
        user, more, messages = _user_value(inputs["user"], fold, "inputs.user")
        hitl.extend(more)
        inputs["user"] = user

    if "turns" in out:
        fold.note(LEGACY_ITEM)
        turns = out.pop("turns")
        if not isinstance(turns, list):
            raise fold.fail("turns is not a list of {role, content}", "turns")
        users, turn_hitl, turn_messages = _role_list(turns, fold, "turns")
        first = inputs.get("user")
        if isinstance(first, dict):
            raise fold.fail("turns cannot follow a {ref: path} prompt", "turns")
        before = [] if first is None else [first] if isinstance(first, str) else list(first)
        merged = before + users
        if merged:
            inputs["user"] = _one_or_many(merged)
        hitl.extend(turn_hitl)
        if turn_messages:
            if messages:
                raise fold.fail("both the prompt and turns hold a conversation", "turns")
            messages = [{"role": "user", "content": b} for b in before] + turn_messages
    if hitl:
        inputs["hitl"] = [*list(inputs.get("hitl") or []), *hitl]
    if messages:
        if inputs.get("messages"):
            raise fold.fail("both a conversation and inputs.messages are given", "inputs.messages")
        inputs["messages"] = messages


def _fold_inputs(out: dict[str, Any], inputs: dict[str, Any], fold: _Fold) -> None:
    """Inputs that used to sit on the item -> inputs."""
    for key in INPUT_KEYS:
        if key in out:
            fold.note(LEGACY_ITEM)
            if key in inputs:
                raise fold.fail(f"both {key!r} and inputs.{key} are given", f"inputs.{key}")
            inputs[key] = out.pop(key)
    if "tool_fixtures" in inputs:
        inputs["tool_fixtures"] = _tool_fixtures(inputs["tool_fixtures"], fold)
    for key in ("memory_seeds", "tool_fixtures"):
        if key in inputs:
            inputs[key] = _strip_dot(inputs[key])


def _fold_expectations(out: dict[str, Any], expectations: dict[str, Any], fold: _Fold) -> None:
    """Expectations: app keys -> details, legacy answers -> ground_truth."""
    details_raw = expectations.get("details")
    details: dict[str, Any] = dict(details_raw) if isinstance(details_raw, dict) else {}
    app_keys = [k for k in expectations if k not in EXPECTATION_KEYS]
    if app_keys and details_raw is not None and not isinstance(details_raw, dict):
        raise fold.fail("expectations.details is not an object", "expectations.details")
    for key in app_keys:
        if key in details:
            raise fold.fail(
                f"{key!r} is both on expectations and under expectations.details",
                f"expectations.details.{key}",
            )
        fold.note(LEGACY_EXPECTATIONS)
        details[key] = expectations.pop(key)

    answers = [k for k in ANSWER_KEYS if k in out]
    if len(answers) > 1:
        raise fold.fail(f"several answer keys {answers}", "expectations.ground_truth")
    if answers:
        key = answers[0]
        if "ground_truth" in expectations:
            raise fold.fail(
                f"both {key!r} and expectations.ground_truth are given",
                "expectations.ground_truth",
            )
        fold.note(LEGACY_ITEM)
        expectations["ground_truth"] = out.pop(key)

    if "hitl_responses" in out:
        fold.note(LEGACY_ITEM)
        if "hitl_responses" in details:
            raise fold.fail(
                "both 'hitl_responses' and expectations.details.hitl_responses are given",
                "expectations.details.hitl_responses",
            )
        details["hitl_responses"] = out.pop("hitl_responses")

    if details:
        expectations["details"] = details


def _fold_metadata(out: dict[str, Any], fold: _Fold) -> None:
    """Lab metadata keys (category, group, ...) -> metadata; not a deprecation."""
    meta_keys = [k for k in METADATA_KEYS if k in out]
    if meta_keys:
        meta_raw = out.get("metadata")
        if meta_raw is not None and not isinstance(meta_raw, dict):
            raise fold.fail("metadata is not an object", "metadata")
        metadata = dict(meta_raw or {})
        for key in meta_keys:
            value = out.pop(key)
            if key in metadata and metadata[key] != value:
                raise fold.fail(
                    f"{key!r} is given on the item and in metadata with different values",
                    f"metadata.{key}",
                )
            metadata[key] = value
        out["metadata"] = metadata


def _fold_nested(out: dict[str, Any], fold: _Fold) -> None:
    """camelCase inside env / resources / network."""
    nested = (("env", ENV_CAMEL), ("resources", RESOURCE_CAMEL), ("network", NETWORK_CAMEL))
    for key, table in nested:
        sub = out.get(key)
        if isinstance(sub, dict):
            out[key] = _rename(sub, table, fold, f"{key}.")


# Every item-level key a dataset item may have: the envelope's, and the older ones folded in.
ITEM_KEYS = frozenset(
    _ENVELOPE_KEYS
    | set(PROMPT_KEYS)
    | set(ANSWER_KEYS)
    | set(INPUT_KEYS)
    | set(METADATA_KEYS)
    | set(CASE_CAMEL)
    | {"turns", "hitl_responses"}
)


def plain_row(item: dict[str, Any]) -> bool:
    """True when `item` is a row of a benchmark's own fields rather than a dataset item: it has
    no `inputs`, and either no `id` or a key no item shape has (`{"question", "answer"}`). Such
    a file is imported through a recipe, not registered."""
    if "inputs" in item:
        return False
    return "id" not in item or not item.keys() <= ITEM_KEYS
