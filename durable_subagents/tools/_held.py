"""Held changes as a person reads them: a diff for text, sizes and modes otherwise.

What a command changed under a protected path waits for a decision (``_land``). The
person deciding sees each change against what the workspace holds now: a unified diff
for a text file, sizes for a binary one, the mode where it changes, a symlink's
target, a deletion. The text is bounded (``DIFF_CHARS``); what is cut is said.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Sequence

from durable_subagents.tools._land import Held

__all__ = ["DIFF_CHARS", "describe"]

DIFF_CHARS = 256 * 1024
"""Characters of the description of one call's held changes; the rest is cut, said."""
_FILE_LINES = 2_000
"""Lines of one file's diff; the rest is cut, said."""
_READ_BYTES = 1 << 20
"""A workspace file larger than this is described by its size only."""
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _current(workspace_fd: int, path: str) -> tuple[os.stat_result | None, bytes | None]:
    """What the workspace holds at ``path`` now (never following a symlink on the way)."""
    parts = path.split("/")
    fd = os.dup(workspace_fd)
    try:
        for part in parts[:-1]:
            child = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = child
        info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _READ_BYTES:
            return info, None
        file = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        try:
            return info, os.read(file, _READ_BYTES + 1)
        finally:
            os.close(file)
    except OSError:
        return None, None
    finally:
        os.close(fd)


def _text(data: bytes | None) -> list[str] | None:
    if data is None or b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _file(change: Held, info: os.stat_result | None, old: bytes | None) -> list[str]:
    new = change.content or b""
    mode = f"{change.mode:o}"
    if info is None or not stat.S_ISREG(info.st_mode):
        was = "" if info is None else " (replacing what was there)"
        head = f"{change.path}: new file, {len(new):,} bytes, mode {mode}{was}"
    else:
        old_mode = f"{stat.S_IMODE(info.st_mode):o}"
        modes = f", mode {old_mode} -> {mode}" if old_mode != mode else ""
        head = f"{change.path}: changed, {info.st_size:,} -> {len(new):,} bytes{modes}"
    new_lines = _text(new)
    old_lines = [] if info is None or not stat.S_ISREG(info.st_mode) else _text(old)
    if new_lines is None or old_lines is None:
        return [f"{head} (binary or too large to show)\n"]
    diff = list(difflib.unified_diff(old_lines, new_lines, f"a/{change.path}", f"b/{change.path}"))
    if len(diff) > _FILE_LINES:
        diff = [*diff[:_FILE_LINES], f"[... {len(diff) - _FILE_LINES} more lines of this diff]\n"]
    return [f"{head}\n", *(line if line.endswith("\n") else line + "\n" for line in diff)]


_AGENT_DIRS = (".claude", ".opencode")
_DEFINITIONS = ("agents", "agent", "commands", "command")


def _kind_note(path: str) -> str:
    """What a held path is to a person who decides, where its name says."""
    parts = [p.casefold() for p in path.split("/")]
    for i, part in enumerate(parts):
        if part in _AGENT_DIRS:
            rest = parts[i + 1 :]
            if rest[:1] and rest[0] in _DEFINITIONS:
                return (
                    " [an agent definition: whoever spawns or starts an agent in this "
                    "project may run it]"
                )
            return " [agent configuration: hooks, permissions and MCP servers agents use]"
    if ".git" in parts or ".githooks" in parts or ".husky" in parts:
        return " [git runs its hooks and configured commands]"
    return ""


def describe(workspace_fd: int, held: Sequence[Held]) -> str:
    """The held changes as a person reads them, against the workspace now."""
    out: list[str] = []
    size = 0
    for index, change in enumerate(held):
        info, old = _current(workspace_fd, change.path)
        if change.kind == "file":
            lines = _file(change, info, old)
        elif change.kind == "dir":
            lines = [f"{change.path}/: new directory, mode {change.mode:o}\n"]
        elif change.kind == "symlink":
            lines = [f"{change.path}: symlink -> {change.target}\n"]
        else:
            what = "directory and all it holds" if info and stat.S_ISDIR(info.st_mode) else "file"
            lines = [f"{change.path}: deleted ({what})\n"]
        lines[0] = lines[0].rstrip("\n") + _kind_note(change.path) + "\n"
        chunk = "".join(lines)
        if size + len(chunk) > DIFF_CHARS:
            out.append(f"[... {len(held) - index} more changes not shown: the text is cut here]\n")
            break
        out.append(chunk)
        size += len(chunk)
    return "".join(out)
