"""File tools, jailed to the task's workspace root.

Every path is opened in one walk from a descriptor of ``ToolContext.workspace`` (see
``_confined_open``): symlinks inside are followed, and ``..`` escapes, absolute paths
elsewhere and symlinks pointing out are refused, even when the tree changes while the
tool runs. Listing and grep walk the tree by descriptors, never entering a symlinked
directory, and skip symlinked files that point out; by default they also skip what
``.gitignore`` ignores, virtualenvs, ``node_modules`` and caches (see ``_ignore``).

Each call runs in a process of its own, with the call's CPU-time and memory limits
(see ``_processes``): what one task's calls cost is not taken from the worker.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import re2

from durable_subagents.tools._confined_open import (
    Escape,
    Opened,
    open_beneath,
    resolve_beneath,
)
from durable_subagents.tools._decorator import ToolContext, ToolError, tool
from durable_subagents.tools._ignore import Ignorer, Scope
from durable_subagents.tools._landing import WRITE_FLAGS, landing_check
from durable_subagents.tools._processes import forked

__all__ = [
    "edit_file",
    "grep",
    "list_files",
    "open_in_workspace",
    "read_file",
    "resolve_in_workspace",
    "rule_path",
    "write_file",
    "written_path",
]

MAX_READ_CHARS = 256_000
MAX_LINE_CHARS = 2_000
MAX_LIST_ENTRIES = 1_000
MAX_GREP_MATCHES = 500
MAX_GREP_LINE_CHARS = 300
MAX_GREP_FILE_BYTES = 10_000_000
MAX_EDIT_BYTES = 10_000_000
_SNIFF_BYTES = 8_192
_READ_BLOCK = 1 << 16
_SKIP_DIRS = {".git"}


def _refuse(ctx: ToolContext, path: str, err: Escape) -> ToolError:
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


def _is_hidden(ctx: ToolContext, parts: tuple[str, ...]) -> bool:
    """Whether workspace path ``parts`` is, or lies in, the worker's own data."""
    if not ctx.hidden:
        return False
    where = ctx.workspace.joinpath(*parts)
    return any(where == h or where.is_relative_to(h) for h in ctx.hidden)


def _check_hidden(ctx: ToolContext, path: str, parts: tuple[str, ...]) -> None:
    if _is_hidden(ctx, parts):
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
        parts = resolve_beneath(ctx.workspace, path)
    except Escape as err:
        raise _refuse(ctx, path, err) from None
    except (OSError, ValueError) as err:
        raise ToolError(f"cannot resolve path '{path}': {err}") from None
    _check_hidden(ctx, path, parts)
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
        opened = open_beneath(ctx.workspace, path, flags, make_parents=make_parents, check=check)
    except Escape as err:
        raise _refuse(ctx, path, err) from None
    except ValueError as err:
        raise ToolError(f"path '{path}': {err}") from None
    try:
        _check_hidden(ctx, path, opened.parts)
    except ToolError:
        os.close(opened.fd)
        raise
    return opened


def rule_path(workspace: Path, raw: str) -> str:
    """``raw`` as path rules see it: resolved against the workspace, symlinks followed.

    Relative to the workspace (``.`` for the root) when inside it, so ``./s/k``,
    ``m/../s/k`` and ``/abs/ws/s/k`` are all ``s/k``; absolute when outside (the
    file tools refuse it anyway, and no relative pattern allows it).
    """
    try:
        return "/".join(resolve_beneath(workspace, raw)) or "."
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


def _display(parts: tuple[str, ...]) -> str:
    """A workspace path for the model; undecodable bytes of a name show as U+FFFD."""
    text = "/".join(parts) or "."
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


@contextmanager
def _os_errors(action: str, path: str) -> Iterator[None]:
    try:
        yield
    except ToolError:
        raise
    except OSError as e:
        raise ToolError(f"cannot {action} '{path}': {e.strerror or e}") from None


_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
"""Never blocks on a FIFO or device: the type is checked on the open descriptor."""
_DIR_READ = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_WALK_DEPTH = 128
"""Deeper directories are not searched (each level holds a descriptor)."""


def _regular_reader(fd: int, name: str) -> BinaryIO:
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


def _is_binary(f: BinaryIO) -> bool:
    head = f.read(_SNIFF_BYTES)
    f.seek(0)
    return b"\0" in head


def _open_text(ctx: ToolContext, path: str) -> tuple[BinaryIO, tuple[str, ...]]:
    """Open an existing text file of the workspace for reading, in one race-free walk."""
    try:
        opened = open_in_workspace(ctx, path, _READ)
    except FileNotFoundError:
        raise ToolError(f"file not found: '{path}' (workspace root {ctx.workspace})") from None
    f = _regular_reader(opened.fd, path)
    if _is_binary(f):
        f.close()
        raise ToolError(f"'{path}' is a binary file; only text files can be read or edited")
    return f, opened.parts


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
    with _os_errors("read", path):
        raw, _ = _open_text(ctx, path)
        out: list[str] = []
        size = 0
        total = 0
        next_offset: int | None = None
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as f:
            for total, line in enumerate(_bounded_lines(f, ctx), start=1):
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


def _bounded_lines(f: io.TextIOWrapper, ctx: ToolContext) -> Iterator[str]:
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


@dataclass
class _Found:
    """A non-directory entry met by a search, and how to open it."""

    parts: tuple[str, ...]
    """Where it is in the workspace (as found: a symlink's own path)."""
    relative: str
    """Its path relative to the search's base (for globs)."""
    dirfd: int | None
    """The descriptor of its directory; None when it is the base itself."""
    entry: os.DirEntry[str] | None

    @property
    def is_link(self) -> bool:
        return self.entry is not None and self.entry.is_symlink()

    def is_regular(self) -> bool:
        return self.entry is None or self.entry.is_file(follow_symlinks=False)


def _open_found(ctx: ToolContext, found: _Found, base: Opened) -> BinaryIO | None:
    """A reader for a found file, or None to skip it.

    Skipped: what is not a regular file, leads out of the workspace, or is the worker's
    own data (such as a credentials file that sits in the workspace).
    """
    try:
        if found.dirfd is None:
            fd = os.dup(base.fd)  # the base itself: opened with its hidden check
        elif _is_hidden(ctx, found.parts):
            return None
        elif found.is_link:
            fd = open_in_workspace(ctx, "/".join(found.parts), _READ).fd
        else:
            assert found.entry is not None
            fd = os.open(found.entry.name, _READ | os.O_NOFOLLOW, dir_fd=found.dirfd)
        return _regular_reader(fd, found.entry.name if found.entry else found.relative)
    except (OSError, ToolError):
        return None


def _listing(fd: int) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError:
        return []


def _ignorer(ctx: ToolContext, include_ignored: bool) -> Ignorer | None:
    """What a search skips by default; None when the model asked for everything."""
    return None if include_ignored else Ignorer(hidden=lambda parts: _is_hidden(ctx, parts))


def _base_scope(ctx: ToolContext, base: Opened, ignorer: Ignorer | None) -> Scope | None:
    if ignorer is None:
        return None
    try:
        root_fd = os.open(ctx.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None  # the base was opened; search it without rules rather than fail
    try:
        return ignorer.base_scope(root_fd, base.parts)
    finally:
        os.close(root_fd)


def _walk(ctx: ToolContext, base: Opened, ignorer: Ignorer | None = None) -> Iterator[_Found]:
    """What lies under ``base``, sorted, a directory's files before its subdirectories.

    Directories are opened from their parent's descriptor with ``O_NOFOLLOW``: a
    symlinked directory is never entered, and a directory swapped for a symlink
    mid-walk is skipped, not followed. ``.git`` and the worker's hidden paths are
    skipped. With an ``ignorer``, so is what the ignore rules ignore below ``base``: an
    ignored directory is not opened, a virtualenv not listed.
    """
    if not stat.S_ISDIR(os.fstat(base.fd).st_mode):
        yield _Found(base.parts, base.parts[-1] if base.parts else ".", None, None)
        return
    scope = _base_scope(ctx, base, ignorer)
    stack: list[tuple[tuple[str, ...], int, Iterator[str], Scope | None]] = []
    try:
        parts, fd = base.parts, os.dup(base.fd)
        while True:
            subdirs: list[os.DirEntry[str]] = []
            files: list[os.DirEntry[str]] = []
            for entry in _listing(fd):
                try:
                    (subdirs if entry.is_dir(follow_symlinks=False) else files).append(entry)
                except OSError:
                    continue
            if scope is not None and ignorer is not None:
                try:
                    scope = ignorer.enter(scope, fd, parts, {e.name for e in files})
                except BaseException:
                    os.close(fd)
                    raise
            stack.append((parts, fd, iter([e.name for e in subdirs]), scope))
            inner = parts[len(base.parts) :]
            for entry in files:
                ctx.check()
                found = (*parts, entry.name)
                if scope is not None and scope.ignores(found, is_dir=False):
                    _skipped(ignorer, found)
                    continue
                yield _Found(found, "/".join((*inner, entry.name)), fd, entry)
            while stack:
                ctx.check()
                parent, parent_fd, names, scope = stack[-1]
                name = next(names, None)
                if name is None:
                    os.close(parent_fd)
                    stack.pop()
                    continue
                child = (*parent, name)
                if name in _SKIP_DIRS or len(stack) >= MAX_WALK_DEPTH or _is_hidden(ctx, child):
                    continue
                if scope is not None and scope.ignores(child, is_dir=True):
                    _skipped(ignorer, child)
                    continue
                try:
                    fd = os.open(name, _DIR_READ, dir_fd=parent_fd)
                except OSError:
                    continue  # gone, or swapped for a symlink since it was listed
                if scope is not None and Ignorer.is_virtualenv(fd):
                    os.close(fd)
                    _skipped(ignorer, child)
                    continue
                parts = child
                break
            else:
                return
    finally:
        for _, open_fd, _, _ in stack:
            os.close(open_fd)


def _skipped(ignorer: Ignorer | None, parts: tuple[str, ...]) -> None:
    if ignorer is not None:
        ignorer.skip(_display(parts))


def _note(ignorer: Ignorer | None) -> str:
    return ignorer.note() if ignorer is not None else ""


def _bounded(output: str, ignorer: Ignorer | None) -> str:
    """``output``, then a line naming ignore files a bound kept from applying, if any."""
    note = ignorer.limits_note() if ignorer is not None else ""
    return f"{output}\n{note}" if note else output


def _search_base(ctx: ToolContext, path: str) -> Opened:
    try:
        return open_in_workspace(ctx, path, _READ)
    except FileNotFoundError:
        raise ToolError(f"path not found: '{path}' (workspace root {ctx.workspace})") from None


@forked
@tool(read_only=True)
def list_files(
    ctx: ToolContext, pattern: str = "**/*", path: str = ".", include_ignored: bool = False
) -> str:
    """List files in the workspace whose path matches a glob pattern.

    Returns one path per line, relative to the workspace root, sorted. Only files are
    listed (not directories). `*` matches within one directory, `**` spans directories,
    `{a,b}` gives alternatives: `**/*.py` finds Python files at any depth, `*.md` only at
    the top of `path`, `src/**/*.{ts,tsx}` TypeScript under src. `.git` is skipped, and
    so is what `.gitignore` ignores, virtualenvs, `node_modules` and caches, unless
    `include_ignored` is true or `path` names such a directory.

    Args:
        ctx: Supplied by the worker (the workspace root); not a model argument.
        pattern: Glob pattern matched against paths relative to `path`.
        path: Directory to list, relative to the workspace root.
        include_ignored: Also list files that `.gitignore` ignores, virtualenvs,
            `node_modules` and caches.
    """
    regex = _glob(pattern)
    ignorer = _ignorer(ctx, include_ignored)
    with _os_errors("list", path):
        base = _search_base(ctx, path)
        try:
            matches = []
            for found in _walk(ctx, base, ignorer):
                if not regex.match(found.relative):
                    continue
                if found.is_link:
                    reader = _open_found(ctx, found, base)  # listed if it leads to a file inside
                    if reader is None:
                        continue
                    reader.close()
                elif not found.is_regular():
                    continue
                matches.append(_display(found.parts))
        finally:
            os.close(base.fd)
    matches.sort()
    if not matches:
        return _bounded(f"no files match '{pattern}' under '{path}'{_note(ignorer)}", ignorer)
    if len(matches) > MAX_LIST_ENTRIES:
        hidden = len(matches) - MAX_LIST_ENTRIES
        matches = matches[:MAX_LIST_ENTRIES]
        matches.append(f"[... {hidden} more files not shown; use a narrower pattern or path ...]")
    return _bounded("\n".join(matches), ignorer)


@forked
@tool(read_only=True)
def grep(
    ctx: ToolContext,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    ignore_case: bool = False,
    include_ignored: bool = False,
) -> str:
    """Search text files in the workspace for lines matching a regular expression.

    Returns matches as `file:line: text` (file relative to the workspace root, lines
    numbered from 1), in file order. Binary files and `.git` are skipped, and so is
    what `.gitignore` ignores, virtualenvs, `node_modules` and caches, unless
    `include_ignored` is true or `path` names such a directory or file. Results stop
    after 500 matches with a note.

    Args:
        ctx: Supplied by the worker (the workspace root); not a model argument.
        pattern: Python regular expression, searched in each line (`re.search`).
        path: File or directory to search, relative to the workspace root.
        glob: Only search files matching this glob: without a `/` it matches the file
            name at any depth (`*.py`), with one the path relative to `path`
            (`src/**/*.ts`).
        ignore_case: Match without regard to letter case.
        include_ignored: Also search files that `.gitignore` ignores, virtualenvs,
            `node_modules` and caches.
    """
    regex = _linear_regex(pattern, ignore_case=ignore_case)
    name_filter = _glob(glob) if glob else None
    ignorer = _ignorer(ctx, include_ignored)
    results: list[str] = []
    capped = False
    with _os_errors("search", path):
        base = _search_base(ctx, path)
        try:
            for found in _walk(ctx, base, ignorer):
                if name_filter is not None and not name_filter.match(
                    found.relative if "/" in (glob or "") else found.parts[-1]
                ):
                    continue
                capped = _grep_file(ctx, found, base, regex, results)
                if capped:
                    break
        finally:
            os.close(base.fd)
    if not results:
        return _bounded(f"no matches for {pattern!r} under '{path}'{_note(ignorer)}", ignorer)
    if capped:
        results.append(
            f"[... stopped after {MAX_GREP_MATCHES} matches; narrow the pattern, path or glob ...]"
        )
    return _bounded("\n".join(results), ignorer)


def _grep_file(
    ctx: ToolContext, found: _Found, base: Opened, regex: Any, results: list[str]
) -> bool:
    """Add one file's matching lines to ``results``; True once the cap is reached."""
    reader = _open_found(ctx, found, base)
    if reader is None:
        return False
    with reader:
        try:
            if os.fstat(reader.fileno()).st_size > MAX_GREP_FILE_BYTES or _is_binary(reader):
                return False
            shown = _display(found.parts)
            text_reader = io.TextIOWrapper(reader, encoding="utf-8", errors="replace")
            for number, line in enumerate(_bounded_lines(text_reader, ctx), start=1):
                if not regex.search(line):
                    continue
                if len(results) == MAX_GREP_MATCHES:
                    return True
                text = line.rstrip("\r\n")
                if len(text) > MAX_GREP_LINE_CHARS:
                    text = text[:MAX_GREP_LINE_CHARS] + " [...]"
                results.append(f"{shown}:{number}: {text}")
            text_reader.detach()
        except OSError:
            pass
    return False


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
    with _os_errors("write", path):
        opened = _open_for_write(ctx, path)
        try:
            _write_fd(opened.fd, data)
        finally:
            os.close(opened.fd)
    return f"wrote {len(data)} bytes to {_display(opened.parts)}"


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
    with _os_errors("edit", path):
        # One descriptor for the read and the write: the file edited is the file read.
        try:
            opened = open_in_workspace(ctx, path, os.O_RDWR | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ToolError(f"file not found: '{path}' (workspace root {ctx.workspace})") from None
        with _regular_reader(opened.fd, path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_EDIT_BYTES:
                raise ToolError(
                    f"edit_file: '{path}' is {size} bytes, over the {MAX_EDIT_BYTES}-byte "
                    "limit for edits; change it with a command instead"
                )
            if _is_binary(f):
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
    return f"replaced {count} occurrence{plural} in {_display(opened.parts)}"
