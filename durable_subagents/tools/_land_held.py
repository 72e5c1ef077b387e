"""Held changes a person approved, applied: exactly the bytes shown, on the entry shown.

A change to a protected path that ``land`` kept for a decision lands here once approved,
through the workspace's descriptor, and only where the workspace's entry is still the
one the person saw (``Before``); otherwise it is a conflict.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from durable_subagents.tools._land import Held, Landing, _read_all
from durable_subagents.tools._land_place import _DIR, _lstat, _Place, _Tree, before_of

__all__ = ["apply_held"]


def apply_held(
    workspace_fd: int,
    held: Sequence[Held],
    *,
    owner: tuple[int, int] | None,
) -> Landing:
    """Apply changes a person approved, each only where the workspace is as it was shown.

    Args:
        workspace_fd: A descriptor of the task's workspace.
        held: The approved changes, in the order they were held.
        owner: Owner of what is made (a root worker's tool user); None: the worker's.
    """
    landing = Landing()
    place = _Place(owner, lambda: None)
    uid, gid = owner if owner is not None else (os.geteuid(), os.getegid())
    failed: list[str] = []
    for change in held:
        if any(change.path == f or change.path.startswith(f + "/") for f in failed):
            landing.conflicts.append(change.path)
            continue
        parts = tuple(change.path.split("/"))
        try:
            parent = _open_parents(workspace_fd, parts[:-1])
        except OSError:
            landing.conflicts.append(change.path)
            failed.append(change.path)
            continue
        try:
            if not _apply_change(change, parent, parts[-1], place, uid, gid):
                landing.conflicts.append(change.path)
                failed.append(change.path)
            else:
                landing.applied.append(change.path)
        except OSError as err:
            landing.refused.append((change.path, f"could not be applied ({err.strerror or err})"))
            failed.append(change.path)
        finally:
            os.close(parent)
    return landing


def _open_parents(workspace_fd: int, parts: tuple[str, ...]) -> int:
    """The workspace directory ``parts``, each step opened without following symlinks."""
    fd = os.dup(workspace_fd)
    for part in parts:
        try:
            child = os.open(part, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def _apply_change(change: Held, parent: int, name: str, place: _Place, uid: int, gid: int) -> bool:
    """Apply one approved change; False if the workspace is no longer as it was shown."""
    now = _lstat(parent, name)
    if _already(change, parent, name, now):
        return True  # an earlier attempt of this decision applied it
    if change.kind == "dir" and now is not None and stat.S_ISDIR(now.st_mode):
        if before_of(now) != change.before:
            return False
        fd = os.open(name, _DIR, dir_fd=parent)
        try:
            os.chmod(f"/proc/self/fd/{fd}", change.mode)
        finally:
            os.close(fd)
        return True
    if before_of(now) != change.before:
        return False
    if change.kind == "delete":
        if now is not None:
            tree = _Tree(since_ns=1 << 62, stop=lambda: None)
            return tree.remove(parent, name, now, tuple(change.path.split("/")))
        return True
    if now is not None and stat.S_ISDIR(now.st_mode):
        return False  # a directory is replaced only by a delete held before
    if change.kind == "dir":
        if now is not None:
            os.unlink(name, dir_fd=parent)
        os.close(place.directory(parent, name, change.mode, uid, gid))
    elif change.kind == "symlink":
        assert change.target is not None
        place.symlink(parent, name, change.target, uid, gid)
    else:
        place.file_bytes(parent, name, change.content or b"", change.mode, uid, gid)
    return True


def _already(change: Held, parent: int, name: str, now: os.stat_result | None) -> bool:
    """Whether the workspace holds ``change`` already, exactly."""
    if change.kind == "delete":
        return now is None
    if now is None:
        return False
    if change.kind == "dir":
        return stat.S_ISDIR(now.st_mode) and stat.S_IMODE(now.st_mode) == change.mode
    if change.kind == "symlink":
        return stat.S_ISLNK(now.st_mode) and os.readlink(name, dir_fd=parent) == change.target
    content = change.content or b""
    if not stat.S_ISREG(now.st_mode) or now.st_size != len(content):
        return False
    if stat.S_IMODE(now.st_mode) != change.mode:
        return False
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    try:
        return _read_all(fd, len(content)) == content
    finally:
        os.close(fd)
