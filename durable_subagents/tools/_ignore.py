"""What ``grep`` and ``list_files`` skip: ignore files and well-known caches.

A search skips what git would not track: entries matched by ``.gitignore`` files (at
every level from the workspace root down, each applying to its own subtree, ``!``
negations included), ``.ignore`` and ``.rgignore`` files as ripgrep reads them, and the
workspace's ``.git/info/exclude``; plus virtualenvs, ``node_modules`` and tool caches by
name, ignore files or not. Ignored directories are pruned, never walked. The rules
decide discovery only: a path the model names itself is searched in full.

Ignore files are workspace content the model can write, so reading them is confined
and bounded: each is opened from its directory's descriptor with ``O_NOFOLLOW`` (a
symlink named ``.gitignore`` is not read, as git does not read one; ``.git`` must be a
real directory), only regular files count, and only the first ``MAX_IGNORE_FILE_BYTES``
of a file, ``MAX_IGNORE_PATTERNS`` and ``MAX_IGNORE_CHARS`` of a directory and
``MAX_SCOPE_CHARS`` in force at once are used. Patterns match on RE2 (pathspec's
``re2`` backend: linear time, where Python's ``re`` backtracks on ``*a*a*a*b``), in
small sets (see ``_CHUNK_CHARS``). One search compiles at most
``MAX_SEARCH_IGNORE_CHARS`` of patterns, for at most ``MAX_SEARCH_COMPILE_SECONDS`` of
CPU time; ignore files past a bound are not read (or only in part), and the search's
output says which. Rules only ever remove results: ``.git``, the worker's own data and
symlinks leading out stay skipped whatever a file says, since the walk checks those
apart from the rules; a file that cannot be read or compiled just means fewer rules.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from pathspec import GitIgnoreSpec
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

__all__ = [
    "IGNORE_FILES",
    "MAX_IGNORE_FILE_BYTES",
    "MAX_IGNORE_PATTERNS",
    "MAX_SEARCH_COMPILE_SECONDS",
    "MAX_SEARCH_IGNORE_CHARS",
    "SKIPPED_DIRS",
    "Ignorer",
    "Scope",
]

IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")
"""Read in this order in each directory; a later file's patterns win (ripgrep's order)."""
SKIPPED_DIRS = frozenset(
    {
        ".venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".tox",
        ".nox",
        ".cache",
    }
)
"""Directories skipped by name wherever they are (so are ``*.egg-info`` and virtualenvs)."""
_SKIPPED_SUFFIXES = (".egg-info",)
_VENV_MARKER = "pyvenv.cfg"
"""A directory holding this file is a virtualenv, whatever its name (``venv``, ``env``)."""
MAX_IGNORE_FILE_BYTES = 1 << 20
"""Bytes read of one ignore file; the rest (and a line cut there) is not used."""
MAX_IGNORE_PATTERNS = 2_000
"""Patterns used of one directory's ignore files; later ones are not."""
MAX_IGNORE_CHARS = 32 << 10
"""Characters of patterns used of one directory's ignore files. Compiling the worst
patterns (``????????????????``) costs ~0.5 s and ~10 MB per 32 KiB, mostly pathspec's
own ``re.compile`` of each; a real ``.gitignore`` is a few KiB (~10 ms, then cached)."""
MAX_SCOPE_CHARS = 64 << 10
"""Characters of patterns in force at once (the directories from the root down to one
being searched); a deeper ignore file beyond it is not read."""
MAX_SEARCH_IGNORE_CHARS = 256 << 10
"""Characters of patterns one search compiles (patterns compiled earlier in the same
process are free). A repository's ignore files are a few KiB in all."""
MAX_SEARCH_COMPILE_SECONDS = 1.0
"""CPU seconds one search spends compiling patterns; hundreds of heavy ignore files
would otherwise cost minutes (measured: 300 files of 32 KiB of wildcards, 150 s)."""
_CACHE_CHARS = 64 << 10
"""Characters of compiled patterns kept for later calls, least recently used dropped."""
_MAX_PATTERN_CHARS = 1_024
"""A longer line is not a pattern anyone wrote; it is dropped."""
_CHUNK_PATTERNS = 256
_CHUNK_CHARS = 2_048
"""Patterns are matched in RE2 sets of at most this size: building one holds the GIL
(under ~25 ms at this size; 256 patterns of 250 wildcards took 380 ms), and a set too
large to build (RE2's memory budget, from ~2,000 plain patterns) loses only its own."""
_MAX_EXAMPLES = 3

_FILE_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _safe(text: str) -> str:
    """``text`` as RE2 can take it: undecodable bytes of a name become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


@dataclass(frozen=True)
class _Rules:
    """The patterns of one directory's ignore files, matched relative to it.

    Attributes:
        parts: Where the directory is in the workspace.
        specs: The patterns in file order, in sets of up to 256; a later set's match wins.
        chars: The characters of the patterns (what they cost to hold).
        cut: Whether some of the directory's patterns were left out (over a bound).
    """

    parts: tuple[str, ...]
    specs: tuple[GitIgnoreSpec, ...]
    chars: int
    cut: bool = False

    def verdict(self, parts: tuple[str, ...], is_dir: bool) -> bool | None:
        """True: ignored; False: re-included by a ``!`` pattern; None: no pattern matched."""
        relative = "/".join(parts[len(self.parts) :])
        if not relative.isascii():
            relative = _safe(relative)
        if is_dir:
            relative += "/"  # how pathspec tells a directory, for patterns like ``build/``
        for spec in reversed(self.specs):
            try:
                verdict = spec.check_file(relative).include
            except Exception:  # an RE2 failure (out of memory) must not fail the search
                continue
            if verdict is not None:
                return verdict
        return None


@dataclass(frozen=True)
class Scope:
    """The rules that apply in one directory: its own and those of the directories above.

    The deepest directory's rules are asked first; the first that matches decides, as
    git lets a nested ``.gitignore`` override its parents'.
    """

    rules: tuple[_Rules, ...] = ()

    @property
    def chars(self) -> int:
        """The characters of the patterns in force (see ``MAX_SCOPE_CHARS``)."""
        return sum(r.chars for r in self.rules)

    def ignores(self, parts: tuple[str, ...], is_dir: bool) -> bool:
        """Whether the entry at workspace path ``parts`` is ignored by these rules."""
        if is_dir and _skipped_by_name(parts[-1]):
            return True
        for rules in reversed(self.rules):
            verdict = rules.verdict(parts, is_dir)
            if verdict is not None:
                return verdict
        return False


def _skipped_by_name(name: str) -> bool:
    return name in SKIPPED_DIRS or name.endswith(_SKIPPED_SUFFIXES)


@dataclass
class Ignorer:
    """Reads ignore files during one search and counts what the search skipped.

    Attributes:
        hidden: Whether a workspace path is the worker's own data (never read).
        skipped: How many entries were skipped by the rules (a pruned directory is one).
        examples: The first few of them, as workspace paths.
    """

    hidden: Callable[[tuple[str, ...]], bool]
    skipped: int = 0
    examples: list[str] = field(default_factory=list)
    compiled_chars: int = 0
    """Characters of patterns this search compiled (see ``MAX_SEARCH_IGNORE_CHARS``)."""
    compile_seconds: float = 0.0
    """CPU time this search spent compiling them (see ``MAX_SEARCH_COMPILE_SECONDS``)."""
    unapplied: list[str] = field(default_factory=list)
    """Ignore files not read, or read in part, because of a bound."""

    def base_scope(self, root_fd: int, base: tuple[str, ...]) -> Scope | None:
        """The rules of the directories above the search's base, from the workspace root.

        The base's own ignore files are read when the walk enters it (``enter``).

        Args:
            root_fd: A descriptor of the workspace root (not closed here).
            base: Where the search starts, symlinks resolved (a directory).

        Returns:
            The scope, or None when the base itself is ignored or lies in an ignored
            directory: the model named it, so it is searched in full.
        """
        scope = Scope(self._git_exclude(root_fd))
        fd = os.dup(root_fd)
        try:
            for depth in range(1, len(base) + 1):
                scope = self.enter(scope, fd, base[: depth - 1], IGNORE_FILES)
                here = base[:depth]
                if scope.ignores(here, is_dir=True):
                    return None
                child = os.open(here[-1], _DIR_OPEN, dir_fd=fd)
                os.close(fd)
                fd = child
                if self.is_virtualenv(fd):
                    return None
            return scope
        except OSError:
            return None  # moved meanwhile: search without rules rather than guess
        finally:
            os.close(fd)

    def enter(
        self, scope: Scope, fd: int, parts: tuple[str, ...], present: Collection[str]
    ) -> Scope:
        """The scope inside directory ``fd`` (at ``parts``): ``scope`` plus its own files.

        Args:
            scope: The scope of the directory above.
            fd: The directory, open.
            parts: Where it is in the workspace.
            present: Names in the directory (only ignore files among them are read).
        """
        names = [n for n in IGNORE_FILES if n in present and not self.hidden((*parts, n))]
        if not names:
            return scope
        budget = min(MAX_IGNORE_CHARS, MAX_SCOPE_CHARS - scope.chars)
        if budget <= 0 or self.spent:
            self._unapplied(parts, names)
            return scope
        lines: list[str] = []
        cut = False
        for name in names:
            read, cut_here = _read_lines(fd, name)
            lines.extend(read)
            cut = cut or cut_here
        rules = self._compile(parts, lines, budget)
        if cut or (rules is not None and rules.cut):
            self._unapplied(parts, names)
        return Scope((*scope.rules, rules)) if rules else scope

    @property
    def spent(self) -> bool:
        """Whether this search has used its budget for compiling patterns."""
        return (
            self.compiled_chars >= MAX_SEARCH_IGNORE_CHARS
            or self.compile_seconds >= MAX_SEARCH_COMPILE_SECONDS
        )

    def _compile(self, parts: tuple[str, ...], lines: list[str], budget: int) -> _Rules | None:
        started = time.thread_time()
        rules, compiled = _compile(parts, lines, budget)
        if compiled:
            self.compiled_chars += rules.chars if rules is not None else 0
            self.compile_seconds += time.thread_time() - started
        return rules

    def _unapplied(self, parts: tuple[str, ...], names: list[str]) -> None:
        self.unapplied.extend(_safe("/".join((*parts, n))) for n in names)

    def limits_note(self) -> str:
        """A line saying which ignore files a bound kept from applying; "" if none."""
        if not self.unapplied:
            return ""
        shown = ", ".join(self.unapplied[:_MAX_EXAMPLES])
        more = len(self.unapplied) - _MAX_EXAMPLES
        if more > 0:
            shown += f" and {more} more"
        return (
            f"[... ignore files not fully applied (over the bounds on their size, "
            f"patterns or compile time): {shown}; results may include what they ignore ...]"
        )

    @staticmethod
    def is_virtualenv(fd: int) -> bool:
        """Whether directory ``fd`` is a virtualenv (holds a regular ``pyvenv.cfg``)."""
        try:
            mode = os.stat(_VENV_MARKER, dir_fd=fd, follow_symlinks=False).st_mode
        except OSError:
            return False
        return stat.S_ISREG(mode)

    def skip(self, shown: str) -> None:
        """Count an entry the rules skipped."""
        self.skipped += 1
        if len(self.examples) < _MAX_EXAMPLES:
            self.examples.append(shown)

    def note(self) -> str:
        """What was skipped and how to include it, for a search that found nothing."""
        if not self.skipped:
            return ""
        kind = "path" if self.skipped == 1 else "paths"
        more = ", ..." if self.skipped > len(self.examples) else ""
        return (
            f" ({self.skipped} ignored {kind} skipped: {', '.join(self.examples)}{more}; "
            "set include_ignored=true, or give one as path, to search them)"
        )

    def _git_exclude(self, root_fd: int) -> tuple[_Rules, ...]:
        """The rules of ``.git/info/exclude`` at the workspace root (weaker than any file)."""
        if self.hidden((".git", "info", "exclude")):
            return ()
        fds: list[int] = []
        try:
            fds.append(os.open(".git", _DIR_OPEN, dir_fd=root_fd))
            fds.append(os.open("info", _DIR_OPEN, dir_fd=fds[-1]))
            lines, cut = _read_lines(fds[-1], "exclude")
            rules = self._compile((), lines, MAX_IGNORE_CHARS)
            if cut or (rules is not None and rules.cut):
                self._unapplied((".git", "info"), ["exclude"])
        except OSError:
            return ()  # no repository here, or .git is a file (a worktree): not followed
        finally:
            for fd in fds:
                os.close(fd)
        return (rules,) if rules else ()


def _read_lines(dir_fd: int, name: str) -> tuple[list[str], bool]:
    """The lines of ignore file ``name`` in ``dir_fd``: a regular file, never a symlink.

    Returns:
        The lines, and whether the file was longer than what was read.
    """
    try:
        fd = os.open(name, _FILE_READ, dir_fd=dir_fd)
    except OSError:
        return [], False  # missing, a symlink (ELOOP), unreadable: as if there were none
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [], False
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while size < MAX_IGNORE_FILE_BYTES:
            chunk = os.read(fd, MAX_IGNORE_FILE_BYTES - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        cut = size >= MAX_IGNORE_FILE_BYTES and os.read(fd, 1) != b""
    except OSError:
        return [], False
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if cut:
        data = data[: data.rfind(b"\n") + 1]  # a line cut in two is not used
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    return [line.removesuffix("\r") for line in text.split("\n")], cut


def _compile(
    parts: tuple[str, ...], lines: Iterable[str], budget: int
) -> tuple[_Rules | None, bool]:
    """The rules of one directory from at most ``budget`` characters of patterns.

    Returns:
        The rules (None: no pattern), and whether they were compiled now rather than
        found in the cache.
    """
    used: list[str] = []
    chars = 0
    cut = False
    for line in lines:
        if line.startswith("#") or not line.strip():
            continue
        if len(line) > _MAX_PATTERN_CHARS:
            cut = True
            continue
        if chars + len(line) > budget or len(used) == MAX_IGNORE_PATTERNS:
            cut = True
            break
        used.append(line)
        chars += len(line)
    if not used:
        return None, False
    key = tuple(used)
    specs = _CACHE.get(key)
    compiled = specs is None
    if specs is None:
        specs = _specs(used)
        _CACHE.put(key, specs, chars)
    return (_Rules(parts, specs, chars, cut) if specs else None), compiled


def _specs(lines: list[str]) -> tuple[GitIgnoreSpec, ...]:
    """``lines`` compiled in RE2 sets of at most ``_CHUNK_PATTERNS`` / ``_CHUNK_CHARS``."""
    chunks: list[list[GitIgnoreSpecPattern]] = [[]]
    chunk_chars = 0
    for line in lines:
        try:
            pattern = GitIgnoreSpecPattern(line)
        except Exception:  # ValueError, re.error: git skips a malformed line too
            continue
        if pattern.include is None:
            continue
        if len(chunks[-1]) == _CHUNK_PATTERNS or chunk_chars + len(line) > _CHUNK_CHARS:
            chunks.append([])
            chunk_chars = 0
        chunks[-1].append(pattern)
        chunk_chars += len(line)
    specs = []
    for chunk in chunks:
        if not chunk:
            continue
        try:
            specs.append(GitIgnoreSpec(chunk, backend="re2"))
        except Exception:  # RE2 could not build the set: these patterns are not used
            continue
    return tuple(specs)


class _SpecCache:
    """Compiled patterns by their text, shared by calls (a repository's files recur)."""

    def __init__(self, max_chars: int) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, ...], tuple[tuple[GitIgnoreSpec, ...], int]]
        self._entries = OrderedDict()
        self._chars = 0
        self._max = max_chars

    def get(self, key: tuple[str, ...]) -> tuple[GitIgnoreSpec, ...] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: tuple[str, ...], specs: tuple[GitIgnoreSpec, ...], chars: int) -> None:
        with self._lock:
            if key in self._entries or chars > self._max:
                return
            self._entries[key] = (specs, chars)
            self._chars += chars
            while self._chars > self._max:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._chars -= dropped


_CACHE = _SpecCache(_CACHE_CHARS)
