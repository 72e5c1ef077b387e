"""Open paths beneath a root directory, race-free: no symlink, however swapped, leads out.

A path is walked one component at a time from a descriptor of the root: each component
is opened relative to the descriptor of its parent with ``O_NOFOLLOW``, so the kernel
never follows a symlink on our behalf. A symlink met on the way is read
(``readlinkat``) and its target walked the same way: relative targets from the
descriptor the link sits in, absolute ones only when they name a place inside the root.
``..`` pops a held descriptor, never leaving the root. What the walk opens is what was
checked: a directory renamed or replaced by a symlink between two steps cannot redirect
it, because every step starts from a descriptor, not a name.

This is ``openat2(RESOLVE_BENEATH)`` done in user space, with two differences that
agents need: symlinks inside the root are followed, including absolute ones that point
back inside it; and the path the walk ended on is known, so rules and hidden paths are
checked against what was opened. A ``Landing`` check goes further: it is asked before
the walk creates a directory or opens its last entry, with where that lies, so a
refused path leaves nothing behind (not even an empty file or directory).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["MAX_SYMLINKS", "Escape", "Landing", "Opened", "open_beneath", "resolve_beneath"]

MAX_SYMLINKS = 40
"""Symlinks one walk may follow (Linux's own limit); more is a loop."""

_DIR = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC

Landing = Callable[[tuple[str, ...], bool], None]
"""``check(parts, final)``: called with the components of a directory the walk is about
to create (``final`` false) or of the entry it is about to open last (``final`` true,
never a symlink: a link is followed and its target checked). It raises to stop the walk
before anything is touched."""


class Escape(Exception):
    """The path, or a symlink on it, leads outside the root.

    Attributes:
        through_link: Whether a symlink did it (the path itself looked inside).
    """

    def __init__(self, message: str, *, through_link: bool) -> None:
        super().__init__(message)
        self.through_link = through_link


@dataclass
class Opened:
    """A descriptor opened beneath the root, and where it is.

    Attributes:
        fd: The open descriptor (the caller closes it).
        parts: The components from the root to the opened entry, symlinks resolved:
            ``()`` is the root itself.
    """

    fd: int
    parts: tuple[str, ...]

    @property
    def relative(self) -> str:
        """The opened entry relative to the root (``.`` for the root)."""
        return "/".join(self.parts) or "."


def _components(root: Path, path: str) -> list[str]:
    if "\0" in path:
        raise ValueError("path contains a NUL character")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        # Lexically under the root or refused; symlinks in the rest are walked.
        root_parts = root.parts
        if pure.parts[: len(root_parts)] != root_parts:
            raise Escape(f"{path} is outside {root}", through_link=False)
        return list(pure.parts[len(root_parts) :])
    return path.split("/")


class _Walk:
    """The descriptors from the root to the current directory."""

    def __init__(self, root: Path, root_fd: int | None = None) -> None:
        self.root = root
        if root_fd is not None:
            self.fds = [os.dup(root_fd)]
        else:
            self.fds = [os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]
        self.parts: list[str] = []
        self.links = 0

    @property
    def here(self) -> int:
        return self.fds[-1]

    def push(self, fd: int, name: str) -> None:
        self.fds.append(fd)
        self.parts.append(name)

    def up(self, via_link: bool) -> None:
        if len(self.fds) == 1:
            raise Escape(f".. leads above {self.root}", through_link=via_link)
        os.close(self.fds.pop())
        self.parts.pop()

    def to_root(self) -> None:
        while len(self.fds) > 1:
            os.close(self.fds.pop())
        self.parts.clear()

    def link(self, name: str, pending: deque[str]) -> bool:
        """Queue the target of symlink ``name``; False if ``name`` is no longer a link."""
        self.count()
        try:
            target = os.readlink(name, dir_fd=self.here)
        except OSError as err:
            if err.errno == errno.EINVAL:
                return False  # swapped for something else since: look again
            raise
        pure = PurePosixPath(target)
        if pure.is_absolute():
            root_parts = self.root.parts
            if pure.parts[: len(root_parts)] != root_parts:
                where = "/".join([*self.parts, name])
                raise Escape(f"{where} points to {target}, outside {self.root}", through_link=True)
            self.to_root()
            pending.extendleft(reversed(pure.parts[len(root_parts) :]))
        else:
            pending.extendleft(reversed(target.split("/")))
        return True

    def count(self) -> None:
        """Count a symlink followed, or a step taken again after the tree changed."""
        self.links += 1
        if self.links > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, "too many symbolic links, or a tree that keeps changing")

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


@contextmanager
def _walking(root: Path, root_fd: int | None = None) -> Iterator[_Walk]:
    walk = _Walk(root, root_fd)
    try:
        yield walk
    finally:
        walk.close()


def open_beneath(
    root: Path,
    path: str,
    flags: int,
    mode: int = 0o644,
    *,
    make_parents: bool = False,
    check: Landing | None = None,
    root_fd: int | None = None,
) -> Opened:
    """Open ``path`` (relative to ``root``, or absolute inside it) without leaving ``root``.

    Args:
        root: A resolved directory.
        path: The path as given; ``""`` and ``.`` are the root.
        flags: ``os.open`` flags for the last component (``O_NOFOLLOW`` is added: a
            final symlink is walked like any other).
        mode: Permissions of a file ``O_CREAT`` makes.
        make_parents: Create missing directories on the way (for writing).
        check: Asked before each directory the walk creates and before the last open
            (see ``Landing``); what it raises stops the walk.
        root_fd: A descriptor of ``root``, held since it was checked: the walk starts
            from it, never from ``root``'s name (which a swapped symlink could redirect).

    Raises:
        Escape: The path, or a symlink on it, leads outside ``root``.
        OSError: As ``open`` would (``ENOENT``, ``ENOTDIR``, ``ELOOP`` for a loop, ...).
        ValueError: The path contains a NUL character.
    """
    with _walking(root, root_fd) as walk:
        pending = deque(_components(root, path))
        while True:
            name = _next_name(walk, pending)
            if name is None:
                # The root itself (or a path that came back to it).
                if check is not None:
                    check(tuple(walk.parts), True)
                fd = os.open(".", flags & ~(os.O_CREAT | os.O_EXCL), dir_fd=walk.here)
                return Opened(fd, tuple(walk.parts))
            if not pending:
                if check is not None:
                    if _is_link(walk, name) and walk.link(name, pending):
                        continue  # checked where it leads, not as the link
                    check((*walk.parts, name), True)
                try:
                    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=walk.here)
                except OSError as err:
                    # ELOOP: a final symlink (ENOTDIR with O_DIRECTORY, EEXIST with O_EXCL),
                    # or one swapped in since it was checked: its target is checked in turn
                    if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST) and walk.link(
                        name, pending
                    ):
                        continue
                    raise
                return Opened(fd, (*walk.parts, name))
            _step(walk, name, pending, make_parents, check)


def _is_link(walk: _Walk, name: str) -> bool:
    """Whether ``name`` in the walk's directory is a symlink now (False if missing)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=walk.here, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def resolve_beneath(root: Path, path: str, root_fd: int | None = None) -> tuple[str, ...]:
    """Where ``path`` leads beneath ``root``: symlinks followed as far as entries exist.

    The part that does not exist yet is taken as written (``..`` still pops), so a
    file about to be created resolves too. ``root_fd``: as for ``open_beneath``.

    Raises:
        Escape: The path, or a symlink on it, leads outside ``root``.
        OSError: A symlink loop, or a component that is not a directory.
    """
    with _walking(root, root_fd) as walk:
        pending = deque(_components(root, path))
        while (name := _next_name(walk, pending)) is not None:
            try:
                fd = os.open(name, _DIR, dir_fd=walk.here)
            except FileNotFoundError:
                missing = _missing_part(name, pending)
                if missing is None:
                    continue  # a ``..`` came back out of the missing part: walk on for real
                return (*walk.parts, *missing)
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                os.close(fd)
                walk.link(name, pending)
                continue
            if stat.S_ISDIR(mode) or not pending:
                walk.push(fd, name)
                continue
            os.close(fd)
            where = "/".join([*walk.parts, name])
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", where)
        return tuple(walk.parts)


def _missing_part(name: str, pending: deque[str]) -> list[str] | None:
    """The components below a missing ``name``, taken as written; None if a ``..`` leaves.

    ``missing/../x`` is back where the walk is, and ``x`` may exist (a symlink out, say):
    then the rest stays in ``pending`` for the real walk, which follows and checks it.
    """
    missing = [name]
    while pending:
        item = pending.popleft()
        if item == "..":
            missing.pop()
            if not missing:
                return None
        elif item not in ("", "."):
            missing.append(item)
    return missing


def _next_name(walk: _Walk, pending: deque[str]) -> str | None:
    """The next real component; ``.``, empty and ``..`` are dealt with here."""
    via_link = walk.links > 0
    while pending:
        name = pending.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            walk.up(via_link)
            continue
        return name
    return None


def _step(
    walk: _Walk, name: str, pending: deque[str], make_parents: bool, check: Landing | None
) -> None:
    """Go into directory ``name``, following it if it is a symlink."""
    try:
        fd = os.open(name, _DIR, dir_fd=walk.here)
    except FileNotFoundError:
        if not make_parents:
            raise
        if check is not None:
            check((*walk.parts, name), False)
        try:
            os.mkdir(name, 0o755, dir_fd=walk.here)
        except FileExistsError:
            walk.count()  # made meanwhile (or a dangling symlink): look again
        pending.appendleft(name)
        return
    kind = os.fstat(fd).st_mode
    if stat.S_ISLNK(kind):
        os.close(fd)
        if not walk.link(name, pending):
            pending.appendleft(name)
        return
    if not stat.S_ISDIR(kind):
        os.close(fd)
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", "/".join([*walk.parts, name]))
    walk.push(fd, name)
