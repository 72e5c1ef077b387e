"""``list_files`` and ``grep``: the workspace walked by descriptors, bounded.

The walk never enters a symlinked directory and skips symlinked files that point out;
by default it also skips what ``.gitignore`` ignores, virtualenvs, ``node_modules`` and
caches (see ``_ignore``). Patterns are matched in linear time (RE2), and every output
is bounded (entries, matches, line length, file size).
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import re2

from durable_subagents.tools._confined_open import (
    Opened,
)
from durable_subagents.tools._decorator import ToolContext, ToolError, tool
from durable_subagents.tools._ignore import Ignorer, Scope
from durable_subagents.tools._processes import forked
from durable_subagents.tools._workspace_paths import (
    READ_FLAGS,
    bounded_lines,
    display_path,
    is_binary,
    is_hidden,
    open_in_workspace,
    open_root,
    os_errors,
    regular_reader,
)

__all__ = ["grep", "list_files"]


MAX_LIST_ENTRIES = 1_000
MAX_GREP_MATCHES = 500
MAX_GREP_LINE_CHARS = 300
MAX_GREP_FILE_BYTES = 10_000_000
_SKIP_DIRS = {".git"}


DIR_READ_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_WALK_DEPTH = 128
"""Deeper directories are not searched (each level holds a descriptor)."""


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
        elif is_hidden(ctx, found.parts):
            return None
        elif found.is_link:
            fd = open_in_workspace(ctx, "/".join(found.parts), READ_FLAGS).fd
        else:
            assert found.entry is not None
            fd = os.open(found.entry.name, READ_FLAGS | os.O_NOFOLLOW, dir_fd=found.dirfd)
        return regular_reader(fd, found.entry.name if found.entry else found.relative)
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
    return None if include_ignored else Ignorer(hidden=lambda parts: is_hidden(ctx, parts))


def _base_scope(ctx: ToolContext, base: Opened, ignorer: Ignorer | None) -> Scope | None:
    if ignorer is None:
        return None
    try:
        root_fd = open_root(ctx)
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
                if name in _SKIP_DIRS or len(stack) >= MAX_WALK_DEPTH or is_hidden(ctx, child):
                    continue
                if scope is not None and scope.ignores(child, is_dir=True):
                    _skipped(ignorer, child)
                    continue
                try:
                    fd = os.open(name, DIR_READ_FLAGS, dir_fd=parent_fd)
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
        ignorer.skip(display_path(parts))


def _note(ignorer: Ignorer | None) -> str:
    return ignorer.note() if ignorer is not None else ""


def _bounded(output: str, ignorer: Ignorer | None) -> str:
    """``output``, then a line naming ignore files a bound kept from applying, if any."""
    note = ignorer.limits_note() if ignorer is not None else ""
    return f"{output}\n{note}" if note else output


def _search_base(ctx: ToolContext, path: str) -> Opened:
    try:
        return open_in_workspace(ctx, path, READ_FLAGS)
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
    with os_errors("list", path):
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
                matches.append(display_path(found.parts))
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
    with os_errors("search", path):
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
            if os.fstat(reader.fileno()).st_size > MAX_GREP_FILE_BYTES or is_binary(reader):
                return False
            shown = display_path(found.parts)
            text_reader = io.TextIOWrapper(reader, encoding="utf-8", errors="replace")
            for number, line in enumerate(bounded_lines(text_reader, ctx), start=1):
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
