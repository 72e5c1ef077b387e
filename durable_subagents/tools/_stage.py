"""The command's overlay, mounted in the child between fork and exec.

The sandbox shows the task's workspace through an overlay whose lower layer is the
workspace the worker checked and holds by descriptor. Bubblewrap resolves an overlay's
sources by name, which a symlink swapped onto the workspace's path could redirect, so
the overlay is mounted before bubblewrap starts, in the child that becomes it: the
child takes a user and a mount namespace of its own (as the user the command runs
as), opens the workspace and the call's overlay directory by name there, checks that
each is the directory the worker holds (device and inode, which a directory shares
with no other path), and mounts the overlay through those descriptors
(``/proc/self/fd/N``: the kernel takes the open directory, not a name). Bubblewrap,
started next in that namespace, binds the mounted overlay (``<call>/mnt``, a
directory of the worker's that no command can rename) at the workspace's path.

Anything that fails here is written to the child's standard output, and the child
exits with ``STAGE_FAILED`` before anything of the command ran (the sandbox's
``--info-fd`` never speaks): the spawn starts it again a few times, then reports it.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass

__all__ = ["STAGE_FAILED", "OverlayMount"]

STAGE_FAILED = 125
"""The exit status of a child whose overlay could not be mounted."""

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_PR_SET_DUMPABLE = 4
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_libc = _load_libc()


@dataclass(frozen=True)
class OverlayMount:
    """What the child needs to mount one call's overlay.

    The descriptors are the worker's own (close-on-exec: the child has them until its
    exec). Each is opened again by the name it has now (a workspace renamed while held
    is found where it went), in the child's mount namespace, and kept only if it is
    the same directory.

    Attributes:
        workspace_fd: The worker's descriptor of the workspace (the lower layer).
        call_fd: The worker's descriptor of the call's overlay directory (holding
            ``up``, ``work`` and ``mnt``).
        call_dir: That directory's path.
    """

    workspace_fd: int
    call_fd: int
    call_dir: str

    @property
    def mount_point(self) -> str:
        """Where the overlay is mounted in the child's namespace (bubblewrap binds it)."""
        return f"{self.call_dir}/mnt"

    def enter(self) -> None:
        """In the forked child, as the command's user: namespaces, checks, the mount.

        Never returns on failure: says why on standard output and exits
        ``STAGE_FAILED``.
        """
        problem = self._mount()
        if problem is not None:
            os.write(1, f"{problem}\n".encode(errors="replace"))
            os._exit(STAGE_FAILED)

    def _mount(self) -> str | None:
        libc = _libc
        if libc is None:
            return "the overlay needs Linux"
        try:
            # By their names now, in the worker's mount namespace.
            held = [(os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd)) for fd in self._fds]
        except OSError as err:
            return f"cannot find the workspace the worker holds: {err.strerror or err}"
        uid, gid = os.geteuid(), os.getegid()
        # A change of user made the process undumpable, and its /proc files root's:
        # it could not write its own user namespace's maps.
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
            return f"cannot make the command's namespaces: {os.strerror(ctypes.get_errno())}"
        try:
            for name, line in (
                ("setgroups", "deny"),
                ("uid_map", f"{uid} {uid} 1"),
                ("gid_map", f"{gid} {gid} 1"),
            ):
                fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
        except OSError as err:
            return f"cannot map the command's user: {err.strerror or err}"
        if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            return f"cannot make the command's mounts private: {os.strerror(ctypes.get_errno())}"
        try:
            lower = _open_same(*held[0], "the workspace")
            call = _open_same(*held[1], "the call's overlay directory")
        except _Moved as moved:
            return str(moved)
        fds = f"/proc/self/fd/{call}"
        options = f"lowerdir=/proc/self/fd/{lower},upperdir={fds}/up,workdir={fds}/work,userxattr"
        if (
            libc.mount(
                b"overlay",
                f"{fds}/mnt".encode(),
                b"overlay",
                _MS_NOSUID | _MS_NODEV,
                options.encode(),
            )
            != 0
        ):
            return f"cannot mount the command's overlay: {os.strerror(ctypes.get_errno())}"
        os.close(lower)
        os.close(call)
        return None

    @property
    def _fds(self) -> tuple[int, int]:
        return (self.workspace_fd, self.call_fd)


class _Moved(Exception):
    pass


def _open_same(path: str, held: os.stat_result, what: str) -> int:
    """Open ``path`` by name, and keep it only if it is the directory ``held`` is."""
    try:
        fd = os.open(path, _DIR)
    except OSError as err:
        raise _Moved(f"{what} {path} cannot be opened: {err.strerror or err}") from None
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) != (held.st_dev, held.st_ino):
        os.close(fd)
        raise _Moved(
            f"{what} {path} is not the directory the worker checked: a directory on its "
            "path was moved or swapped for a symlink"
        )
    return fd
