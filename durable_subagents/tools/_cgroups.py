"""Cgroups for tool calls: the worker's base, then one per tree, per task and per call.

A call's processes live in ``base/tree-<root task>/task-<task>/call-<id>``, in each
of the ``cpu``, ``memory`` and ``pids`` controllers the worker may write (see
``_cgroup_host``): one hierarchy per controller on cgroup v1, one for all three on
cgroup v2. Every tree, task and call weighs the same for the CPU (``WEIGHT``), so
under contention a tree of 40 calls gets what one task of one call gets, and a task's
calls share its part; all of them together weigh ``TOOLS_WEIGHT`` beside the worker's
own process. Memory and processes are capped at each level: a call by its own limits,
a task by ``TASK_CALLS`` times them, a tree by ``TREE_CALLS`` times the largest call
limits it has run with. A task's and a tree's cgroups go when their last call does.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CONTROLLERS",
    "TASK_CALLS",
    "TOOLS_WEIGHT",
    "TREE_CALLS",
    "WEIGHT",
    "Bounds",
    "Hierarchy",
    "close_call",
    "open_call",
]

log = logging.getLogger(__name__)

CONTROLLERS = ("cpu", "memory", "pids")
TASK_CALLS = 2
"""A task's memory and processes: this many times one call's limits. A task runs up to
8 calls at once; most are small, and two of its heaviest fit side by side."""
TREE_CALLS = 4
"""A tree's memory and processes: this many times the largest call limits among its
calls (a tree of 40 calls held 40 times them before: 80 GiB at the default)."""

WEIGHT = 100
"""The CPU weight of every tree, task and call (cgroup v2's scale; v1's ``cpu.shares``
is 10.24 times it): a tree of 40 calls weighs what one task of one call does."""
TOOLS_WEIGHT = 33
"""The weight of all the worker's tool calls together, beside the worker's own process
(100): what one process at nice 5 weighs, as every command did before. The worker and
Temporal, which every task's turns wait on, keep three quarters of a contended CPU."""


@dataclass(frozen=True)
class Bounds:
    """What one cgroup may hold: memory (bytes), processes, and its CPU weight.

    None: no cap of its own.
    """

    memory: int | None = None
    pids: int | None = None
    weight: int = WEIGHT

    def times(self, n: int) -> Bounds:
        return Bounds(
            None if self.memory is None else self.memory * n,
            None if self.pids is None else self.pids * n,
            self.weight,
        )

    def widest(self, other: Bounds) -> Bounds:
        memory, pids = _most(self.memory, other.memory), _most(self.pids, other.pids)
        return Bounds(memory, pids, self.weight)


def _most(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else max(a, b)


@dataclass(frozen=True)
class Hierarchy:
    """Where this worker makes its tool calls' cgroups, for some controllers.

    Attributes:
        version: 1 (a hierarchy per controller) or 2 (the unified one).
        controllers: What it controls: one on v1, any of ``CONTROLLERS`` on v2.
        base: This worker's directory (``durable-subagents-<pid ns>-<pid>``).
    """

    version: int
    controllers: tuple[str, ...]
    base: Path

    def make(self, path: Path, bounds: Bounds, *, parent: bool) -> bool:
        """Create ``path`` with ``bounds`` (or set them on it); whether it now exists.

        ``parent``: it will hold cgroups, not processes (v2 enables the controllers
        below it).
        """
        new = False
        try:
            path.mkdir()
            new = True
        except FileExistsError:
            pass
        except OSError as err:
            log.debug("cgroup %s unavailable: %s", path, err)
            return False
        try:
            self.bound(path, bounds, new=new)
            if parent and self.version == 2:
                _enable(path, self.controllers)
        except OSError as err:
            log.debug("cgroup %s unavailable: %s", path, err)
            if new:
                with contextlib.suppress(OSError):
                    path.rmdir()
            return False
        return True

    def bound(self, path: Path, bounds: Bounds, *, new: bool = False) -> None:
        """Write the cgroup's weight and caps (v1: cpu.shares; v2: cpu.weight...)."""
        for controller in self.controllers:
            if controller == "cpu" and new:
                if self.version == 1:
                    _write(path / "cpu.shares", bounds.weight * 1024 // 100)
                else:
                    _write(path / "cpu.weight", bounds.weight)
            elif controller == "pids" and bounds.pids is not None:
                _write(path / "pids.max", bounds.pids)
            elif controller == "memory" and bounds.memory is not None:
                if self.version == 2:
                    _write(path / "memory.max", bounds.memory)
                    with contextlib.suppress(OSError):  # no swap accounting
                        _write(path / "memory.swap.max", 0)
                else:
                    _memory_v1(path, bounds.memory)


def _read(path: Path) -> str:
    return path.read_text()


def _write(path: Path, value: int | str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def _memory_v1(path: Path, limit: int) -> None:
    """Memory, and memory plus swap, at ``limit`` (memsw never below memory: either order)."""
    files = [path / "memory.limit_in_bytes", path / "memory.memsw.limit_in_bytes"]
    try:
        _write(files[0], limit)
        with contextlib.suppress(OSError):  # no swap accounting
            _write(files[1], limit)
    except OSError:
        # Raising: memory plus swap first, or memory would pass it.
        _write(files[1], limit)
        _write(files[0], limit)


def _enable(path: Path, controllers: tuple[str, ...]) -> None:
    """Enable ``controllers`` for the cgroups below ``path`` (v2)."""
    on = set(_read(path / "cgroup.subtree_control").split())
    wanted = [c for c in controllers if c not in on]
    if wanted:
        _write(path / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))


# ---------------------------------------------------------------- trees, tasks, calls


def _slug(kind: str, ident: str) -> str:
    """A cgroup name for a tree or task id: readable, unique by a hash of the whole id."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", ident)[:40]
    digest = hashlib.sha256(ident.encode()).hexdigest()[:10]
    return f"{kind}-{readable}-{digest}"


@dataclass
class _Node:
    name: str
    bounds: Bounds
    calls: int = 0
    made: set[Path] = field(default_factory=set)
    """The hierarchies' bases where this node's directory exists."""
    tasks: dict[str, _Node] = field(default_factory=dict)


_lock = threading.Lock()
_trees: dict[str, _Node] = {}


def open_call(
    hierarchies: list[Hierarchy], tree_id: str, task_id: str, bounds: Bounds
) -> list[tuple[Hierarchy, Path]]:
    """Make a call's cgroups in ``hierarchies`` (and its task's and tree's where missing).

    Returns:
        The hierarchies that hold the call, each with the call's directory. A
        hierarchy where a level could not be made is left out: the call gets no
        cgroup of its controllers.
    """
    if not hierarchies:
        return []
    with _lock:
        tree = _trees.get(tree_id)
        if tree is None:
            tree = _trees[tree_id] = _Node(_slug("tree", tree_id), bounds.times(TREE_CALLS))
        elif tree.bounds != (wider := tree.bounds.widest(bounds.times(TREE_CALLS))):
            tree.bounds = wider
            for h in hierarchies:
                if h.base in tree.made:
                    with contextlib.suppress(OSError):
                        h.bound(h.base / tree.name, wider)
        task = tree.tasks.get(task_id)
        if task is None:
            task = tree.tasks[task_id] = _Node(_slug("task", task_id), bounds.times(TASK_CALLS))
        tree.calls += 1
        task.calls += 1
        held = []
        for h in hierarchies:
            tree_dir = h.base / tree.name
            if h.base not in tree.made and h.make(tree_dir, tree.bounds, parent=True):
                tree.made.add(h.base)
            if h.base not in tree.made:
                continue
            if h.base not in task.made and h.make(tree_dir / task.name, task.bounds, parent=True):
                task.made.add(h.base)
            if h.base in task.made:
                held.append(h)
    out = []
    name = f"call-{uuid.uuid4().hex[:12]}"
    for h in held:
        path = h.base / tree.name / task.name / name
        if h.make(path, bounds, parent=False):
            out.append((h, path))
    return out


def close_call(tree_id: str, task_id: str, paths: list[Path], wait: float = 2.0) -> None:
    """Remove a call's cgroups once their processes are gone (they were killed).

    Its task's and tree's go too when it was their last call.
    """
    deadline = time.monotonic() + wait
    for path in paths:
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
    with _lock:
        tree = _trees.get(tree_id)
        task = None if tree is None else tree.tasks.get(task_id)
        if tree is None or task is None:
            return
        task.calls -= 1
        tree.calls -= 1
        if task.calls == 0:
            del tree.tasks[task_id]
            for base in task.made:
                with contextlib.suppress(OSError):  # a call left in place keeps it
                    (base / tree.name / task.name).rmdir()
        if tree.calls == 0:
            del _trees[tree_id]
            for base in tree.made:
                with contextlib.suppress(OSError):
                    (base / tree.name).rmdir()
