"""File tools, jailed to the task's workspace root.

Every path is resolved against ``ToolContext.workspace`` with symlinks followed, and
refused when the result lies outside the root: ``..`` escapes, absolute paths elsewhere,
symlinks (or symlinked parent directories) pointing out. Listing and grep walk the tree
without following symlinked directories and skip symlinked files that point out.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import re2

from durable_subagents.activities.tools._decorator import ToolContext, ToolError, tool

__all__ = ["edit_file", "grep", "list_files", "read_file", "rule_path", "write_file"]

MAX_READ_CHARS = 256_000
MAX_LINE_CHARS = 2_000
MAX_LIST_ENTRIES = 1_000
MAX_GREP_MATCHES = 500
MAX_GREP_LINE_CHARS = 300
MAX_GREP_FILE_BYTES = 10_000_000
_SNIFF_BYTES = 8_192
_READ_BLOCK = 1 << 16
_SKIP_DIRS = {".git"}


def resolve_in_workspace(ctx: ToolContext, path: str) -> Path:
    """Resolve ``path`` (relative to the workspace, or absolute inside it), symlinks followed.

    Raises:
        ToolError: The path, or what a symlink on it points to, is outside the workspace.
    """
    root = ctx.workspace
    raw = Path(path)
    candidate = raw if raw.is_absolute() else root / raw
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError, ValueError) as e:
        raise ToolError(f"cannot resolve path '{path}': {e}") from None
    if resolved.is_relative_to(root):
        if any(resolved == h or resolved.is_relative_to(h) for h in ctx.hidden):
            raise ToolError(
                f"path '{path}' is in this worker's own data (blob store, configuration); "
                "tools cannot read or change it"
            )
        return resolved
    if Path(os.path.normpath(candidate)).is_relative_to(root):
        raise ToolError(
            f"path '{path}' leads through a symlink to {resolved}, which is outside the "
            f"workspace root {root}; only files inside the workspace can be used"
        )
    raise ToolError(
        f"path '{path}' is outside the workspace root {root}; "
        "use a path relative to the workspace root"
    )


def rule_path(workspace: Path, raw: str) -> str:
    """``raw`` as path rules see it: resolved against the workspace, symlinks followed.

    Relative to the workspace (``.`` for the root) when inside it, so ``./s/k``,
    ``m/../s/k`` and ``/abs/ws/s/k`` are all ``s/k``; absolute when outside (the
    file tools refuse it anyway, and no relative pattern allows it).
    """
    try:
        path = Path(raw)
        resolved = (path if path.is_absolute() else workspace / path).resolve()
    except (OSError, RuntimeError, ValueError):
        return posixpath.normpath(raw)
    if resolved == workspace:
        return "."
    if resolved.is_relative_to(workspace):
        return resolved.relative_to(workspace).as_posix()
    return resolved.as_posix()


def _display(ctx: ToolContext, path: Path) -> str:
    """A path for the model; undecodable bytes of a name show as U+FFFD, never fail."""
    text = path.relative_to(ctx.workspace).as_posix() if path != ctx.workspace else "."
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


@contextmanager
def _os_errors(action: str, path: str) -> Iterator[None]:
    try:
        yield
    except ToolError:
        raise
    except OSError as e:
        raise ToolError(f"cannot {action} '{path}': {e.strerror or e}") from None


def _is_binary(path: Path) -> bool:
    with _open_regular(path) as f:
        return b"\0" in f.read(_SNIFF_BYTES)


def _write_regular(path: Path, data: bytes) -> None:
    """Replace a regular file's content; never follow a final symlink or block on a FIFO."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO):
            raise ToolError(
                f"'{path.name}' is a symlink or a FIFO; only regular files can be written"
            ) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(f"'{path.name}' is not a regular file; it cannot be written")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _open_regular(path: Path) -> BinaryIO:
    """Open a regular file for reading; never block on a FIFO or a device.

    ``O_NONBLOCK`` makes opening a FIFO return at once; the type is then checked on
    the open descriptor (no race with a swap after a check by name).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(
                f"'{path.name}' is not a regular file (a FIFO, socket or device); "
                "only regular files can be read"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _existing_file(ctx: ToolContext, path: str) -> Path:
    resolved = resolve_in_workspace(ctx, path)
    if not resolved.exists():
        raise ToolError(f"file not found: '{path}' (workspace root {ctx.workspace})")
    if resolved.is_dir():
        raise ToolError(f"'{path}' is a directory; use list_files to see what it contains")
    if _is_binary(resolved):
        raise ToolError(f"'{path}' is a binary file; only text files can be read or edited")
    return resolved


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
    with _os_errors("read", path):
        resolved = _existing_file(ctx, path)
        out: list[str] = []
        size = 0
        total = 0
        next_offset: int | None = None
        with io.TextIOWrapper(_open_regular(resolved), encoding="utf-8", errors="replace") as f:
            for total, line in enumerate(_bounded_lines(f), start=1):
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


def _re2_options(ignore_case: bool = False) -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    return options


def _linear_regex(pattern: str, *, ignore_case: bool = False) -> Any:
    """A regex that matches in linear time (RE2): no pattern can hang a worker."""
    try:
        return re2.compile(pattern, options=_re2_options(ignore_case))
    except re2.error as e:
        detail = (
            e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else e
        )
        raise ToolError(
            f"grep: invalid regular expression {pattern!r}: {detail}. Patterns use RE2 "
            "syntax (like Python's re, without backreferences or lookaround)"
        ) from None


class _Glob:
    """A compiled glob: RE2, so repeated ``**`` or ``*`` cannot blow up."""

    def __init__(self, pattern: str) -> None:
        self.pattern = re2.compile(_glob_regex(pattern), options=_re2_options())

    def match(self, path: str) -> bool:
        safe = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return self.pattern.fullmatch(safe) is not None


def _glob(pattern: str) -> _Glob:
    try:
        return _Glob(pattern)
    except re2.error:
        raise ToolError(f"invalid glob pattern {pattern!r}") from None


def _bounded_lines(f: io.TextIOWrapper) -> Iterator[str]:
    """Lines of at most ``MAX_LINE_CHARS`` + 1 characters: a 1 GB line costs no memory.

    A longer line is cut there and keeps a marker with the number of characters cut.
    """
    while True:
        line = f.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            cut = len(line) - MAX_LINE_CHARS
            while True:
                rest = f.readline(_READ_BLOCK)
                cut += len(rest.rstrip("\r\n"))
                if not rest or rest.endswith("\n"):
                    break
            line = f"{line[:MAX_LINE_CHARS]} [... line cut: {cut} more characters]\n"
        yield line


def _glob_regex(pattern: str) -> str:
    """Translate a glob (``**`` spans directories, ``{a,b}`` alternatives) to a regex."""
    pattern = pattern.removeprefix("./")
    while "**/**" in pattern:
        pattern = pattern.replace("**/**", "**")
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        c = pattern[i]
        end = {"[": pattern.find("]", i + 2), "{": pattern.find("}", i + 1)}.get(c, -1)
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and end != -1:
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end
        elif c == "{" and end != -1:
            choices = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_glob_regex(x) for x in choices) + ")")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _walk_files(ctx: ToolContext, base: Path) -> Iterator[Path]:
    """Files under ``base`` in sorted order, never leaving the workspace through a symlink."""
    if base.is_file():
        yield base
        return
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in _SKIP_DIRS and not (ctx.hidden and Path(dirpath, d).resolve() in ctx.hidden)
        )
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if path.is_symlink():
                try:
                    target = path.resolve(strict=True)
                except (OSError, RuntimeError):
                    continue
                if not target.is_relative_to(ctx.workspace) or not target.is_file():
                    continue
            yield path


def _search_root(ctx: ToolContext, path: str) -> Path:
    base = resolve_in_workspace(ctx, path)
    if not base.exists():
        raise ToolError(f"path not found: '{path}' (workspace root {ctx.workspace})")
    return base


@tool(read_only=True)
def list_files(ctx: ToolContext, pattern: str = "**/*", path: str = ".") -> str:
    """List files in the workspace whose path matches a glob pattern.

    Returns one path per line, relative to the workspace root, sorted. Only files are
    listed (not directories); `.git` is skipped. `*` matches within one directory, `**`
    spans directories, `{a,b}` gives alternatives: `**/*.py` finds Python files at any
    depth, `*.md` only at the top of `path`, `src/**/*.{ts,tsx}` TypeScript under src.

    Args:
        ctx: Supplied by the worker (the workspace root); not a model argument.
        pattern: Glob pattern matched against paths relative to `path`.
        path: Directory to list, relative to the workspace root.
    """
    regex = _glob(pattern)
    with _os_errors("list", path):
        base = _search_root(ctx, path)
        matches = []
        for file in _walk_files(ctx, base):
            relative = file.relative_to(base).as_posix() if file != base else file.name
            if regex.match(relative):
                matches.append(_display(ctx, file))
    matches.sort()
    if not matches:
        return f"no files match '{pattern}' under '{path}'"
    if len(matches) > MAX_LIST_ENTRIES:
        hidden = len(matches) - MAX_LIST_ENTRIES
        matches = matches[:MAX_LIST_ENTRIES]
        matches.append(f"[... {hidden} more files not shown; use a narrower pattern or path ...]")
    return "\n".join(matches)


@tool(read_only=True)
def grep(
    ctx: ToolContext,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    ignore_case: bool = False,
) -> str:
    """Search text files in the workspace for lines matching a regular expression.

    Returns matches as `file:line: text` (file relative to the workspace root, lines
    numbered from 1), in file order. Binary files and `.git` are skipped; results stop
    after 500 matches with a note.

    Args:
        ctx: Supplied by the worker (the workspace root); not a model argument.
        pattern: Python regular expression, searched in each line (`re.search`).
        path: File or directory to search, relative to the workspace root.
        glob: Only search files matching this glob: without a `/` it matches the file
            name at any depth (`*.py`), with one the path relative to `path`
            (`src/**/*.ts`).
        ignore_case: Match without regard to letter case.
    """
    regex = _linear_regex(pattern, ignore_case=ignore_case)
    name_filter = _glob(glob) if glob else None
    results: list[str] = []
    capped = False
    with _os_errors("search", path):
        base = _search_root(ctx, path)
        for file in _walk_files(ctx, base):
            if name_filter is not None:
                relative = file.relative_to(base).as_posix() if file != base else file.name
                if not name_filter.match(relative if "/" in (glob or "") else file.name):
                    continue
            try:
                if file.stat().st_size > MAX_GREP_FILE_BYTES or _is_binary(file):
                    continue
                with io.TextIOWrapper(_open_regular(file), encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(_bounded_lines(f), start=1):
                        if not regex.search(line):
                            continue
                        if len(results) == MAX_GREP_MATCHES:
                            capped = True
                            break
                        text = line.rstrip("\r\n")
                        if len(text) > MAX_GREP_LINE_CHARS:
                            text = text[:MAX_GREP_LINE_CHARS] + " [...]"
                        results.append(f"{_display(ctx, file)}:{number}: {text}")
            except (OSError, ToolError):
                continue
            if capped:
                break
    if not results:
        return f"no matches for {pattern!r} under '{path}'"
    if capped:
        results.append(
            f"[... stopped after {MAX_GREP_MATCHES} matches; narrow the pattern, path or glob ...]"
        )
    return "\n".join(results)


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
    with _os_errors("write", path):
        resolved = resolve_in_workspace(ctx, path)
        if resolved.is_dir():
            raise ToolError(f"'{path}' is a directory; give a file path")
        resolved.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        _write_regular(resolved, data)
    return f"wrote {len(data)} bytes to {_display(ctx, resolved)}"


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
    with _os_errors("edit", path):
        resolved = _existing_file(ctx, path)
        try:
            with resolved.open(encoding="utf-8", errors="strict", newline="") as f:
                text = f.read()
        except UnicodeDecodeError:
            raise ToolError(f"edit_file: '{path}' is not UTF-8 text; it cannot be edited") from None
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
        _write_regular(resolved, text.replace(old, new).encode("utf-8"))
    plural = "" if count == 1 else "s"
    return f"replaced {count} occurrence{plural} in {_display(ctx, resolved)}"
