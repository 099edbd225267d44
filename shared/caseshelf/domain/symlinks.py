"""Where a listed file symlink of a case directory may point: one pure rule for import,
export and workspace provisioning (architecture §6, the `dataset.workspace.files` table).

A case directory's file symlink is materialized as a regular file (a copy of its target) when its
fully resolved target lies

- inside the case directory itself, or
- inside one of the configured plugin directories, or
- inside the project root but outside the dataset directory that holds the sibling cases;

anywhere else it is skipped with a warning (CWE-59). The paths given are already resolved
(symlinks followed, `..` gone); the rule only compares them, so it reads no disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePath


def inside(path: PurePath, root: PurePath) -> bool:
    """`path` is `root` or lies under it (both resolved)."""
    return path == root or root in path.parents


def symlink_target_problem(
    target: PurePath,
    *,
    case_root: PurePath,
    project_root: PurePath,
    dataset_dir: PurePath,
    plugin_dirs: Iterable[PurePath] = (),
) -> str | None:
    """None when a case file symlink resolving to `target` may be materialized; else why not
    (the text of the warning)."""
    if inside(target, case_root) or any(inside(target, p) for p in plugin_dirs):
        return None
    if inside(target, project_root) and not inside(target, dataset_dir):
        return None
    where = " (it is in another case of the dataset)" if inside(target, dataset_dir) else ""
    return (
        f"symlink target {target} is outside the case, the plugin directories and the project "
        f"companion paths{where}"
    )
