"""Paths inside a task's workspace, opened race-free (hidden ones refused), and read bounded.

Every path is opened in one walk from a descriptor of ``ToolContext.workspace`` (see
``_confined_open``): symlinks inside are followed, and ``..`` escapes, absolute paths
elsewhere and symlinks pointing out are refused, even when the tree changes while the
tool runs. The file tools (``_files``, ``_search``) open what they touch through here.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from durable_subagents.tools._confined_open import (
    Escape,
    Opened,
    open_beneath,
    resolve_beneath,
)
from durable_subagents.tools._decorator import ToolContext, ToolError
from durable_subagents.tools._landing import WRITE_FLAGS, landing_check

__all__ = [
    "open_in_workspace",
    "open_root",
    "resolve_in_workspace",
    "rule_path",
    "written_path",
]


SNIFF_BYTES = 8_192
READ_BLOCK = 1 << 16


def refuse_escape(ctx: ToolContext, path: str, err: Escape) -> ToolError:
    root = ctx.workspace
    if err.through_link:
        return ToolError(
            f"path '{path}' leads through a symlink outside the workspace root {root} "
            f"({err}); only files inside the workspace can be used"
        )
    return ToolError(
        f"path '{path}' is outside the workspace root {root}; "
        "use a path relative to the workspace root"
    )


def is_hidden(ctx: ToolContext, parts: tuple[str, ...]) -> bool:
    """Whether workspace path ``parts`` is, or lies in, the worker's own data."""
    if not ctx.hidden:
        return False
    where = ctx.workspace.joinpath(*parts)
    return any(where == h or where.is_relative_to(h) for h in ctx.hidden)


def check_hidden(ctx: ToolContext, path: str, parts: tuple[str, ...]) -> None:
    if is_hidden(ctx, parts):
        raise ToolError(
            f"path '{path}' is in this worker's own data (blob store, configuration); "
            "tools cannot read or change it"
        )


def resolve_in_workspace(ctx: ToolContext, path: str) -> Path:
    """Where ``path`` (relative to the workspace, or absolute inside it) leads.

    Symlinks are followed as far as entries exist, never out of the workspace. The
    answer can be out of date by the time it is used: a tool that opens the path
    should call ``open_in_workspace``, which checks and opens in one walk.

    Raises:
        ToolError: The path, or what a symlink on it points to, is outside the workspace,
            or in the worker's own data.
    """
    try:
        parts = resolve_beneath(ctx.workspace, path, ctx.workspace_fd)
    except Escape as err:
        raise refuse_escape(ctx, path, err) from None
    except (OSError, ValueError) as err:
        raise ToolError(f"cannot resolve path '{path}': {err}") from None
    check_hidden(ctx, path, parts)
    return ctx.workspace.joinpath(*parts)


def open_in_workspace(
    ctx: ToolContext, path: str, flags: int, *, make_parents: bool = False
) -> Opened:
    """Open ``path`` inside the workspace in one race-free walk (see ``open_beneath``).

    The walk holds the call to its decision (see ``_landing``): the call's own path
    (``ctx.decided``) opens only where it led when the call was judged; any other path
    only where the task's rules (``ctx.rules``) allow without asking, and a write
    never into a protected entry. Checked before anything is created or opened.

    Returns:
        The descriptor (the caller closes it) and where it lies in the workspace.

    Raises:
        ToolError: The path leads outside the workspace, into the worker's own data,
            somewhere other than where the call was judged, or where the task's rules
            or protected entries do not let this call go.
        OSError: As ``open`` would.
    """
    writing = make_parents or bool(flags & WRITE_FLAGS)
    check = landing_check(ctx, path, writing=writing)
    try:
        opened = open_beneath(
            ctx.workspace,
            path,
            flags,
            make_parents=make_parents,
            check=check,
            root_fd=ctx.workspace_fd,
        )
    except Escape as err:
        raise refuse_escape(ctx, path, err) from None
    except ValueError as err:
        raise ToolError(f"path '{path}': {err}") from None
    try:
        check_hidden(ctx, path, opened.parts)
    except ToolError:
        os.close(opened.fd)
        raise
    return opened


def open_root(ctx: ToolContext, flags: int = os.O_RDONLY | os.O_DIRECTORY) -> int:
    """A new descriptor of the workspace's top: from the held one, else by its path."""
    flags |= os.O_CLOEXEC
    if ctx.workspace_fd is not None:
        return os.open(".", flags, dir_fd=ctx.workspace_fd)
    return os.open(ctx.workspace, flags)


def rule_path(workspace: Path, raw: str, root_fd: int | None = None) -> str:
    """``raw`` as path rules see it: resolved against the workspace, symlinks followed.

    ``root_fd``: the workspace's held descriptor, walked from instead of its path.
    Relative to the workspace (``.`` for the root) when inside it, so ``./s/k``,
    ``m/../s/k`` and ``/abs/ws/s/k`` are all ``s/k``; absolute when outside (the
    file tools refuse it anyway, and no relative pattern allows it).
    """
    try:
        return "/".join(resolve_beneath(workspace, raw, root_fd)) or "."
    except (Escape, OSError, ValueError):
        path = Path(raw)
        return posixpath.normpath((path if path.is_absolute() else workspace / path).as_posix())


def written_path(workspace: Path, raw: str) -> str:
    """``raw`` as written: like ``rule_path``, but no symlink followed (``..`` pops a name)."""
    path = Path(raw)
    where = posixpath.normpath((path if path.is_absolute() else workspace / path).as_posix())
    root = workspace.as_posix()
    if where == root:
        return "."
    inside = where.removeprefix(root.rstrip("/") + "/")
    return inside if inside != where else where


def display_path(parts: tuple[str, ...]) -> str:
    """A workspace path for the model; undecodable bytes of a name show as U+FFFD."""
    text = "/".join(parts) or "."
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


@contextmanager
def os_errors(action: str, path: str) -> Iterator[None]:
    try:
        yield
    except ToolError:
        raise
    except OSError as e:
        raise ToolError(f"cannot {action} '{path}': {e.strerror or e}") from None


READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
"""Never blocks on a FIFO or device: the type is checked on the open descriptor."""


def regular_reader(fd: int, name: str) -> BinaryIO:
    """A blocking reader on ``fd`` if it is a regular file; closes ``fd`` otherwise."""
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ToolError(f"'{name}' is a directory; use list_files to see what it contains")
        if not stat.S_ISREG(mode):
            raise ToolError(
                f"'{name}' is not a regular file (a FIFO, socket or device); "
                "only regular files can be read"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_binary(f: BinaryIO) -> bool:
    head = f.read(SNIFF_BYTES)
    f.seek(0)
    return b"\0" in head


def open_text(ctx: ToolContext, path: str) -> tuple[BinaryIO, tuple[str, ...]]:
    """Open an existing text file of the workspace for reading, in one race-free walk."""
    try:
        opened = open_in_workspace(ctx, path, READ_FLAGS)
    except FileNotFoundError:
        raise ToolError(f"file not found: '{path}' (workspace root {ctx.workspace})") from None
    f = regular_reader(opened.fd, path)
    if is_binary(f):
        f.close()
        raise ToolError(f"'{path}' is a binary file; only text files can be read or edited")
    return f, opened.parts


def bounded_lines(f: io.TextIOWrapper, ctx: ToolContext) -> Iterator[str]:
    """Lines of at most ``MAX_LINE_CHARS`` + 1 characters: a 1 GB line costs no memory.

    A longer line is cut there and keeps a marker with the number of characters cut.
    Stops (``ToolError``) once the call is cancelled or over its time limit.
    """
    while True:
        ctx.check()
        line = f.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            cut = len(line) - MAX_LINE_CHARS
            while True:
                ctx.check()
                rest = f.readline(READ_BLOCK)
                cut += len(rest.rstrip("\r\n"))
                if not rest or rest.endswith("\n"):
                    break
            line = f"{line[:MAX_LINE_CHARS]} [... line cut: {cut} more characters]\n"
        yield line


MAX_LINE_CHARS = 2_000
