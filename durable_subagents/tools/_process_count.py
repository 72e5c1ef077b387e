"""A tool call's process limit, counted for the call alone where no cgroup counts it.

``RLIMIT_NPROC`` counts a user's processes: a limit set for one call counted every
process of the tool user, and one task's 2 x 250 sleepers made another task's running
build fail to fork. Since Linux 5.14 the kernel keeps the count per user namespace
(ucounts): a process may fork while its own namespace holds no more of its user's
processes than its limit, and each namespace above it no more than the limit its
creator had when it made it. So bwrap's namespace, made under ``RLIMIT_NPROC=N``,
still counts the user's processes outside against N. Instead the child makes a user
namespace of its own under the worker's limit, sets N inside it, and bwrap makes its
namespaces inside that one: only the call's processes count against N.

Measured on Linux 6.18, as root (commands as uid 65534) and as uid 65534 itself, with
300 processes of that user running outside: N set before bwrap, bwrap cannot even start
(``EAGAIN``); N set in the call's own namespace, 10 forks under N=50 ran, 80 were
refused, and another call holding 47 processes did not stop this one's 40. Where the
namespace cannot be made (user namespaces refused outside bwrap), the count falls back
to the user's: N plus what the user runs when the call starts.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["confinement", "confiner", "user_tasks"]

_CLONE_NEWUSER = 0x10000000
_PR_SET_DUMPABLE = 4
_NOBODY = (65534, 65534)


_tasks_cache: dict[int, tuple[float, int]] = {}


def user_tasks(uid: int) -> int:
    """Threads of ``uid`` now (what ``RLIMIT_NPROC`` counts), cached for a few seconds."""
    now = time.monotonic()
    cached = _tasks_cache.get(uid)
    if cached is not None and now - cached[0] < 5:
        return cached[1]
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                count += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    _tasks_cache[uid] = (now, count)
    return count


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_libc = _load_libc()


def confiner(processes: int) -> Callable[[], None]:
    """A step for the forked child, after its change of user: its own ``RLIMIT_NPROC``.

    ``processes``, counted in a user namespace of its own (see the module's docstring).
    The namespace maps the user to itself; bwrap makes its own inside it. A change of
    user leaves ``/proc/self`` root's until the process is dumpable again, as it would
    be after the exec anyway.
    """
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if hard != resource.RLIM_INFINITY:
        processes = min(processes, hard)
    libc = _libc

    def confine() -> None:
        assert libc is not None
        uid, gid = os.geteuid(), os.getegid()
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        if libc.unshare(_CLONE_NEWUSER) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"unshare(CLONE_NEWUSER): {os.strerror(code)}")
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))

    return confine


_probed: dict[str, bool | str] = {}
_probe_lock = threading.Lock()


def confinement() -> str | None:
    """Why a call's ``RLIMIT_NPROC`` cannot count in a user namespace of its own here.

    None: it can. Probed once, as the user commands run as.
    """
    with _probe_lock:
        if "confine" not in _probed:
            _probed["confine"] = _probe_confinement()
        result = _probed["confine"]
    return None if result is True else str(result)


def _probe_confinement() -> bool | str:
    if _libc is None:
        return "not Linux"
    confine = confiner(64)
    root = os.geteuid() == 0

    def preexec() -> None:
        if root:  # as a root worker's commands: a tool user's
            os.setgroups([])
            os.setresgid(_NOBODY[1], _NOBODY[1], _NOBODY[1])
            os.setresuid(_NOBODY[0], _NOBODY[0], _NOBODY[0])
        confine()

    true = shutil.which("true")
    argv = [true] if true else [sys.executable, "-c", ""]
    try:
        result = subprocess.run(
            argv, preexec_fn=preexec, stdin=subprocess.DEVNULL, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"a user namespace of the call's own is refused ({err})"
    return True if result.returncode == 0 else f"the probe exited {result.returncode}"
