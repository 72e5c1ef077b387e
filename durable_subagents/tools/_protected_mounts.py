"""The protected entries of a workspace inside a sandbox: read-only, and never made.

An entry that exists (``.git``, ``.vscode``...) is bound read-only into the call's
sandbox. One that is missing must not be left behind by the call: agent directories
are held by an empty read-only placeholder while the call runs, and other entries the
call made are removed after it. ``.git`` alone may be created (``git init``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
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

_placeholder_lock = threading.Lock()
_placeholder_users: dict[Path, int] = {}


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
    """Read-only binds of the protected entries that exist, and of taken placeholders."""
    out: list[str] = []
    present, _ = _present(ws, protected)
    for name in present:
        path = ws / name
        if path in _placeholder_users:
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        elif path.is_symlink():
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
        placeholders: The empty directories standing in for ``_PLACEHOLDERS``.
        missing: The other missing entries, removed after the call if it made them.
    """

    workspace: Path
    placeholders: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def release(self) -> list[str]:
        """Give back the placeholders; remove the missing entries the call created.

        Returns:
            The entries removed (relative paths), for the command's output.
        """
        with _placeholder_lock:
            for path in self.placeholders:
                _placeholder_users[path] -= 1
                if _placeholder_users[path] == 0:
                    del _placeholder_users[path]
                    with contextlib.suppress(OSError):
                        path.rmdir()  # only if still empty (an approved write filled it?)
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
    """Take placeholders for missing agent directories; note the other missing entries."""
    guard = Guard(workspace)
    with _placeholder_lock:
        # under the lock: a placeholder another call holds is present on disk, and this
        # call binds it too, so it takes a share, or that call's end would remove what
        # this one's sandbox is about to mount
        _, missing = _present(workspace, protected)
        for name in _PLACEHOLDERS:
            held = workspace / name
            if name not in missing and held in _placeholder_users:
                _placeholder_users[held] += 1
                guard.placeholders.append(held)
        for name in missing:
            if name in _CREATABLE:
                continue
            path = workspace / name
            if name not in _PLACEHOLDERS:
                guard.missing.append(name)
            elif path in _placeholder_users:
                _placeholder_users[path] += 1
                guard.placeholders.append(path)
            else:
                try:
                    path.mkdir()
                except OSError:
                    continue
                _placeholder_users[path] = 1
                guard.placeholders.append(path)
    return guard
