"""How large an answer or a request body may be on its way through API Gateway and Lambda.

Lambda takes an invoke payload (the event) and gives back a response payload of at most
6,291,456 bytes each. Both are JSON documents in which the HTTP body is one JSON string: the
Python runtime serialises the handler's answer with `json.dumps` (awslambdaric's
`lambda_runtime_marshaller`; on the python3.11 runtime with `ensure_ascii`, so every character
outside printable ASCII becomes a `\\uXXXX` escape, twelve bytes for one above U+FFFF) and API
Gateway writes the request body into the event the same way. So what counts against the limit is
the body's *escaped* size: a `"` or `\\` costs two bytes, an `é` six, an emoji twelve. A page of
quote-heavy or non-ASCII cases can double (or more) on the way.

Every paged answer is filled up to `ANSWER_BUDGET_BYTES` measured that way (`escaped_size`), and a
request body is taken only up to `EVENT_BODY_LIMIT` escaped bytes (the rest of the event needs
room too): above that the handler answers the 413 pointing to `POST /uploads`, and the Python
client switches to an upload before it would send such a body.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

# Lambda's invoke payload limit: the request event, and the handler's answer (bytes of JSON).
LAMBDA_PAYLOAD_BYTES = 6_291_456
# What one answer's body may hold, escaped: 5 MB (decimal, as the answers are specified), the
# rest of the response payload (status, headers, the JSON around the body) in what is left
# below LAMBDA_PAYLOAD_BYTES.
ANSWER_BUDGET_BYTES = 5_000_000
# Room in an event for what is not the body: headers (twice: single and multi-value), the
# request context with the authorizer's claims, the path and query parameters.
EVENT_ROOM_BYTES = 64 * 1024
# The largest request body (escaped, as it sits in the event) a handler takes.
EVENT_BODY_LIMIT = LAMBDA_PAYLOAD_BYTES - EVENT_ROOM_BYTES
# Room in a page for its JSON around the items (`{"items":[`, the cursor, the scan positions).
PAGE_FRAME_BYTES = 1024

# The runtime's own escaping (C-accelerated in CPython): the quoted JSON string of a text.
_quoted = json.encoder.encode_basestring_ascii


def escaped_size(text: str | bytes) -> int:
    """Bytes `text` (UTF-8 when bytes) takes as a JSON string inside the Lambda payload, quotes
    left out: what the runtime's `json.dumps` (ensure_ascii) makes of it."""
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8")
    return len(_quoted(text)) - 2


def fitting(sizes: Iterable[int], budget: int) -> int:
    """How many of the leading items whose escaped sizes are `sizes` fit in `budget` bytes as
    the elements of a JSON array (a comma between two)."""
    used = -1
    kept = 0
    for size in sizes:
        used += size + 1
        if used > budget:
            return kept
        kept += 1
    return kept


def oversized_case(case_id: str, position: int, size: int, href: str) -> dict[str, Any]:
    """What a page holds in place of a case whose escaped size alone is over the budget: its
    id, and the route that serves it on its own. `oversized` is no field of a case (a case
    with unknown keys is refused), so a reader tells the two apart by that key."""
    return {"id": case_id, "oversized": {"position": position, "bytes": size, "href": href}}
