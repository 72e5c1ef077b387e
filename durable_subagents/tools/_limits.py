"""Resource limits of a tool call's processes, and its share of the machine.

Per-process rlimits (file size, CPU time, data segment, open files) are set in the
child before it execs the sandbox, so every process of the call inherits them. Totals
need cgroups: where the worker may make them (``_cgroups``), a call's processes live
in a cgroup of the call, inside one of its task, inside one of its tree (the task
and the subagents it spawned), with CPU weights and memory and process caps at each
level. Where it may not (a worker that is not root, without a delegated cgroup v2
subtree), each call gets bounds that stand in for its own cgroup, and the worker
says so once at start (``log_limit_mechanisms``):

- memory: ``RLIMIT_DATA`` per process, and sized tmpfs mounts for ``/tmp``,
  ``/var/tmp`` and ``/dev/shm`` that hold the call's memory limit between them (the
  sandbox's other file systems are read-only);
- processes: ``RLIMIT_NPROC`` counted in a user namespace of the call's own, so that
  only the call's processes count, not every process of its user (``_process_count``);
- CPU: idle priority for a tree's commands once they have used one CPU second
  (``_idle_watch``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import resource
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from durable_subagents.agents._spec import DEFAULT_LIMITS, ToolLimits
from durable_subagents.tools import _cgroup_host, _cgroups, _idle_watch
from durable_subagents.tools._cgroups import Bounds
from durable_subagents.tools._process_count import confinement, confiner, user_tasks

__all__ = [
    "DEFAULT_LIMITS",
    "CallCgroup",
    "Share",
    "limit_mechanisms",
    "limits_warning",
    "log_limit_mechanisms",
    "rlimit_setter",
    "tmpfs_sizes",
]

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
        cgroup: The call's cgroups: with a ``pids`` one, or a user namespace of its
            own (``CallCgroup.confine``), no per-user ``RLIMIT_NPROC`` is set.
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
    # No way back from idle priority (see _idle_watch): it takes RLIMIT_NICE.
    values.append((resource.RLIMIT_NICE, 0))
    runs_as = os.geteuid() if uid is None else uid
    per_user = cgroup is None or cgroup.counts_per_user
    if limits.processes and runs_as != 0 and per_user:
        # Counted per user: leave room for what that user already runs.
        values.append((resource.RLIMIT_NPROC, limits.processes + user_tasks(runs_as)))
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


# ---------------------------------------------------------------- memory, per call


def tmpfs_sizes(total: int) -> dict[str, int]:
    """The sandbox's writable tmpfs mounts and their sizes: ``total`` bytes between them."""
    return {"/tmp": total // 2, "/var/tmp": total // 4, "/dev/shm": total // 4}


@functools.lru_cache(maxsize=4)
def _has_size_option(exe: str) -> bool:
    """Whether this bwrap sizes a tmpfs (``--size``, bubblewrap 0.7 and later)."""
    try:
        helped = subprocess.run([exe, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return b"--size" in helped.stdout + helped.stderr


# ---------------------------------------------------------------- what the worker says


def limit_mechanisms() -> dict[str, str]:
    """How each limit is enforced on this worker (logged at start, shown in the README)."""
    controllers = {c for h in _cgroup_host.available() for c in h.controllers}
    cgroup = "cgroup (per call, task and tree)"
    if "pids" in controllers:
        processes = cgroup
    elif confinement() is None:
        processes = "RLIMIT_NPROC in the call's own user namespace (per call)"
    else:
        processes = "RLIMIT_NPROC (per user)"
    return {
        "processes": processes,
        "memory": cgroup
        if "memory" in controllers
        else "RLIMIT_DATA (per process); /tmp, /var/tmp and /dev/shm sized (per call)",
        "cpu": "cgroup weight (per task and tree)"
        if "cpu" in controllers
        else f"idle priority after {_idle_watch.FULL_PRIORITY_CPU:g} CPU second (per tree)",
        "file size": "RLIMIT_FSIZE",
        "cpu time": "RLIMIT_CPU (per process)",
    }


def limits_warning() -> str | None:
    """One line on what tool calls get no cgroup of, and how to get them; None: all."""
    missing = _cgroup_host.missing()
    if not missing:
        return None
    why = "; ".join(dict.fromkeys(missing.values()))
    confine = confinement()
    nproc = (
        "RLIMIT_NPROC per call"
        if confine is None
        else f"RLIMIT_NPROC per user (no user namespace per call: {confine})"
    )
    return (
        f"tool calls get no {', '.join(missing)} cgroup ({why}), so a task and a task tree "
        f"have no share of their own: each call is held alone, by {nproc}, sized /tmp, "
        f"/var/tmp and /dev/shm, RLIMIT_DATA and idle priority after its tree's first CPU "
        "second. To give each task and tree its share, run the worker as root where cgroup "
        "v1 is writable, or delegate a cgroup v2 subtree to it (systemd: Delegate=yes with "
        "DelegateSubgroup=worker)"
    )


_logged = False


def log_limit_mechanisms(logger: logging.Logger) -> None:
    """Say how limits are enforced, and once per process what is missing and how to fix it."""
    global _logged
    logger.info("tool limits enforced by: %s", limit_mechanisms())
    warning = limits_warning()
    if warning is not None and not _logged:
        _logged = True
        logger.warning("%s", warning)


# ---------------------------------------------------------------- one call


class CallCgroup:
    """One tool call's share of the machine: its cgroups, or what stands in for them.

    Made before the call; ``join`` (in the child, before its change of user) moves it
    into the call's cgroups, ``confine`` (after the change) gives it a user namespace
    for ``RLIMIT_NPROC`` where no ``pids`` cgroup counts its processes, ``started``
    watches its CPU where no ``cpu`` cgroup weighs it, and ``remove`` undoes it all
    after the call (with the task's and tree's cgroups when it was their last call).

    Args:
        limits: The call's limits.
        share: The task and tree the call belongs to (None: a share of its own).
        sandboxed: The command runs in bubblewrap (a command on the host gets no
            user namespace of its own).

    Attributes:
        dirs: The call's cgroup directories (one per hierarchy).
        controllers: The controllers that hold the call.
    """

    def __init__(
        self, limits: ToolLimits, share: Share | None = None, *, sandboxed: bool = True
    ) -> None:
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
        self._memory = limits.memory_mb << 20 if limits.memory_mb else None
        self._confine: Callable[[], None] | None = None
        if sandboxed and limits.processes and "pids" not in self.controllers:
            if confinement() is None:
                self._confine = confiner(limits.processes)
        self._watch: int | None = None
        self._open = True

    @property
    def counts_per_user(self) -> bool:
        """Whether ``RLIMIT_NPROC`` must count the user's processes (no better count)."""
        return "pids" not in self.controllers and self._confine is None

    def join(self) -> None:
        """Move the calling process into the call's cgroups (run in the child before exec)."""
        pid = str(os.getpid()).encode()
        for procs in self._procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def confine(self) -> None:
        """In the child after its change of user: the call's own ``RLIMIT_NPROC``, if due."""
        if self._confine is not None:
            self._confine()

    def tmpfs_bytes(self, exe: str) -> int | None:
        """What the sandbox's tmpfs mounts may hold between them (``tmpfs_sizes``).

        None: unsized, as a memory cgroup counts their pages (or ``exe`` cannot size them).
        """
        if "memory" in self.controllers or self._memory is None:
            return None
        return self._memory if _has_size_option(exe) else None

    def started(self, pid: int) -> None:
        """The call's sandbox process runs: watch its CPU where no cgroup weighs it."""
        if "cpu" not in self.controllers and self._watch is None:
            self._watch = _idle_watch.watch(self.share.tree_id, pid)

    def remove(self, wait: float = 2.0) -> None:
        """Remove the cgroups once their processes are gone (they were killed)."""
        if self._watch is not None:
            _idle_watch.unwatch(self._watch)
            self._watch = None
        if self._open:
            self._open = False
            _cgroups.close_call(self.share.tree_id, self.share.task_id, self.dirs, wait)
        self.dirs = []
