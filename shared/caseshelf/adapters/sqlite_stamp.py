"""The SQLite index's change stamp: a value the index renews with every row it writes.

Triggers on the index's one table (`caseshelf.adapters.sqlite`) set the stamp to a fresh random
value in the same transaction as any insert, update or delete, whoever writes (this package of
any version, or a tool on the file). So two reads of the index that find the same stamp saw the
same rows, and something kept from the first (`caseshelf.cli.answers`) still holds. A random
value rather than a counter: an index restored from a copy cannot come back to a stamp it had
with other rows.

This module imports only `sqlite3` (and `caseshelf.storehome`, which imports `os`): it is read
on the CLI's start-up path.
"""

# os.path and os.stat, not pathlib: pathlib (10 ms) is not imported on the start-up path.
# ruff: noqa: PTH113, PTH118
from __future__ import annotations

import os
import sqlite3

from caseshelf.storehome import INDEX_FILE

__all__ = ["INDEX_FILE", "STAMP_SCHEMA", "read_only_uri", "read_stamp"]

STAMP_SCHEMA = """
CREATE TABLE IF NOT EXISTS stamp (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO stamp (one, value) VALUES (1, lower(hex(randomblob(16))));
CREATE TRIGGER IF NOT EXISTS stamp_insert AFTER INSERT ON items
    BEGIN UPDATE stamp SET value = lower(hex(randomblob(16))); END;
CREATE TRIGGER IF NOT EXISTS stamp_update AFTER UPDATE ON items
    BEGIN UPDATE stamp SET value = lower(hex(randomblob(16))); END;
CREATE TRIGGER IF NOT EXISTS stamp_delete AFTER DELETE ON items
    BEGIN UPDATE stamp SET value = lower(hex(randomblob(16))); END;
"""


def read_only_uri(path: str) -> str:
    """A read-only SQLite URI for `path` (`%`, `?` and `#` escaped, as SQLite's URI rules ask)."""
    quoted = path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    return f"file:{quoted}?mode=ro"


def read_stamp(home: str) -> str | None:
    """The change stamp of the index under the store directory `home`; None where there is no
    index there (it is never created by reading) or it cannot be read."""
    path = os.path.join(home, INDEX_FILE)
    if not os.path.isfile(path):
        return None
    try:
        conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=5)
        try:
            row = conn.execute("SELECT value FROM stamp WHERE one = 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return str(row[0]) if row else None
