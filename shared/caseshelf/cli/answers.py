"""`caseshelf ls` on the embedded store answered again, while nothing changed, without the
handler path's imports.

`ls` runs the registry function's handler in process, as every command does (one code path).
Importing that path (Powertools' resolver, pydantic and the wire models, the services) takes
~0.35 s of CPU by itself, and an `ls` of an empty store through it 0.59 s, where `python -c
"import sqlite3, json"` takes 0.04 s. So the answer the handler gave is kept beside the index
(`<home>/cli/ls.json`), under a key naming everything the answer depends on:

- the command's options as read (`--shared`, `--limit`, `--cursor`) and the identity (tenant,
  principal, roles), from the options or the environment;
- the store's directory and every environment variable the settings read (`CASESHELF_*`,
  `AWS_*`, `HF_*`), credentials (tokens, keys, secrets) left out: they do not change what the
  embedded store lists, and they are not written to disk;
- the index's change stamp (`caseshelf.adapters.sqlite_stamp`), which the index renews in the
  same transaction as every row written, updated or deleted;
- the caseshelf modules that made the answer (path, size, modification time), so changed or
  upgraded code answers anew.

A later `ls` whose key matches prints the kept answer through the same rendering, without the
handler path's imports (`bench/bench_cli.py`). Anything else (an
API, another store or identity, a renewed stamp, a changed module, a missing or unreadable
file) runs the handler, and its answer replaces the kept one. The stamp is read before the
handler reads the index, so an answer made while another process wrote is kept under the stamp
before that write, which the index no longer has: it is never printed again.

Only `os`, `sys`, `json` and `sqlite3` are imported here (and `platformdirs` where the store
is the user's, `caseshelf.storehome`): this runs on the start-up path.
"""

# os.path and os.stat, not pathlib: pathlib (10 ms) is not imported on the start-up path.
# ruff: noqa: PTH103, PTH105, PTH108, PTH116, PTH118, PTH120
from __future__ import annotations

import json
import os
import sys
from contextlib import suppress

from caseshelf.adapters.sqlite_stamp import read_stamp
from caseshelf.storehome import find_home

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from caseshelf.bootstrap import Settings
    from caseshelf.cli.common import State

# What the settings read from the environment (`caseshelf.bootstrap._ENV`), by prefix; minus
# credentials, which never change what the embedded store lists and are not written to disk.
_ENV_PREFIXES = ("CASESHELF_", "AWS_", "HF_")
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL", "SESSION")
_FORMAT = 1


def _home() -> str | None:
    """The embedded store's directory as the settings find it (`caseshelf.storehome`), or None
    off the embedded store (`CASESHELF_BACKEND` other than local). `keep` checks it against the
    settings the handler ran with."""
    if os.environ.get("CASESHELF_BACKEND", "") not in ("", "local"):
        return None
    return find_home().path


def key(state: State, command: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """The key of `command`'s answer with `options` under the options' state, or None where no
    answer is kept (an API, or no index yet)."""
    if state.api:
        return None
    home = _home()
    if home is None:
        return None
    stamp = read_stamp(home)
    if stamp is None:
        return None
    return {
        "format": _FORMAT,
        "command": command,
        "options": options,
        "identity": [state.tenant, state.principal, state.roles],
        "home": home,
        "env": sorted(
            [name, value]
            for name, value in os.environ.items()
            if name.startswith(_ENV_PREFIXES) and not any(w in name for w in _SECRET_WORDS)
        ),
        "stamp": stamp,
    }


def _path(key: dict[str, Any]) -> str:
    return os.path.join(key["home"], "cli", f"{key['command']}.json")


def _code() -> list[list[Any]]:
    """Path, size and modification time of every caseshelf module loaded in this process."""
    out = []
    for name, module in sorted(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and (name == "caseshelf" or name.startswith("caseshelf.")):
            st = os.stat(file)
            out.append([file, st.st_size, st.st_mtime_ns])
    return out


def _same_code(code: list[list[Any]]) -> bool:
    for file, size, mtime in code:
        try:
            st = os.stat(file)
        except OSError:
            return False
        if st.st_size != size or st.st_mtime_ns != mtime:
            return False
    return bool(code)


def find(key: dict[str, Any]) -> Any | None:
    """The answer kept under `key`, or None."""
    try:
        fd = os.open(_path(key), os.O_RDONLY | os.O_NOFOLLOW)
        with open(fd, "rb") as f:
            kept = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key") != key:
        return None
    if not _same_code(kept.get("code") or []):
        return None
    return kept.get("answer")


def keep(key: dict[str, Any], answer: Any, settings: Settings) -> None:
    """Keep `answer` under `key`, when the handler ran on the store the key names (whole: a
    file written beside it and renamed over the kept one). A store that cannot be written keeps
    nothing; the command's answer is printed all the same."""
    if settings.backend != "local" or settings.store_home.path != key["home"]:
        return
    path = _path(key)
    tmp = f"{path}.{os.getpid()}.tmp"
    data = json.dumps({"key": key, "code": _code(), "answer": answer}).encode()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        with suppress(OSError):
            os.unlink(tmp)
