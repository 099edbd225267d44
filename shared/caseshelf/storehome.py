"""Where the embedded store is: the one rule the CLI (its start-up path too), `caseshelf serve`
and `caseshelf.connect()` follow.

1. `CASESHELF_HOME`, when set (a relative path is read from the working directory);
2. else the nearest `.caseshelf/` directory at or above the working directory, found the way
   git finds `.git`: a project's own store (`caseshelf init` makes one). The walk goes up to the
   filesystem root; a `.caseshelf/` another user owns is passed over (on POSIX), as git refuses a
   repository another user owns: a shared parent directory (`/tmp`, `/home`) cannot hand anyone
   a store;
3. else the user's store in the platform's data directory (`platformdirs.user_data_dir`:
   `$XDG_DATA_HOME/caseshelf`, by default `~/.local/share/caseshelf`, on Linux;
   `~/Library/Application Support/caseshelf` on macOS; `%LOCALAPPDATA%\\caseshelf` on Windows).

Finding a store creates nothing: the adapters create it on the first write
(`caseshelf.adapters.sqlite`, `caseshelf.adapters.localfs`), so a command that only reads
leaves no directory behind.

Only `os` is imported here (the CLI's start-up path); platformdirs only when the rule gets to 3.
"""

# os.path, not pathlib: pathlib (10 ms) is not imported on the CLI's start-up path.
# ruff: noqa: PTH100, PTH109, PTH110, PTH111, PTH112, PTH113, PTH116, PTH118, PTH120
from __future__ import annotations

import os
import stat

from caseshelf.domain.errors import CaseshelfError, Forbidden, NotFound

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

ENV = "CASESHELF_HOME"
PROJECT_DIR = ".caseshelf"
APP_NAME = "caseshelf"
INDEX_FILE = "index.sqlite"  # the store's SQLite index (`caseshelf.adapters.sqlite`)

# How a store was found (`StoreHome.found`).
FROM_ENV = "env"
FROM_PROJECT = "project"
FROM_USER = "user"
FROM_CALLER = "given"

_HOW = {
    FROM_ENV: "CASESHELF_HOME",
    FROM_PROJECT: "the nearest .caseshelf/ at or above the working directory: a project's store",
    FROM_USER: "the user's data directory; CASESHELF_HOME or a .caseshelf/ at or above the "
    "working directory picks another",
    FROM_CALLER: "given by the caller",
}


class StoreHome:
    """An embedded store's directory (absolute) and how it was found."""

    __slots__ = ("found", "path")

    def __init__(self, path: str, found: str) -> None:
        self.path = path
        self.found = found

    def __repr__(self) -> str:
        return f"StoreHome({self.path!r}, {self.found!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreHome) and (self.path, self.found) == (other.path, other.found)

    def __hash__(self) -> int:
        return hash((self.path, self.found))

    @property
    def how(self) -> str:
        """How the store was found, in words."""
        return _HOW[self.found]

    def exists(self) -> bool:
        """Whether a store is there (its index); finding one creates nothing."""
        return os.path.isfile(os.path.join(self.path, INDEX_FILE))

    def writable(self) -> bool:
        """Whether this process may write the store (or create it, where there is none yet):
        the nearest existing directory on its path accepts writes (a read-only mount does not,
        whoever asks)."""
        at = self.path
        while not os.path.exists(at):
            parent = os.path.dirname(at)
            if parent == at:
                return False
            at = parent
        return os.path.isdir(at) and os.access(at, os.W_OK)

    def where(self) -> str:
        """`the store at <path> (<how>)`, with `no store there yet` where there is none: what
        an error about the store's content names."""
        missing = "" if self.exists() else "; no store there yet"
        return f"the store at {self.path} ({self.how}{missing})"


def find_home(env: Mapping[str, str] | None = None, cwd: str | None = None) -> StoreHome:
    """The embedded store by the rule above, for the environment `env` (default the process's)
    and the working directory `cwd` (default the process's)."""
    env = os.environ if env is None else env
    given = env.get(ENV)
    if given:
        return StoreHome(os.path.abspath(os.path.expanduser(given)), FROM_ENV)
    project = project_home(cwd)
    if project is not None:
        return StoreHome(project, FROM_PROJECT)
    return StoreHome(user_home(), FROM_USER)


def given_home(path: str | os.PathLike[str]) -> StoreHome:
    """A store the caller names (`caseshelf.connect(home=...)`)."""
    return StoreHome(os.path.abspath(os.path.expanduser(os.fspath(path))), FROM_CALLER)


def project_home(cwd: str | None = None) -> str | None:
    """The nearest `.caseshelf/` directory this user owns at or above `cwd`; None where there is
    none (or the working directory is gone)."""
    try:
        at = os.path.abspath(cwd if cwd is not None else os.getcwd())
    except OSError:
        return None
    uid = os.getuid() if hasattr(os, "getuid") else None
    while True:
        candidate = os.path.join(at, PROJECT_DIR)
        try:
            st = os.stat(candidate)
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and (uid is None or st.st_uid == uid):
            return candidate
        parent = os.path.dirname(at)
        if parent == at:
            return None
        at = parent


def user_home() -> str:
    """The user's store: `caseshelf` in the platform's user data directory."""
    import platformdirs  # lazy: ~10 ms, only where the store is the user's

    return os.path.abspath(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def read_only_store(home: str | os.PathLike[str], why: str) -> Forbidden:
    """The error for a write the store's directory does not take (a read-only mount,
    permissions): the store still serves reads."""
    return Forbidden(
        f"the store at {os.fspath(home)} cannot be written ({why}): it serves reads only; to "
        "write, point CASESHELF_HOME at a directory you can write",
        field="home",
    )


class StoreNotFound(NotFound):
    """A `NotFound` that names the embedded store the entry was looked for in (`placed`)."""


def placed(error: CaseshelfError, home: StoreHome) -> CaseshelfError:
    """`error` with the store named, where it says an entry of the embedded store's registry (a
    dataset, version, recipe, job: a `NotFound` naming an `id` or `ref`) is not there: which
    store a command reads depends on where it runs, and the answer is the first place to see it.
    An error that names its store already, or is about anything else, is answered as it is."""
    if not isinstance(error, NotFound) or isinstance(error, StoreNotFound):
        return error
    if not {"id", "ref"} & set(error.fields):
        return error
    return StoreNotFound(f"{error.detail} in {home.where()}", **error.fields)
