"""Idle priority for a tree's commands once they have had their CPU second, without cgroups.

Where the worker has no ``cpu`` cgroup for tool calls, nothing weighs one tree of 40
busy calls against another task's one: each process gets its own slice, and a
bystander's command waits behind all of them (40 loops made a 0.3 s task take 52 s).
So a thread of the worker watches the commands of those calls: once the running calls
of one tree have used ``FULL_PRIORITY_CPU`` together (their processes' CPU time, and
that of the calls of the tree that ended meanwhile), every process of them moves to
``SCHED_IDLE``. An idle process runs on the CPU that others leave and gives way the
moment one wakes up; its children are idle from birth. A command cannot move itself
back: leaving ``SCHED_IDLE`` takes ``CAP_SYS_NICE`` or an ``RLIMIT_NICE`` that
``rlimit_setter`` sets to 0. A tree's count starts again when it has no call running.

Where the kernel groups processes by session (autogroups: ``sched_autogroup_enabled``,
for processes in the root CPU cgroup, as on cgroup v1 hosts), a session weighs as one
process whatever its processes' policy, so each session of an idle tree is also put
at nice 19 (``/proc/<pid>/autogroup``). A worker that is not root may change one
autogroup each tenth of a second, host-wide: the busiest sessions go first.

A call's processes are its sandbox process and everything below it: the sandbox's
PID namespace reaps its orphans, so nothing of the call leaves that tree of parents.
Each look reads ``/proc/<pid>/stat`` (about 14 microseconds each) of the calls'
processes and of those started since the last look; of every process of the host
only after a call starts (what it started before the look is found then).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import threading
from dataclasses import dataclass, field

__all__ = ["FULL_PRIORITY_CPU", "unwatch", "watch"]

log = logging.getLogger(__name__)

FULL_PRIORITY_CPU = 1.0
"""CPU seconds a tree's running commands get together at the worker's priority."""
TICK = 0.2
"""Seconds between two looks."""
_AUTOGROUP_RATE = 0.1
"""Seconds between two autogroup changes the kernel allows a worker that is not root."""
_SCHED_IDLE = 5
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class _Call:
    tree: str
    cpu: dict[int, float] = field(default_factory=dict)
    """Its live processes: pid -> CPU seconds, its own and its reaped children's."""


@dataclass
class _Tree:
    calls: set[int] = field(default_factory=set)
    spent: float = 0.0
    """CPU seconds of the tree's calls that ended while others ran."""
    idle: bool = False
    sessions: set[int] = field(default_factory=set)
    """Sessions whose autogroup is at nice 19 already."""


@dataclass
class _Stat:
    ppid: int
    session: int
    cpu: float
    policy: int


_lock = threading.Lock()
_wake = threading.Condition(_lock)
_calls: dict[int, _Call] = {}
_trees: dict[str, _Tree] = {}
_handles = itertools.count(1)
_thread: threading.Thread | None = None
_seen: set[int] = set()
"""The processes there were at the last look (pids are reused, out of order after a wrap)."""
_rescan = [True]
"""Whether the next look reads every process."""


def watch(tree: str, pid: int) -> int:
    """Watch the call whose sandbox process is ``pid``, of tree ``tree``; a handle."""
    global _thread
    with _lock:
        handle = next(_handles)
        _calls[handle] = _Call(tree, {pid: 0.0})
        _trees.setdefault(tree, _Tree()).calls.add(handle)
        _rescan[0] = True  # what it started before this look began
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="subagents-idle-watch", daemon=True)
            _thread.start()
        _wake.notify()
    return handle


def unwatch(handle: int) -> None:
    """Stop watching a call (it ended); its CPU still counts while its tree runs others."""
    with _lock:
        call = _calls.pop(handle, None)
        tree = None if call is None else _trees.get(call.tree)
        if call is None or tree is None:
            return
        tree.calls.discard(handle)
        tree.spent += sum(call.cpu.values())
        if not tree.calls:
            del _trees[call.tree]


def _run() -> None:
    while True:
        with _lock:
            while not _calls:
                _wake.wait()
        again = False
        try:
            again = _look()
        except Exception:  # the watcher must outlive any odd /proc entry
            log.exception("the idle-priority watcher failed a look")
        with _lock:
            _wake.wait(_AUTOGROUP_RATE if again else TICK)


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return _Stat(int(fields[1]), int(fields[3]), ticks / _TICKS, int(fields[38]))


def _new_processes() -> dict[int, _Stat]:
    """The processes started since the last look (every process when asked to)."""
    global _seen
    pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
    with _lock:
        new = pids if _rescan[0] else pids - _seen
        _rescan[0], _seen = False, pids
    found = {}
    for pid in sorted(new):
        stat = _stat(pid)
        if stat is not None:
            found[pid] = stat
    return found


def _look() -> bool:
    """Move the processes of trees past their CPU second to idle priority.

    Returns:
        Whether sessions are left whose autogroup could not be changed yet.
    """
    fresh = _new_processes()
    with _lock:
        calls = {h: (call.tree, list(call.cpu)) for h, call in _calls.items()}
    owner = {pid: h for h, (_, pids) in calls.items() for pid in pids}
    unowned = {pid: new.ppid for pid, new in fresh.items() if pid not in owner}
    while found := [pid for pid, ppid in unowned.items() if ppid in owner]:
        for pid in found:  # a child can have the lower pid (after a wrap): until none is left
            owner[pid] = owner[unowned.pop(pid)]
    stats = {pid: fresh.get(pid) or _stat(pid) for pid in owner}
    pending: dict[int, tuple[float, int, set[int]]] = {}
    """Session -> its CPU seconds, a process of it, its tree's sessions at nice 19."""
    with _lock:
        for handle, call in _calls.items():
            call.cpu = {
                pid: stat.cpu
                for pid, stat in stats.items()
                if stat is not None and owner[pid] == handle
            }
        idle_trees = []
        for tree_id, tree in _trees.items():
            used = tree.spent + sum(sum(_calls[h].cpu.values()) for h in tree.calls)
            tree.idle = tree.idle or used >= FULL_PRIORITY_CPU
            if tree.idle:
                idle_trees.append((tree_id, tree.sessions))
    for tree_id, sessions in idle_trees:
        for pid, handle in owner.items():
            stat = stats[pid]
            if stat is None or calls.get(handle, ("",))[0] != tree_id:
                continue
            if stat.policy != _SCHED_IDLE:
                _make_idle(pid)
            if stat.session not in sessions:
                cpu, first, _ = pending.get(stat.session, (0.0, pid, sessions))
                pending[stat.session] = (cpu + stat.cpu, first, sessions)
    if not pending or not _autogroups():
        return False
    # The busiest sessions first: a worker that is not root changes few at a time.
    for session, (_, pid, sessions) in sorted(pending.items(), key=lambda s: -s[1][0]):
        result = _nice_autogroup(pid)
        if result == "again":
            return True
        if result == "done":
            with _lock:
                sessions.add(session)
    return False


def _autogroups() -> bool:
    """Whether the kernel weighs each session as one (``sched_autogroup_enabled``)."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled", "rb") as f:
            return f.read().strip() == b"1"
    except OSError:
        return False


def _nice_autogroup(pid: int) -> str:
    """Put the autogroup of ``pid``'s session at nice 19: ``done``, ``again`` or ``failed``.

    A process without ``CAP_SYS_ADMIN`` may change one autogroup each tenth of a
    second, host-wide (``EAGAIN``): the rest wait for the next look.
    """
    try:
        fd = os.open(f"/proc/{pid}/autogroup", os.O_WRONLY)
    except OSError:
        return "failed"
    try:
        os.write(fd, b"19")
    except OSError as err:
        return "again" if err.errno == errno.EAGAIN else "failed"
    finally:
        os.close(fd)
    return "done"


def _make_idle(pid: int) -> None:
    """Move every thread of ``pid`` to ``SCHED_IDLE`` (a thread is scheduled alone)."""
    try:
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return
    for tid in threads:
        with contextlib.suppress(OSError):  # gone, or not ours to change
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
