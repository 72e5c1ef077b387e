"""The protected entries of a workspace inside a sandbox: read-only, and never made.

An entry that exists (``.git``, ``.vscode``...) is bound read-only into the call's
sandbox. One that is missing must not be left behind by the call: agent directories
are held by an empty read-only placeholder while the call runs, and other entries the
call made are removed after it. ``.git`` alone may be created (``git init``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Guard", "guard_protected", "protected_mounts"]

_CREATABLE = (".git",)
"""Protected entries a command may create where they are missing: ``git init`` in a
fresh workspace is ordinary work. Once one exists, every later call sees it read-only."""

_PLACEHOLDERS = (".claude", ".opencode")
"""Missing entries held by an empty read-only directory during the call, so they never
exist even for a moment: clients resolve agents from them while tasks run."""

PLACEHOLDER_MODE = 0o555
"""The mode a placeholder is made with: what tells it from a user's own empty directory."""


def _hold(path: Path) -> int | None:
    """A shared lock on the directory at ``path``, made as a placeholder if missing.

    Every call holds its own lock (an open descriptor of the directory, ``flock``) for as
    long as its sandbox may mount the entry, in whichever worker process on the host it
    runs: a placeholder is removed only by a call that finds no other holder, so one
    call's end never pulls it from under another's mount.

    Returns:
        The descriptor holding the lock; None if ``path`` is neither missing nor a plain
        directory (a file or a symlink: the mounts handle those as they are).
    """
    for _ in range(100):
        try:
            os.mkdir(path, PLACEHOLDER_MODE)
            os.chmod(path, PLACEHOLDER_MODE)  # whatever the umask took away
        except FileExistsError:
            pass
        except OSError:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # its last holder removed it meanwhile: make it again
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            now = os.lstat(path)
        except FileNotFoundError:
            now = None
        held = os.fstat(fd)
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)  # removed (and maybe made again) between the open and the lock
    return None


def _let_go(path: Path, fd: int) -> None:
    """Give back a call's lock; the last holder of an empty placeholder removes it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)  # another call holds it still, and removes it when done
        return
    try:
        info = os.fstat(fd)
        if stat.S_IMODE(info.st_mode) == PLACEHOLDER_MODE and not os.listdir(fd):
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
                path.rmdir()
    except OSError:
        pass
    finally:
        os.close(fd)


def _outermost(protected: Sequence[str]) -> list[str]:
    """The protected entries not inside another one (``.git`` covers ``.git/hooks``)."""
    names = {Path(n) for n in protected}
    return [n for n in protected if not any(p in names for p in Path(n).parents[:-1])]


def _present(ws: Path, protected: Sequence[str]) -> tuple[list[str], list[str]]:
    """The outermost entries that exist under ``ws`` now (symlinks count), and the rest.

    The workspace's top is listed once: most entries are single names, and a list of
    seventy would otherwise cost seventy system calls per command.
    """
    try:
        with os.scandir(ws) as entries:
            top = {e.name for e in entries}
    except OSError:
        top = set()
    present: list[str] = []
    missing: list[str] = []
    for name in _outermost(protected):
        first, _, rest = name.partition("/")
        exists = first in top and (not rest or os.path.lexists(ws / name))
        (present if exists else missing).append(name)
    return present, missing


def protected_mounts(ws: Path, protected: Sequence[str]) -> list[str]:
    """Read-only binds of the protected entries that exist (held placeholders too)."""
    out: list[str] = []
    present, _ = _present(ws, protected)
    for name in present:
        path = ws / name
        if path.is_symlink():
            # What it points to inside the workspace stays read-only too.
            target = path.resolve()
            if target.is_relative_to(ws) and target.exists() and target != ws:
                out += ["--ro-bind", str(target), str(target)]
        else:
            out += ["--ro-bind", str(path), str(path)]
    return out


@dataclass
class Guard:
    """What keeps one call from leaving a protected entry that was missing.

    Attributes:
        workspace: The call's workspace.
        placeholders: The ``_PLACEHOLDERS`` directories the call holds (see ``_hold``),
            with the descriptor holding each.
        missing: The other missing entries, removed after the call if it made them.
    """

    workspace: Path
    placeholders: list[tuple[Path, int]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def release(self) -> list[str]:
        """Give back the placeholders; remove the missing entries the call created.

        Returns:
            The entries removed (relative paths), for the command's output.
        """
        for path, fd in self.placeholders:
            _let_go(path, fd)
        self.placeholders = []
        removed = [name for name in self.missing if _remove_made(self.workspace, name)]
        self.missing = []
        return removed


def _remove_made(ws: Path, name: str) -> bool:
    """Remove entry ``name`` if the call made it, or a symlink that leads toward it.

    Every process of the call is gone by now (its PID namespace died with it), so
    nothing can make it again after the check. A component that became a symlink is
    removed too: ``.config -> elsewhere`` with a ``mise.toml`` there reads the same.
    """
    path = ws
    parts = Path(name).parts
    for i, part in enumerate(parts):
        path = path / part
        last = i == len(parts) - 1
        if path.is_symlink() or (last and os.path.lexists(path)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
            return True
        if not path.is_dir():
            return False
    return False


def guard_protected(workspace: Path, protected: Sequence[str]) -> Guard:
    """Hold the agent directories (placeholders where missing); note the other missing entries.

    The holds come first, so the entries the mounts are then computed from stay put
    until the call ends, whichever worker process on the host made them.
    """
    guard = Guard(workspace)
    try:
        for name in _PLACEHOLDERS:
            if name in protected:
                path = workspace / name
                fd = _hold(path)
                if fd is not None:
                    guard.placeholders.append((path, fd))
        _, missing = _present(workspace, protected)
    except BaseException:
        guard.release()
        raise
    guard.missing = [n for n in missing if n not in _CREATABLE and n not in _PLACEHOLDERS]
    return guard
