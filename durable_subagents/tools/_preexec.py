"""What a command's child process does between fork and exec.

Descriptors it must not inherit marked close-on-exec, the call's cgroup joined, its
resource limits set, the tool user taken, the overlay mounted, and the parent-death
signal set last (a change of user clears it), so the command dies with the worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable

__all__ = ["child_setup"]

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_prctl = _load_prctl()


def _not_inherited(keep: tuple[int, ...]) -> None:
    """Mark every open descriptor but 0, 1, 2 and ``keep`` close-on-exec."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = [int(name) for name in os.listdir(listing)]
        except OSError:
            continue
        for fd in fds:
            if fd > 2 and fd not in keep:
                with contextlib.suppress(OSError):  # the listing's own, closed by now
                    os.set_inheritable(fd, False)
        return


def child_setup(
    parent: int,
    setup: list[Callable[[], None]],
    run_as: tuple[int, int] | None = None,
    keep: tuple[int, ...] = (),
    confine: Callable[[], None] | None = None,
    enter: Callable[[], None] | None = None,
) -> Callable[[], None]:
    """Run in the forked child: descriptors, cgroup, rlimits, tool user, death signal.

    Every descriptor but the standard streams and ``keep`` is marked close-on-exec first,
    whatever the event loop's spawn left inheritable (uvloop's leaves sockets and pipes
    of the worker's open across the exec). Marked, not closed: the loop's spawn still
    uses some of them after this runs (to set up the child's standard streams). The
    user changes last but one: joining the call's cgroup needs the worker's rights, and
    a change of user clears the parent-death signal, which is therefore set after.
    ``enter`` (the overlay's namespaces and mount, ``OverlayMount.enter``) runs as the
    user, before ``confine`` and the death signal: a new user namespace clears it too.
    """
    prctl = _prctl

    def preexec() -> None:
        _not_inherited(keep)
        for step in setup:
            step()
        if run_as is not None:
            uid, gid = run_as
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        if enter is not None:
            enter()
        if confine is not None:  # as the user, and before the death signal it clears
            confine()
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(137)

    return preexec
