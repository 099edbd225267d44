"""What the `caseshelf` command (and `caseshelf serve`) prints of the library's logs: human
lines on stderr, `warning: <message> (key=value, ...)`.

The library logs through the standard `caseshelf` logger and configures nothing itself
(`caseshelf.api.app.make_logger`); the command owns its process, so it gives that logger one
handler here: warnings and errors by default, everything with `--verbose` (or the level
`CASESHELF_LOG_LEVEL` names: DEBUG, INFO, WARNING, ERROR). Other libraries' loggers are left
as they are. On Lambda the functions keep Powertools' structured JSON logs.

Only the console script configures logging (`caseshelf.cli.main`: the command owns its
process); `caseshelf.cli.run`, called in another program's process (tests), leaves that
program's logging alone.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from caseshelf.domain.errors import BadRequest

LEVEL_ENV = "CASESHELF_LOG_LEVEL"
LOGGER = "caseshelf"
log = logging.getLogger("caseshelf.cli")
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# What every log record has; anything else on a record is the caller's `extra`.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class HumanFormatter(logging.Formatter):
    """`<level>: <message> (key=value, ...)`, the `extra` fields after the message; a
    traceback, where the record has one, on the lines below."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{record.levelname.lower()}: {record.getMessage()}"
        extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
        if extra:
            text += " (" + ", ".join(f"{k}={v}" for k, v in extra.items()) + ")"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _Handler(logging.StreamHandler):
    """The command's handler (told apart from any other on the logger)."""


def log_level(verbose: bool, env: Mapping[str, str] | None = None) -> int:
    """DEBUG with `--verbose`; else the level `CASESHELF_LOG_LEVEL` names; else WARNING."""
    if verbose:
        return logging.DEBUG
    env = os.environ if env is None else env
    raw = (env.get(LEVEL_ENV) or "").strip()
    if not raw:
        return logging.WARNING
    if raw.upper() not in _LEVELS:
        raise BadRequest(
            f"{LEVEL_ENV}={raw!r} is not a log level: use one of {', '.join(_LEVELS)} "
            "(or --verbose for everything)",
            field=LEVEL_ENV,
        )
    return int(getattr(logging, raw.upper()))


def configure(verbose: bool) -> None:
    """Give the `caseshelf` logger the command's handler on stderr at the level asked for (once
    per process; a later call sets the level again)."""
    level = log_level(verbose)
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(h, _Handler) for h in logger.handlers):
        handler = _Handler(sys.stderr)
        handler.setFormatter(HumanFormatter())
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
