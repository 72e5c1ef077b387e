"""A command's private overlay: where its writes go, and what they were.

A sandboxed command sees its task's workspace through overlayfs: the workspace is the
lower layer (read-only to the overlay), and every write lands in an upper directory of
the call's own, in the worker's data directory. Nothing the command does touches the
workspace while it runs. When it has ended, ``changes`` reads the upper layer (new and
changed files, deletions as whiteouts, directories that replace what was there) and
``_land`` decides and applies what reaches the workspace.

The call's directory (``<root>/<pid namespace>-<worker pid>-<id>/{up,work,mnt}``) is
made by the worker and held by descriptor; the tool user owns ``up`` and ``work``
(overlayfs writes there as that user) but not the call's directory, so a command cannot
rename them; the overlay is mounted on ``mnt``, in the command's own mount namespace
only. A worker that dies mid-call leaves the directory behind: the next worker on the
host removes it at start, unread (``sweep``), so nothing a dead call wrote lands.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "OPAQUE_XATTRS",
    "CallOverlay",
    "Entry",
    "OverlayUnavailable",
    "changes",
    "overlay_root",
    "remove_tree",
    "sweep",
    "sweep_at_start",
]

log = logging.getLogger(__name__)

OPAQUE_XATTRS = ("user.overlay.opaque", "trusted.overlay.opaque")
"""Where overlayfs marks a directory that replaces the lower one (``userxattr`` mounts,
as bubblewrap makes them, use the first)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SWEEP_EVERY = 600.0
"""Seconds between sweeps of dead workers' call directories, besides the one at start."""


class OverlayUnavailable(RuntimeError):
    """The call's overlay directory cannot be made; the message says what to do."""


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def overlay_root(root: Path) -> int:
    """Open (making it if missing) the directory that holds calls' overlays.

    It must be a real directory of this worker's user (not a symlink, nobody else's),
    mode 0711: a root worker's tool user passes through it to its own ``up`` and
    ``work`` but cannot list it.

    Returns:
        An ``O_PATH`` descriptor of it (the caller closes it).

    Raises:
        OverlayUnavailable: It cannot be made, or is not what it must be.
    """
    try:
        root.mkdir(mode=0o711, parents=True, exist_ok=True)
        fd = os.open(root, _PATH_FLAGS)
    except OSError as err:
        raise OverlayUnavailable(
            f"cannot make the commands' overlay directory {root}: {err.strerror or err}; "
            "set SUBAGENTS_OVERLAY_DIR to a directory on a local filesystem this worker "
            "may write"
        ) from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        os.close(fd)
        raise OverlayUnavailable(
            f"the commands' overlay directory {root} belongs to uid {info.st_uid}, not to "
            f"this worker (uid {os.geteuid()}); remove it or set SUBAGENTS_OVERLAY_DIR"
        )
    if stat.S_IMODE(info.st_mode) != 0o711:
        os.chmod(f"/proc/self/fd/{fd}", 0o711)
    return fd


class CallOverlay:
    """One call's overlay directory: made before the command starts, removed after.

    Attributes:
        root: Where the calls' overlays live.
        name: This call's directory in it.
        fd: An ``O_PATH`` descriptor of this call's directory (what the sandbox binds).
        started_ns: The real-time clock when the overlay was made: an entry of the
            workspace whose status changed after it changed during the call. File
            times come from a clock that may lag by a tick (4 ms at 250 Hz), so a
            change in the call's first tick may look older; a change before the call
            never looks newer.
    """

    def __init__(
        self,
        root: Path,
        owner: tuple[int, int] | None = None,
        top: os.stat_result | None = None,
    ) -> None:
        """Make the call's directory, its ``up`` and ``work`` (``owner``'s, if given), ``mnt``.

        ``top``: the workspace's own status. The overlay's top directory takes its
        owner and mode from ``up``, so ``up`` gets the workspace's: a command may make
        at the top only what it may make in the workspace itself.
        """
        self.root = root
        self.started_ns = time.time_ns()
        root_fd = overlay_root(root)
        _sweep_now_and_then(root, root_fd)
        self.name = f"{_pid_namespace()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            os.mkdir(self.name, 0o711, dir_fd=root_fd)
            self.fd = os.open(self.name, _PATH_FLAGS, dir_fd=root_fd)
        except OSError as err:
            os.close(root_fd)
            raise OverlayUnavailable(
                f"cannot make a command's overlay in {root}: {err.strerror or err}"
            ) from None
        self._root_fd = root_fd
        try:
            for part in ("up", "work"):
                os.mkdir(part, 0o755, dir_fd=self.fd)
                if owner is not None:
                    os.chown(part, *owner, dir_fd=self.fd, follow_symlinks=False)
            os.mkdir("mnt", 0o700, dir_fd=self.fd)
            if top is not None:
                if owner is not None and (top.st_uid, top.st_gid) != owner:
                    os.chown("up", top.st_uid, top.st_gid, dir_fd=self.fd, follow_symlinks=False)
                os.chmod("up", stat.S_IMODE(top.st_mode) & 0o1777, dir_fd=self.fd)
        except OSError as err:
            self.discard()
            raise OverlayUnavailable(
                f"cannot make a command's overlay in {root}: {err.strerror or err}"
            ) from None

    @property
    def path(self) -> str:
        """The call's directory by name (the child checks it against ``fd``)."""
        return f"{self.root}/{self.name}"

    def upper(self) -> int:
        """A descriptor of the upper layer, for reading it (the caller closes it)."""
        return os.open("up", _DIR_FLAGS, dir_fd=self.fd)

    def discard(self) -> None:
        """Remove the call's directory and everything in it; safe to call twice."""
        fd, self.fd = getattr(self, "fd", -1), -1
        root_fd, self._root_fd = getattr(self, "_root_fd", -1), -1
        if fd >= 0:
            os.close(fd)
        if root_fd < 0:
            return
        try:
            remove_tree(root_fd, self.name)
        except OSError as err:
            log.warning("could not remove the overlay %s/%s: %s", self.root, self.name, err)
        finally:
            os.close(root_fd)


def remove_tree(dir_fd: int, name: str) -> None:
    """Remove ``name`` in ``dir_fd`` and all below it, never following a symlink.

    Directories overlayfs leaves with mode 0 (``work/work``) are opened up first.
    """
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    if stat.S_IMODE(info.st_mode) & 0o700 != 0o700:
        with contextlib.suppress(OSError):
            os.chmod(name, 0o700, dir_fd=dir_fd, follow_symlinks=False)
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        with os.scandir(fd) as entries:
            names = [e.name for e in entries]
        for child in names:
            remove_tree(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


_sweep_lock = threading.Lock()
_last_sweep: dict[Path, float] = {}


def _sweep_now_and_then(root: Path, root_fd: int) -> None:
    now = time.monotonic()
    with _sweep_lock:
        last = _last_sweep.get(root)
        if last is not None and now - last < _SWEEP_EVERY:
            return
        _last_sweep[root] = now
    sweep(root_fd)


def sweep_at_start(root: Path) -> list[str]:
    """``sweep`` the overlays in ``root`` if it exists (a worker starting on a host)."""
    try:
        fd = os.open(root, _PATH_FLAGS)
    except OSError:
        return []
    try:
        with _sweep_lock:
            _last_sweep[root] = time.monotonic()
        return sweep(fd)
    finally:
        os.close(fd)


def sweep(root_fd: int) -> list[str]:
    """Remove, unread, the call directories of workers of this PID namespace that died.

    Returns:
        The names removed.
    """
    namespace = _pid_namespace()
    removed = []
    listing = os.open(".", _DIR_FLAGS, dir_fd=root_fd)
    try:
        with os.scandir(listing) as entries:
            names = [e.name for e in entries]
    finally:
        os.close(listing)
    for name in names:
        ns, _, rest = name.partition("-")
        pid, _, _ = rest.partition("-")
        if ns != namespace or not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        try:
            remove_tree(root_fd, name)
        except OSError as err:
            log.warning("could not remove a dead worker's overlay %s: %s", name, err)
            continue
        removed.append(name)
    if removed:
        log.info("removed %d overlays of calls whose worker died, unapplied", len(removed))
    return removed


# ---------------------------------------------------------------- the upper layer


@dataclass(frozen=True)
class Entry:
    """One entry of an upper layer: what the command left at a path of the workspace.

    Attributes:
        parts: The path's components, from the workspace's top.
        kind: ``file``, ``dir``, ``symlink``, ``whiteout`` (the path was deleted) or
            ``other`` (a FIFO, socket or device: never applied).
        mode: The entry's mode bits (``stat.S_IMODE``).
        size: A file's size in bytes.
        uid: The entry's owner.
        gid: The entry's group.
        links: A file's hard-link count in the upper layer.
        target: A symlink's target.
        opaque: A directory that replaces whatever was at its path (its old entries
            are gone, not merged).
    """

    parts: tuple[str, ...]
    kind: str
    mode: int
    size: int = 0
    uid: int = 0
    gid: int = 0
    links: int = 1
    target: str | None = None
    opaque: bool = False

    @property
    def path(self) -> str:
        """The entry's path relative to the workspace."""
        return "/".join(self.parts)


def _kind(info: os.stat_result) -> str:
    mode = info.st_mode
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISCHR(mode) and info.st_rdev == 0:
        return "whiteout"
    return "other"


def _opaque(fd: int) -> bool:
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(fd, name) == b"y":
                return True
        except OSError as err:
            if err.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EPERM, errno.EACCES):
                raise
    return False


def changes(upper_fd: int, *, limit: int) -> Iterator[tuple[Entry, int]]:
    """The entries of an upper layer, each directory before what it holds.

    Each comes with a descriptor of the upper directory it is in, valid until the next
    one is asked for (a file is moved or read from there).

    Args:
        upper_fd: A descriptor of the upper directory (``CallOverlay.upper``).
        limit: Stop after this many entries (``RuntimeError``): a command that made
            more is reported, not walked for minutes.

    Raises:
        RuntimeError: More than ``limit`` entries.
    """
    count = 0

    def walk(fd: int, parts: tuple[str, ...]) -> Iterator[tuple[Entry, int]]:
        nonlocal count
        with os.scandir(fd) as listing:
            names = sorted(e.name for e in listing)
        for name in names:
            count += 1
            if count > limit:
                raise RuntimeError(f"more than {limit} entries")
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            kind = _kind(info)
            here = (*parts, name)
            if kind == "dir":
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                try:
                    entry = Entry(
                        here,
                        kind,
                        stat.S_IMODE(info.st_mode),
                        uid=info.st_uid,
                        gid=info.st_gid,
                        opaque=_opaque(child),
                    )
                    yield entry, fd
                    yield from walk(child, here)
                finally:
                    os.close(child)
                continue
            entry = Entry(
                here,
                kind,
                stat.S_IMODE(info.st_mode),
                size=info.st_size,
                uid=info.st_uid,
                gid=info.st_gid,
                links=info.st_nlink,
                target=os.readlink(name, dir_fd=fd) if kind == "symlink" else None,
            )
            yield entry, fd

    yield from walk(upper_fd, ())
