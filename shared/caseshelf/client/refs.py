"""`ID@REF` and `ID@VERSION`, parsed strictly (the rules of the API's ids and labels)."""

from __future__ import annotations

import re

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.words import DATASET_ID_RULE, DIGEST_RULE, REF_RULE

# The patterns of `caseshelf.domain.models` (DATASET_ID_PATTERN, LABEL_PATTERN, DIGEST_PATTERN),
# repeated here so that parsing a ref imports no pydantic; a unit test holds them equal.
DATASET_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
LABEL_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"

_ID = re.compile(DATASET_ID_PATTERN)
_LABEL = re.compile(LABEL_PATTERN)
_DIGEST = re.compile(DIGEST_PATTERN)


def parse_ref(value: str, *, what: str = "ref") -> tuple[str, str]:
    """`ID` or `ID@REF`: REF is a label, a version tag, `latest` or `sha256:<hex>`; ID alone
    means `latest`."""
    if not isinstance(value, str):
        raise BadRequest(f"{what}: a ref is a string like 'gsm8k@1.2.0'", field=what)
    name, at, ref = value.partition("@")
    if not _ID.match(name):
        head, colon, tail = name.partition(":")
        if colon and _ID.match(head) and _LABEL.match(tail) and not at:
            raise BadRequest(
                f"{value!r}: a version is named with '@', not ':': {head}@{tail}", field=what
            )
        raise BadRequest(f"{value!r}: {DATASET_ID_RULE}", field=what)
    if not at:
        return name, "latest"
    if ref.startswith("sha256:"):
        if not _DIGEST.match(ref):
            raise BadRequest(f"{value!r}: {DIGEST_RULE}", field=what)
        return name, ref
    if not _LABEL.match(ref):
        raise BadRequest(f"{value!r}: {REF_RULE}", field=what)
    return name, ref


def parse_version(value: str, *, what: str = "ref") -> tuple[str, str]:
    """`ID@VERSION` with an explicit version label (changes never guess which version)."""
    name, ref = parse_ref(value, what=what)
    if "@" not in value or ref == "latest" or ref.startswith("sha256:"):
        raise BadRequest(
            f"{value!r}: name the version label explicitly, e.g. {name}@1.0.0", field=what
        )
    return name, ref
