"""The workspace's side of landing: its entries as they are, and writing in place.

Every step goes through descriptors, one per directory on the way, each opened without
following a symlink (see ``_land``): an entry's state (``Before``), a directory tree
taken out of the way (``_Tree``), and a file, directory or symlink put in place in one
step under a temporary name (``_Place``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Before", "before_of"]

_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_CHUNK = 1 << 24


@dataclass(frozen=True)
class Before:
    """A workspace entry's state when a held change was shown: it lands only on this.

    Attributes:
        kind: ``file``, ``dir``, ``symlink`` or ``other``.
        inode: Its inode number.
        ctime_ns: When its status last changed.
        size: Its size in bytes.
    """

    kind: str
    inode: int
    ctime_ns: int
    size: int


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _kind_of(info: os.stat_result) -> str:
    if stat.S_ISREG(info.st_mode):
        return "file"
    if stat.S_ISDIR(info.st_mode):
        return "dir"
    if stat.S_ISLNK(info.st_mode):
        return "symlink"
    return "other"


def before_of(info: os.stat_result | None) -> Before | None:
    """A workspace entry's state as ``Before`` (None for a missing one)."""
    if info is None:
        return None
    return Before(_kind_of(info), info.st_ino, info.st_ctime_ns, info.st_size)


_RENAME_NOREPLACE = 1
_renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def place_at(src_dir: int, src: str, dst_dir: int, dst: str, *, replace: bool) -> None:
    """Rename ``src`` to ``dst`` in one step; without ``replace``, never over an entry.

    A call's new file lands where nothing was when the call began: if another call's
    landed there meanwhile, ``FileExistsError`` (a conflict), not a silent overwrite.

    Raises:
        FileExistsError: ``replace`` is False and ``dst`` exists.
    """
    if replace:
        os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
        return
    if _renameat2 is not None:
        done = _renameat2(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst), _RENAME_NOREPLACE)
        if done == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err), dst)
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), dst)
    # A filesystem without the flag: a link fails where an entry is, then the old name goes.
    os.link(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir, follow_symlinks=False)
    os.unlink(src, dir_fd=src_dir)


def _temp_name(name: str) -> str:
    tag = uuid.uuid4().hex[:10]
    stem = f".{name}.~{tag}"
    return stem if len(stem.encode("utf-8", "surrogateescape")) <= 255 else f".~{tag}"


class _Tree:
    """Removes workspace entries through descriptors, keeping some.

    Kept: a file or symlink whose status changed since ``since_ns`` (listed in
    ``changed_kept``), and what ``keep`` claims (a protected entry: held or refused in
    its own right). A directory that keeps anything stays.
    """

    def __init__(
        self,
        since_ns: int,
        stop: Callable[[], None],
        keep: Callable[[tuple[str, ...], os.stat_result], bool] | None = None,
    ) -> None:
        self.since_ns = since_ns
        self.stop = stop
        self.keep = keep
        self.changed_kept: list[str] = []

    def changed(self, info: os.stat_result) -> bool:
        return info.st_ctime_ns > self.since_ns

    def remove(self, dir_fd: int, name: str, info: os.stat_result, parts: tuple[str, ...]) -> bool:
        """Remove ``name`` at ``parts`` (a whole tree for a directory); False if any was kept."""
        self.stop()
        if self.keep is not None and self.keep(parts, info):
            return False
        if not stat.S_ISDIR(info.st_mode):
            if self.changed(info):
                self.changed_kept.append("/".join(parts))
                return False
            os.unlink(name, dir_fd=dir_fd)
            return True
        fd = os.open(name, _READ_DIR, dir_fd=dir_fd)
        kept = False
        try:
            with os.scandir(fd) as listing:
                names = [e.name for e in listing]
            for child in names:
                child_info = _lstat(fd, child)
                if child_info is not None and not self.remove(
                    fd, child, child_info, (*parts, child)
                ):
                    kept = True
        finally:
            os.close(fd)
        if kept:
            return False
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except OSError as err:
            if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False  # something was made in it meanwhile
            raise
        return True


@dataclass
class _Place:
    """How entries are placed: their owner, and the check of a stop."""

    owner: tuple[int, int] | None
    stop: Callable[[], None]

    _devices: dict[int, int] = field(default_factory=dict)

    def movable(self, fd: int, upper_dir: int, parent: int, mode: int) -> bool:
        """Ready an upper file to be moved into ``parent``; False: copy it instead.

        Only on the same filesystem, and once it carries nothing that must not land:
        its extended attributes go (overlayfs's own, anything the command set) and
        its mode loses the set-ID bits.
        """
        if self._device(upper_dir) != self._device(parent):
            return False
        try:
            for name in os.listxattr(fd):
                os.removexattr(fd, name)
            os.fchmod(fd, mode)
        except OSError:
            return False
        return True

    def _device(self, fd: int) -> int:
        device = self._devices.get(fd)
        if device is None:
            device = self._devices[fd] = os.fstat(fd).st_dev
        return device

    def chown(self, dir_fd: int, name: str, uid: int, gid: int) -> None:
        if self.owner is not None:
            os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)

    def file_from(
        self,
        dir_fd: int,
        name: str,
        source_fd: int,
        mode: int,
        uid: int,
        gid: int,
        *,
        replace: bool = True,
    ) -> None:
        """Copy ``source_fd`` to ``name`` in one step (a temporary file renamed over it).

        Without ``replace``, ``FileExistsError`` where an entry is (see ``place_at``).
        """
        temp = _temp_name(name)
        fd = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
        )
        try:
            try:
                while True:
                    self.stop()
                    if not os.copy_file_range(source_fd, fd, _COPY_CHUNK):
                        break
            except OSError as err:
                if err.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                os.lseek(source_fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                while chunk := os.read(source_fd, _COPY_CHUNK):
                    self.stop()
                    os.write(fd, chunk)
            source = os.fstat(source_fd)
            os.utime(fd, ns=(source.st_atime_ns, source.st_mtime_ns))
            if self.owner is not None:
                os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise
        os.close(fd)
        self._into_place(dir_fd, temp, name, replace)

    def _into_place(self, dir_fd: int, temp: str, name: str, replace: bool) -> None:
        try:
            place_at(dir_fd, temp, dir_fd, name, replace=replace)
        except FileExistsError:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise

    def file_bytes(
        self, dir_fd: int, name: str, content: bytes, mode: int, uid: int, gid: int
    ) -> None:
        """Write ``content`` to ``name`` in one step."""
        temp = _temp_name(name)
        fd = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
        )
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            if self.owner is not None:
                os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise
        os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def symlink(
        self, dir_fd: int, name: str, target: str, uid: int, gid: int, *, replace: bool = True
    ) -> None:
        temp = _temp_name(name)
        os.symlink(target, temp, dir_fd=dir_fd)
        try:
            self.chown(dir_fd, temp, uid, gid)
            place_at(dir_fd, temp, dir_fd, name, replace=replace)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise

    def directory(self, dir_fd: int, name: str, mode: int, uid: int, gid: int) -> int:
        """Make directory ``name``; a descriptor of it."""
        os.mkdir(name, mode, dir_fd=dir_fd)
        fd = os.open(name, _DIR, dir_fd=dir_fd)
        try:
            if self.owner is not None:
                os.chown(f"/proc/self/fd/{fd}", uid, gid)
            os.chmod(f"/proc/self/fd/{fd}", mode)  # whatever the umask took
        except BaseException:
            os.close(fd)
            raise
        return fd
