"""The file tools that read and change one file: ``read_file``, ``write_file``, ``edit_file``.

Every path is opened race-free inside the task's workspace (see ``_workspace_paths``);
``list_files`` and ``grep`` walk it (see ``_search``).

Each call runs in a process of its own, with the call's CPU-time and memory limits
(see ``_processes``): what one task's calls cost is not taken from the worker.
"""

from __future__ import annotations

import errno
import io
import os
import stat

from durable_subagents.tools._confined_open import (
    Opened,
)
from durable_subagents.tools._decorator import ToolContext, ToolError, tool
from durable_subagents.tools._processes import forked
from durable_subagents.tools._workspace_paths import (
    bounded_lines,
    display_path,
    is_binary,
    open_in_workspace,
    open_text,
    os_errors,
    regular_reader,
)

__all__ = ["edit_file", "read_file", "write_file"]

MAX_READ_CHARS = 256_000
MAX_EDIT_BYTES = 10_000_000


def _write_fd(fd: int, data: bytes) -> None:
    os.set_blocking(fd, True)
    os.ftruncate(fd, 0)
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(fd, view[offset:], offset)


def _open_for_write(ctx: ToolContext, path: str) -> Opened:
    """Open (creating it and its directories) a regular file of the workspace to replace."""
    try:
        opened = open_in_workspace(
            ctx, path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, make_parents=True
        )
    except IsADirectoryError:
        raise ToolError(f"'{path}' is a directory; give a file path") from None
    except OSError as err:
        if err.errno == errno.ENXIO:
            raise ToolError(
                f"'{path}' is a FIFO, not a regular file; it cannot be written"
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(opened.fd).st_mode):
        os.close(opened.fd)
        raise ToolError(f"'{path}' is not a regular file; it cannot be written")
    return opened


@forked
@tool(read_only=True)
def read_file(ctx: ToolContext, path: str, offset: int = 0, limit: int = 2000) -> str:
    """Read a text file from the workspace.

    Lines come back numbered from 1 like `cat -n` (number, tab, text). Long files are
    cut: the output then ends with a note giving the `offset` to continue from. Binary
    files are refused.

    Args:
        ctx: Supplied by the worker (the workspace root); not a model argument.
        path: File path relative to the workspace root.
        offset: First line to return, counted from 0 (offset=100 starts at line 101).
        limit: Maximum number of lines to return.
    """
    if offset < 0:
        raise ToolError("read_file: offset must be 0 or more")
    if limit < 1:
        raise ToolError("read_file: limit must be at least 1")
    with os_errors("read", path):
        raw, _ = open_text(ctx, path)
        out: list[str] = []
        size = 0
        total = 0
        next_offset: int | None = None
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as f:
            for total, line in enumerate(bounded_lines(f, ctx), start=1):
                index = total - 1
                if index < offset or next_offset is not None:
                    continue
                if index >= offset + limit:
                    next_offset = index
                    continue
                text = line.rstrip("\r\n")
                numbered = f"{total:6}\t{text}"
                if size + len(numbered) > MAX_READ_CHARS and out:
                    next_offset = index
                    continue
                out.append(numbered)
                size += len(numbered) + 1
    if total == 0:
        return "[empty file]"
    if offset >= total:
        raise ToolError(f"read_file: offset {offset} is past the end; '{path}' has {total} lines")
    if next_offset is not None:
        out.append(
            f"[... truncated: showing lines {offset + 1}-{next_offset} of {total}; "
            f"continue with offset={next_offset} ...]"
        )
    return "\n".join(out)


@forked
@tool
def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Create or overwrite a file in the workspace with the given content.

    Missing parent directories are created. The whole file is replaced: to change part
    of an existing file, use edit_file instead.

    Args:
        ctx: Supplied by the worker (the workspace root); not a model argument.
        path: File path relative to the workspace root.
        content: The complete new content of the file.
    """
    data = content.encode("utf-8")
    with os_errors("write", path):
        opened = _open_for_write(ctx, path)
        try:
            _write_fd(opened.fd, data)
        finally:
            os.close(opened.fd)
    return f"wrote {len(data)} bytes to {display_path(opened.parts)}"


@forked
@tool
def edit_file(ctx: ToolContext, path: str, old: str, new: str, replace_all: bool = False) -> str:
    """Replace exact text in a file of the workspace.

    `old` must match the file's text exactly, whitespace and indentation included, and
    occur exactly once, unless `replace_all` is true. Read the file first and copy the
    text to change with enough surrounding lines to make it unique.

    Args:
        ctx: Supplied by the worker (the workspace root); not a model argument.
        path: File path relative to the workspace root.
        old: The exact text to replace.
        new: The text to put in its place.
        replace_all: Replace every occurrence instead of requiring exactly one.
    """
    if not old:
        raise ToolError("edit_file: old must not be empty; use write_file to create a file")
    if old == new:
        raise ToolError("edit_file: old and new are the same; nothing to change")
    with os_errors("edit", path):
        # One descriptor for the read and the write: the file edited is the file read.
        try:
            opened = open_in_workspace(ctx, path, os.O_RDWR | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ToolError(f"file not found: '{path}' (workspace root {ctx.workspace})") from None
        with regular_reader(opened.fd, path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_EDIT_BYTES:
                raise ToolError(
                    f"edit_file: '{path}' is {size} bytes, over the {MAX_EDIT_BYTES}-byte "
                    "limit for edits; change it with a command instead"
                )
            if is_binary(f):
                raise ToolError(f"'{path}' is a binary file; only text files can be read or edited")
            try:
                text = f.read().decode("utf-8", errors="strict")
            except UnicodeDecodeError:
                raise ToolError(
                    f"edit_file: '{path}' is not UTF-8 text; it cannot be edited"
                ) from None
            count = text.count(old)
            if count == 0:
                raise ToolError(
                    f"edit_file: old text not found in '{path}'; read the file and copy the "
                    "exact text, including whitespace and indentation"
                )
            if count > 1 and not replace_all:
                raise ToolError(
                    f"edit_file: old text occurs {count} times in '{path}'; include more "
                    "surrounding lines to make it unique, or set replace_all to true"
                )
            _write_fd(f.fileno(), text.replace(old, new).encode("utf-8"))
    plural = "" if count == 1 else "s"
    return f"replaced {count} occurrence{plural} in {display_path(opened.parts)}"
