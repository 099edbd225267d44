"""How the registry's AWS clients ride out faults: the one retry setting of every S3 and
DynamoDB client, and which failures count as transient.

Every client (`caseshelf.bootstrap` builds them all) uses botocore's `standard` retry mode with
`MAX_ATTEMPTS` attempts per request. That mode retries throttling (S3's `SlowDown`, DynamoDB's
`ProvisionedThroughputExceededException`, `ThrottlingException`), 500/502/503/504 answers and
dropped or timed-out connections, each after a full-jitter exponential backoff (a random wait
up to 1, 2, 4, 8, 16 s: botocore's, the backoff AWS recommends for throttling, which botocore
does not let a caller change). Six attempts ride out five faults of one request in a row; the
waits add up to 31 s at most and about 15 s on average, about what an API request may take
(API Gateway ends one at 29 s). `adaptive` mode is not used: its client-side rate limiter slows
every thread of the process after one throttled request, and a pull or an export runs 16
requests at once.

A failure that outlives those attempts becomes `BackendUnavailable` (503 with `Retry-After`),
naming the object or row and the fault (`unavailable`); anything else keeps its own meaning.
"""

from __future__ import annotations

from typing import Any

from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
)

from caseshelf.domain.errors import BackendUnavailable

RETRY_MODE = "standard"
MAX_ATTEMPTS = 6
# What a 503 tells a caller to wait before trying again (`Retry-After`, seconds).
RETRY_AFTER_SECONDS = 5

# Error codes of answers that say "not now" rather than "no": throttling and server faults.
TRANSIENT_CODES = frozenset(
    {
        # S3
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "OperationAborted",
        # DynamoDB
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "TransactionInProgressException",
        # both, as bare statuses (an answer without an error document)
        "500",
        "502",
        "503",
        "504",
    }
)
# Transport failures: a connection refused, reset, timed out, or a body cut mid-stream.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
)


def client_config(*, max_attempts: int | None = None, **options: Any) -> Config:
    """The botocore configuration of every S3 and DynamoDB client: the retry setting above,
    plus `options` (signature version, pool size, timeouts)."""
    retries: Any = {"mode": RETRY_MODE, "max_attempts": max_attempts or MAX_ATTEMPTS}
    return Config(retries=retries, **options)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` is a fault worth trying again later (throttling, a server fault, a
    dropped connection), as opposed to an answer about the request itself."""
    if isinstance(exc, TRANSPORT_ERRORS):
        return True
    if isinstance(exc, ClientError):
        if error_code(exc) in TRANSIENT_CODES:
            return True
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return isinstance(status, int) and (status >= 500 or status == 429)
    return False


def fault_of(exc: BaseException) -> str:
    """A short name of the fault: the error code of an answer, else the transport error."""
    if isinstance(exc, ClientError):
        return error_code(exc) or "an error answer"
    return f"{type(exc).__name__}: {exc}"


def unavailable(exc: BaseException, what: str, **fields: Any) -> BackendUnavailable:
    """The domain error for a transient failure that outlived its retries."""
    return BackendUnavailable(
        f"{what}: storage stayed unavailable through its retries ({fault_of(exc)}); "
        f"try again in {RETRY_AFTER_SECONDS} s",
        retry_after=RETRY_AFTER_SECONDS,
        fault=fault_of(exc),
        **fields,
    )
