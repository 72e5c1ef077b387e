"""Resource limits of a tool call's processes, and its share of the machine.

Per-process rlimits (file size, CPU time, data segment, open files) are set in the
child before it execs the sandbox, so every process of the call inherits them. Totals
need cgroups: where the worker may make them (``_cgroup_host``), a call's processes
live in a cgroup of the call, inside one of its task, inside one of its tree (the task
and the subagents it spawned), with CPU weights and memory and process caps at each
level (``_cgroups``). Otherwise the process count falls back to ``RLIMIT_NPROC``,
which counts every process of the worker's user (and does not bind root at all), and
memory stays per process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from durable_subagents.agents._spec import DEFAULT_LIMITS, ToolLimits
from durable_subagents.tools import _cgroup_host, _cgroups
from durable_subagents.tools._cgroups import Bounds

__all__ = ["DEFAULT_LIMITS", "CallCgroup", "Share", "limit_mechanisms", "rlimit_setter"]

log = logging.getLogger(__name__)

_NICE = 5
"""Tool processes yield the CPU to the worker's event loop and workflow tasks."""


@dataclass(frozen=True)
class Share:
    """Whose share of the machine a call draws on.

    Attributes:
        task_id: The task the call belongs to.
        tree_id: The top task of its tree: the task itself, or the task that spawned it.
    """

    task_id: str
    tree_id: str

    @classmethod
    def alone(cls) -> Share:
        """A share of its own, for a command no task's context started."""
        ident = f"call-{uuid.uuid4().hex[:12]}"
        return cls(ident, ident)


def rlimit_setter(
    limits: ToolLimits, uid: int | None = None, cgroup: CallCgroup | None = None
) -> Callable[[], None]:
    """A function for the forked child (before exec) that applies the per-process limits.

    Args:
        limits: The call's limits.
        uid: The user the command will run as, if not the worker's own (a root worker's
            tool user): ``RLIMIT_NPROC`` counts that user's processes.
        cgroup: The call's cgroups: with a ``pids`` one, no per-user ``RLIMIT_NPROC``
            is set (it would count other tasks' processes too).
    """
    values: list[tuple[int, int]] = []
    if limits.file_size_mb:
        values.append((resource.RLIMIT_FSIZE, limits.file_size_mb << 20))
    if limits.cpu_seconds:
        values.append((resource.RLIMIT_CPU, limits.cpu_seconds))
    if limits.memory_mb:
        values.append((resource.RLIMIT_DATA, limits.memory_mb << 20))
    if limits.open_files:
        values.append((resource.RLIMIT_NOFILE, limits.open_files))
    values.append((resource.RLIMIT_CORE, 0))
    runs_as = os.geteuid() if uid is None else uid
    per_user = cgroup is None or cgroup.counts_per_user
    if limits.processes and runs_as != 0 and per_user:
        # Counted per user: leave room for what that user already runs.
        values.append((resource.RLIMIT_NPROC, limits.processes + _user_tasks(runs_as)))
    # Never raise a hard limit the worker itself runs under.
    current = {res: resource.getrlimit(res) for res, _ in values}
    final = []
    for res, value in values:
        _, hard = current[res]
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        final.append((res, value))

    def apply() -> None:
        for res, value in final:
            resource.setrlimit(res, (value, value))
        with contextlib.suppress(OSError):
            os.nice(_NICE)

    return apply


_tasks_cache: dict[int, tuple[float, int]] = {}


def _user_tasks(uid: int) -> int:
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


def limit_mechanisms() -> dict[str, str]:
    """How each limit is enforced on this worker (logged at start, shown in the README)."""
    controllers = {c for h in _cgroup_host.available() for c in h.controllers}
    cgroup = "cgroup (per call, task and tree)"
    processes = (
        cgroup
        if "pids" in controllers
        else ("RLIMIT_NPROC (per user)" if os.geteuid() != 0 else "RLIMIT_NPROC (per tool user)")
    )
    return {
        "processes": processes,
        "memory": cgroup if "memory" in controllers else "RLIMIT_DATA (per process)",
        "cpu": "cgroup weight (per task and tree)" if "cpu" in controllers else "nice 5",
        "file size": "RLIMIT_FSIZE",
        "cpu time": "RLIMIT_CPU (per process)",
    }


# ---------------------------------------------------------------- one call


class CallCgroup:
    """One tool call's share of the machine: its cgroups, made before the call.

    ``join`` (in the child, before its change of user) moves it into the call's
    cgroups, and ``remove`` takes them away after the call (with the task's and tree's
    when it was their last call).

    Args:
        limits: The call's limits.
        share: The task and tree the call belongs to (None: a share of its own).

    Attributes:
        dirs: The call's cgroup directories (one per hierarchy).
        controllers: The controllers that hold the call.
    """

    def __init__(self, limits: ToolLimits, share: Share | None = None) -> None:
        self.share = share or Share.alone()
        bounds = Bounds(
            limits.memory_mb << 20 if limits.memory_mb else None, limits.processes or None
        )
        held = _cgroups.open_call(
            _cgroup_host.available(), self.share.tree_id, self.share.task_id, bounds
        )
        self.dirs: list[Path] = [path for _, path in held]
        self.controllers = frozenset(c for h, _ in held for c in h.controllers)
        self._procs = [str(d / "cgroup.procs") for d in self.dirs]
        self._open = True

    @property
    def counts_per_user(self) -> bool:
        """Whether ``RLIMIT_NPROC`` must count the user's processes (no better count)."""
        return "pids" not in self.controllers

    def join(self) -> None:
        """Move the calling process into the call's cgroups (run in the child before exec)."""
        pid = str(os.getpid()).encode()
        for procs in self._procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def remove(self, wait: float = 2.0) -> None:
        """Remove the cgroups once their processes are gone (they were killed)."""
        if self._open:
            self._open = False
            _cgroups.close_call(self.share.tree_id, self.share.task_id, self.dirs, wait)
        self.dirs = []
