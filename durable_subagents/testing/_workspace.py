"""A directory a root worker's tools can use, for tests and benchmarks that run as root."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from durable_subagents.tools._sandbox_host import NOBODY

__all__ = ["workspace_for_tools"]


def workspace_for_tools(path: Path, owner: tuple[int, int] = NOBODY) -> Path:
    """Give ``path`` and what it holds to ``owner``, and let that user reach it.

    A root worker runs tool commands as the owner of the task's workspace, never as
    root, so a workspace a test made as root (in a private temporary directory) would
    be closed to them. Not root: nothing to do.

    Args:
        path: The workspace (it must exist).
        owner: The uid and gid tool commands will run as (default: ``nobody``).

    Returns:
        ``path``.
    """
    if os.geteuid() != 0:
        return path
    os.chown(path, *owner, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for top, dirs, files in os.walk(path):
            for name in dirs + files:
                os.chown(os.path.join(top, name), *owner, follow_symlinks=False)
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    return path
