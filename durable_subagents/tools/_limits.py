"""Resource limits of a tool call's processes: rlimits, and a cgroup where one can be made.

Per-process rlimits (file size, CPU time, data segment, open files) are set in the
child before it execs the sandbox, so every process of the call inherits them. A
process count and a memory total for the whole call need a cgroup: the worker makes
one per call under its own cgroup when the kernel lets it (cgroup v1 ``pids`` and
``memory`` hierarchies writable, as for a root worker in most containers). Otherwise
the process count falls back to ``RLIMIT_NPROC``, which counts every process of the
worker's user (and does not bind root at all), and memory stays per process.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import resource
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from durable_subagents.agents._spec import DEFAULT_LIMITS, ToolLimits

__all__ = ["DEFAULT_LIMITS", "CallCgroup", "Share", "limit_mechanisms", "rlimit_setter"]

log = logging.getLogger(__name__)


_CGROUP_ROOT = Path("/sys/fs/cgroup")
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


def rlimit_setter(limits: ToolLimits, uid: int | None = None) -> Callable[[], None]:
    """A function for the forked child (before exec) that applies the per-process limits.

    Args:
        limits: The call's limits.
        uid: The user the command will run as, if not the worker's own (a root worker's
            tool user): ``RLIMIT_NPROC`` counts that user's processes.
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
    if limits.processes and runs_as != 0:
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


@dataclass(frozen=True)
class _Hierarchy:
    controller: str
    base: Path
    """The worker's own directory for tool calls in this hierarchy."""


_lock = threading.Lock()
_hierarchies: list[_Hierarchy] | None = None


def _own_path(controller: str) -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def _find_hierarchies() -> list[_Hierarchy]:
    found = []
    for controller in ("pids", "memory"):
        mount = _CGROUP_ROOT / controller
        own = _own_path(controller)
        if own is None or not (mount / "cgroup.procs").exists():
            continue
        parent = mount / own.lstrip("/")
        _sweep_stale(parent)
        base = parent / _base_name()
        try:
            base.mkdir(exist_ok=True)
            probe = base / f"probe-{uuid.uuid4().hex[:8]}"
            probe.mkdir()
            limit_file = "pids.max" if controller == "pids" else "memory.limit_in_bytes"
            (probe / limit_file).write_text("64" if controller == "pids" else str(64 << 20))
            probe.rmdir()
        except OSError:
            with contextlib.suppress(OSError):
                base.rmdir()
            continue
        found.append(_Hierarchy(controller, base))
    return found


def _pid_namespace() -> str:
    """This worker's PID namespace, so that a pid in a cgroup name means one process."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _base_name() -> str:
    return f"durable-subagents-{_pid_namespace()}-{os.getpid()}"


def _sweep_stale(parent: Path) -> None:
    """Remove the cgroups of workers that died, killing what their calls left behind.

    A worker killed while a sandbox was starting can leave the sandbox's inner process
    running: it had not yet asked to die with its parent. It stays in its call's cgroup,
    and the next worker on the host ends it here. Only the calls of workers of this PID
    namespace are killed (elsewhere a pid names another process); others' cgroups are
    only removed when empty.
    """
    try:
        entries = list(parent.glob("durable-subagents-*"))
    except OSError:
        return
    namespace = _pid_namespace()
    for entry in entries:
        parts = entry.name.removeprefix("durable-subagents-").split("-")
        pid = parts[-1]
        ours = len(parts) == 2 and parts[0] == namespace
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        with contextlib.suppress(OSError):
            for call in entry.iterdir():
                if not call.is_dir():
                    continue
                if ours:
                    _kill_all(call)
                call.rmdir()
            entry.rmdir()


def _kill_all(cgroup: Path, wait: float = 2.0) -> None:
    """SIGKILL every process in ``cgroup`` until it is empty (or ``wait`` has passed)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _available() -> list[_Hierarchy]:
    global _hierarchies
    with _lock:
        if _hierarchies is None:
            _hierarchies = _find_hierarchies()
            if _hierarchies:
                atexit.register(_remove_bases, list(_hierarchies))
        return _hierarchies


def _remove_bases(hierarchies: list[_Hierarchy]) -> None:
    for h in hierarchies:
        with contextlib.suppress(OSError):
            h.base.rmdir()


def limit_mechanisms() -> dict[str, str]:
    """How each limit is enforced on this worker (logged at start, shown in the README)."""
    controllers = {h.controller for h in _available()}
    processes = (
        "cgroup (per call)"
        if "pids" in controllers
        else ("RLIMIT_NPROC (per user)" if os.geteuid() != 0 else "RLIMIT_NPROC (per tool user)")
    )
    memory = "cgroup (per call)" if "memory" in controllers else "RLIMIT_DATA (per process)"
    return {
        "processes": processes,
        "memory": memory,
        "file size": "RLIMIT_FSIZE",
        "cpu time": "RLIMIT_CPU (per process)",
    }


class CallCgroup:
    """The cgroups of one tool call: made before the call, removed after it."""

    def __init__(self, limits: ToolLimits) -> None:
        self.dirs: list[Path] = []
        name = f"call-{uuid.uuid4().hex[:12]}"
        for h in _available():
            path = h.base / name
            try:
                path.mkdir()
                if h.controller == "pids" and limits.processes:
                    (path / "pids.max").write_text(str(limits.processes))
                elif h.controller == "memory" and limits.memory_mb:
                    (path / "memory.limit_in_bytes").write_text(str(limits.memory_mb << 20))
                    with contextlib.suppress(OSError):
                        (path / "memory.memsw.limit_in_bytes").write_text(
                            str(limits.memory_mb << 20)
                        )
            except OSError as err:
                log.debug("cgroup %s unavailable: %s", path, err)
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            self.dirs.append(path)
        self._procs = [str(d / "cgroup.procs") for d in self.dirs]

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
        deadline = time.monotonic() + wait
        for path in self.dirs:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        log.warning("cgroup %s still has processes; left in place", path)
                        break
                    time.sleep(0.01)
        self.dirs = []
