"""What this host lets a worker do with cgroups: where its tool calls' cgroups go.

On cgroup v1, a hierarchy's directory of the worker's own cgroup, per controller,
where the worker may write it (a root worker's, in most containers). On cgroup v2,
the worker's own cgroup when controllers can be enabled below it (only where it holds
no process: a namespace's root), else its parent when that holds no process and the
worker may write it (systemd's ``Delegate=yes`` with ``DelegateSubgroup=``, which runs
the worker one level down). What is missing, and why, goes into the line the worker
logs at start (``_limits.limits_warning``). Cgroups that dead workers left behind are
swept (their processes killed) when the next worker looks.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from durable_subagents.tools import _cgroups
from durable_subagents.tools._cgroups import CONTROLLERS, TOOLS_WEIGHT, Bounds, Hierarchy

__all__ = ["available", "missing"]

log = logging.getLogger(__name__)

_PREFIX = "durable-subagents-"


def _pid_namespace() -> str:
    """This worker's PID namespace, so that a pid in a cgroup name means one process."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _base_name() -> str:
    return f"{_PREFIX}{_pid_namespace()}-{os.getpid()}"


@dataclass(frozen=True)
class _Mount:
    version: int
    controllers: frozenset[str]
    root: str
    point: Path


def _mounts() -> list[_Mount]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, point = fields[3], Path(fields[4].replace("\\040", " "))
        if rest[0] == "cgroup2":
            found.append(_Mount(2, frozenset(), root, point))
        elif rest[0] == "cgroup":
            options = frozenset(rest[2].split(","))
            found.append(_Mount(1, options & set(CONTROLLERS), root, point))
    return found


def _own_paths() -> dict[str, str]:
    """The worker's cgroup per v1 controller, and on v2 under the key ``""``."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    own = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


def _directory(mount: _Mount, own: str) -> Path | None:
    """The worker's cgroup directory under ``mount`` (None: the mount does not show it)."""
    root = mount.root.rstrip("/")
    if own != root and not own.startswith(root + "/"):
        return None
    return mount.point / own[len(root) :].lstrip("/")


def _find() -> tuple[list[Hierarchy], dict[str, str]]:
    """The hierarchies this worker may use, and why each controller it lacks is missing."""
    if not Path("/proc/self/cgroup").exists():
        return [], dict.fromkeys(CONTROLLERS, "no cgroups (not Linux)")
    mounts, own = _mounts(), _own_paths()
    found: list[Hierarchy] = []
    why: dict[str, str] = {}
    for controller in CONTROLLERS:
        mount = next((m for m in mounts if m.version == 1 and controller in m.controllers), None)
        if mount is None or controller not in own:
            continue
        parent = _directory(mount, own[controller])
        if parent is None:
            why[controller] = f"cgroup v1 {controller}: the worker's cgroup is not mounted here"
            continue
        hierarchy, problem = _prepare(1, (controller,), [parent])
        if hierarchy is not None:
            found.append(hierarchy)
        else:
            why[controller] = f"cgroup v1 {controller}: {problem}"
    # A controller is in one hierarchy at a time: v2 has those no v1 hierarchy holds.
    left = tuple(c for c in CONTROLLERS if not any(c in m.controllers for m in mounts))
    unified = next((m for m in mounts if m.version == 2), None)
    if left and unified is not None and "" in own:
        directory = _directory(unified, own[""])
        if directory is not None:
            candidates = [directory]
            if directory != unified.point:
                candidates.append(directory.parent)
            hierarchy, problem = _prepare(2, left, candidates)
            if hierarchy is not None:
                found.append(hierarchy)
            for controller in left:
                if hierarchy is None or controller not in hierarchy.controllers:
                    why[controller] = f"cgroup v2: {problem or 'not offered below the worker'}"
    for controller in CONTROLLERS:
        if not any(controller in h.controllers for h in found):
            why.setdefault(controller, f"no cgroup hierarchy with {controller} is mounted")
    return found, why


def _prepare(
    version: int, wanted: tuple[str, ...], candidates: list[Path]
) -> tuple[Hierarchy | None, str]:
    """The first candidate parent where this worker can make its base and a probe in it.

    Returns:
        The hierarchy, or None and why no candidate would do.
    """
    problems = []
    for n, parent in enumerate(candidates):
        controllers = wanted
        if version == 2:
            controllers, problem = _delegated(parent, wanted, own=n == 0)
            if problem:
                problems.append(problem)
                continue
        _sweep_stale(parent)
        hierarchy = Hierarchy(version, controllers, parent / _base_name())
        probe = hierarchy.base / f"probe-{uuid.uuid4().hex[:8]}"
        made = hierarchy.make(hierarchy.base, Bounds(weight=TOOLS_WEIGHT), parent=True)
        if made and hierarchy.make(probe, Bounds(64 << 20, 64), parent=False):
            with contextlib.suppress(OSError):
                probe.rmdir()
            return hierarchy, ""
        with contextlib.suppress(OSError):
            hierarchy.base.rmdir()
        problems.append(f"{parent} is not writable by uid {os.geteuid()}")
    return None, "; ".join(problems)


def _delegated(parent: Path, wanted: tuple[str, ...], *, own: bool) -> tuple[tuple[str, ...], str]:
    """The controllers of ``wanted`` a v2 cgroup can give the cgroups below it, or why none.

    A cgroup that holds processes cannot (but a namespace's root), so the worker's own
    one rarely can; its parent can where it holds none and the worker may write it.
    """
    which = "the worker's cgroup" if own else "its parent"
    try:
        offered = set(_cgroups._read(parent / "cgroup.controllers").split())
        controllers = tuple(c for c in wanted if c in offered)
        if not controllers:
            return (), f"{which} {parent} offers none of {', '.join(wanted)}"
        if not own and _cgroups._read(parent / "cgroup.procs").strip():
            return (), f"{which} {parent} holds processes (it is not delegated)"
        _cgroups._enable(parent, controllers)
    except OSError as err:
        if err.errno == errno.EBUSY:
            return (), f"{which} {parent} holds processes, so nothing can be enabled below it"
        why = err.strerror or str(err)
        return (), f"{which} {parent}: {why} (not delegated to uid {os.geteuid()})"
    return controllers, ""


def _sweep_stale(parent: Path) -> None:
    """Remove the cgroups of workers that died, killing what their calls left behind.

    A worker killed while a sandbox was starting can leave the sandbox's inner process
    running: it had not yet asked to die with its parent. It stays in its call's cgroup,
    and the next worker on the host ends it here. Only the calls of workers of this PID
    namespace are killed (elsewhere a pid names another process); others' cgroups are
    only removed when empty.
    """
    try:
        entries = list(parent.glob(f"{_PREFIX}*"))
    except OSError:
        return
    namespace = _pid_namespace()
    for entry in entries:
        parts = entry.name.removeprefix(_PREFIX).split("-")
        pid = parts[-1]
        ours = len(parts) == 2 and parts[0] == namespace
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        _remove_all(entry, kill=ours)


def _remove_all(cgroup: Path, *, kill: bool) -> None:
    """Remove ``cgroup`` and those below it, deepest first; ``kill``: their processes too."""
    with contextlib.suppress(OSError):
        for child in cgroup.iterdir():
            if child.is_dir():
                _remove_all(child, kill=kill)
    if kill:
        _kill_all(cgroup)
    with contextlib.suppress(OSError):
        cgroup.rmdir()


def _kill_all(cgroup: Path, wait: float = 2.0) -> None:
    """SIGKILL every process in ``cgroup`` until it is empty (or ``wait`` has passed)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            pids = [int(p) for p in _cgroups._read(cgroup / "cgroup.procs").split()]
        except (OSError, ValueError):
            return
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


_found: tuple[list[Hierarchy], dict[str, str]] | None = None
_find_lock = threading.Lock()


def available() -> list[Hierarchy]:
    """The hierarchies tool calls' cgroups are made in (found once per process)."""
    global _found
    with _find_lock:
        if _found is None:
            _found = _find()
            if _found[0]:
                atexit.register(_remove_bases, list(_found[0]))
        return _found[0]


def missing() -> dict[str, str]:
    """The controllers tool calls get no cgroup of, and why."""
    available()
    assert _found is not None
    return dict(_found[1])


def _remove_bases(hierarchies: list[Hierarchy]) -> None:
    for h in hierarchies:
        with contextlib.suppress(OSError):
            h.base.rmdir()
