"""The fork server and its children: where the file tools' calls run.

The server is a fresh interpreter holding only the tool modules (never a fork of the
worker, whose other threads belong to Temporal's runtime and the event loop). It keeps
one spare child forked ahead and hands the worker that child's socket; the worker
sends requests straight to the child, so a call's path is the worker and the child
alone. When the worker takes a spare the server forks the next one, and it reaps every
child and reports its exit status. A child serves the calls of one user and one set of
limits (of any task), one at a time: each request carries the call's limits, the child
applies them, runs the tool function and writes its answer back as JSON; it exits when
the worker closes its socket (see ``_processes`` for when).

``_processes`` is the worker's side. The control protocol, over a ``SOCK_SEQPACKET``
pair the worker created (no path or abstract socket that another process could
connect to), is one fixed-size message each way: the server says HELLO, SPARE (with
the socket) and EXITED; the worker says TAKEN and KILL. The server kills only children
it has not reaped yet, so a pid is never reused under a kill. On a child's socket, each
request and each answer is a frame: its length (``FRAME``), then its bytes.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import pickle
import resource
import selectors
import signal
import socket
import struct
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from durable_subagents.tools._decorator import ToolContext, ToolError, _as_text

__all__ = ["BOOT", "FRAME", "MESSAGE", "NICE", "read_frame", "serve"]

NICE = 19
"""Niceness of a call's process once it has used ``FULL_PRIORITY_CPU``, where it cannot
take idle priority: the worker's event loop, workflow tasks and the other tasks' model
turns come first."""
FULL_PRIORITY_CPU = 0.05
"""CPU seconds a call runs at the worker's own priority. A read takes a millisecond or
two and answers as fast as it would in the worker; a heavy search yields after this."""

MAX_CHILD_RSS_MB = 256
"""A child that has grown past this (a big file read, a large search) is not reused."""

MESSAGE = struct.Struct("!cQq")
"""A control message: its kind, a child's pid and a value (a wait status)."""
HELLO, SPARE, EXITED, TAKEN, KILL = b"H", b"S", b"X", b"T", b"K"
FRAME = struct.Struct("!I")
"""The length of a request or an answer, before its bytes."""
_PR_SET_PDEATHSIG = 1
_FILE_TOOL_MODULES = ("durable_subagents.tools._files", "durable_subagents.tools._search")
"""The file tools' modules, imported by the server before it forks (see ``_warm_up``)."""

BOOT = """\
import json, sys, types
sys.path[:] = json.loads(sys.argv[2])
# The package's __init__ re-exports the client and the worker, which the tools never
# use: leaving it out keeps the server (and every fork of it) small.
for name, path in json.loads(sys.argv[3]).items():
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
from durable_subagents.tools._forkserver import serve
serve(int(sys.argv[1]))
"""
"""What the server's interpreter runs: ``python -I -c BOOT fd sys.path stubs``."""


def serve(fd: int) -> None:
    """The server's loop: keep a spare ready, kill on request, reap and report."""
    control = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for module in _FILE_TOOL_MODULES:
        importlib.import_module(module)
    _warm_up()
    gc.collect()
    gc.freeze()  # the children share these pages instead of copying them at a collection
    server = _Server(control)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    try:
        control.send(MESSAGE.pack(HELLO, os.getpid(), 0))
        server.fork_spare()
        while True:
            for key, _ in selector.select():
                if key.fileobj is not control:
                    with contextlib.suppress(OSError):
                        while os.read(wake_r, 512):
                            pass
                elif not server.receive():
                    return  # the worker closed its end, or died
            server.reap()
    except OSError:
        return  # the control socket broke: the worker is gone
    finally:
        server.kill_all()


class _Server:
    """The server's children: the spare the worker holds, and the calls running."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.pid = os.getpid()
        self.children: set[int] = set()
        """Every child not reaped yet."""

    def fork_spare(self) -> None:
        """Fork a child that waits for a request, and hand the worker its socket."""
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            try:
                _spare(theirs.fileno(), self.pid)
            finally:
                os._exit(70)
        theirs.close()
        self.children.add(pid)
        try:
            socket.send_fds(self.control, [MESSAGE.pack(SPARE, pid, 0)], [mine.fileno()])
        finally:
            mine.close()

    def receive(self) -> bool:
        """Act on one message from the worker; False once the worker is gone."""
        message = self.control.recv(MESSAGE.size)
        if len(message) != MESSAGE.size:
            return False
        kind, pid, _ = MESSAGE.unpack(message)
        if kind == TAKEN:
            self.fork_spare()
        elif kind == KILL and pid in self.children:
            os.kill(pid, signal.SIGKILL)
        return True

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.control.send(MESSAGE.pack(EXITED, pid, status))

    def kill_all(self) -> None:
        for pid in self.children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.children:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)


def _warm_up() -> None:
    """Run each file tool once in the server, before any child is forked.

    What a first call builds lazily (compiled patterns, caches, imports inside
    functions) every child then inherits built: a fresh process's first listing took
    3.4 ms, its second 1.4.
    """
    with tempfile.TemporaryDirectory(prefix="subagents-warm-up-") as tmp:
        root = Path(tmp)
        (root / ".gitignore").write_text("*.log\nbuild/\n!keep.log\n")
        (root / "a.txt").write_text("one\ntwo\n")
        ctx = pickle.loads(pickle.dumps(ToolContext(workspace=root, task_id="warm-up")))
        files, search = (importlib.import_module(m) for m in _FILE_TOOL_MODULES)
        calls = [
            (files.read_file, {"path": "a.txt"}),
            (search.list_files, {}),
            (search.grep, {"pattern": "one"}),
            (files.write_file, {"path": "b/c.txt", "content": "x"}),
            (files.edit_file, {"path": "b/c.txt", "old": "x", "new": "y"}),
        ]
        for file_tool, kwargs in calls:
            with contextlib.suppress(Exception):
                json.dumps({"ok": _as_text(file_tool.fn(ctx, **kwargs))})


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_server = 0
"""The fork server's pid, in a child."""


def _die_with_server() -> bool:
    """Have the kernel kill this child when the server dies; False if it is gone already."""
    prctl = _load_prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    return os.getppid() == _server


def _spare(fd: int, server: int) -> None:
    """A spare child: answer requests on its socket until the worker closes it."""
    global _server
    _server = server
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGPROF, _yield_priority)
    if not _die_with_server():
        return  # the server died before the death signal was set
    # Only its own socket stays: not the control socket, nor the server's selector.
    os.closerange(3, fd)
    os.closerange(fd + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    with socket.socket(fileno=fd) as sock:
        first = True
        while (frame := read_frame(sock)) is not None:
            request, fds = frame
            try:
                answer = json.dumps(_answer(request, first, fds)).encode()
            finally:
                for received in fds:
                    os.close(received)
            sock.sendall(FRAME.pack(len(answer)) + answer)
            first = False
    os._exit(0)


_MAX_FDS = 4
"""Descriptors a request may carry (the workspace's); more are closed unused."""


def read_frame(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    """The next frame's bytes and the descriptors sent with it (blocking); None at the end."""
    fds: list[int] = []
    header = _read_exactly(sock, FRAME.size, fds)
    if header is None:
        _close(fds)
        return None
    body = _read_exactly(sock, FRAME.unpack(header)[0], fds)
    if body is None:
        _close(fds)
        return None
    return body, fds


def _close(fds: list[int]) -> None:
    for received in fds:
        with contextlib.suppress(OSError):
            os.close(received)


def _read_exactly(sock: socket.socket, size: int, fds: list[int]) -> bytes | None:
    chunks = []
    while size:
        chunk, got, _, _ = socket.recv_fds(sock, min(size, 1 << 16), _MAX_FDS)
        fds += got
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


_niced = False


def _answer(request: bytes, first: bool, fds: list[int]) -> dict[str, Any]:
    """Run one call; the answer says whether this process should serve no more.

    ``fds``: the workspace's descriptor, if the worker holds one (its walks start there).
    """
    (module, name), ctx, kwargs, (fixed, cpu, full) = pickle.loads(request)
    ctx.workspace_fd = fds[0] if len(fds) == 1 else None
    try:
        if first:
            for which, soft, hard in fixed:
                resource.setrlimit(which, (soft, hard))
            _become(ctx.run_as)
        _limit_cpu(cpu, full)
    except OSError as err:
        return {"setup": str(err), "retire": True}
    answer: dict[str, Any]
    try:
        tool = getattr(importlib.import_module(module), name)
        answer = {"ok": _as_text(tool.fn(ctx, **kwargs))}
    except ToolError as err:
        answer = {"tool_error": str(err), "stopped": ctx.stopped}
    except MemoryError:
        return {"memory": True, "retire": True}
    except Exception as err:
        return {
            "crash": {
                "type": type(err).__name__,
                "message": str(err),
                "traceback": traceback.format_exc(),
            },
            "retire": True,
        }
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    big = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > MAX_CHILD_RSS_MB << 10
    answer["retire"] = _niced or big
    return answer


def _limit_cpu(seconds: int, full: float) -> None:
    """Give this call ``seconds`` of CPU from now on, then SIGXCPU (which kills).

    The first ``full`` seconds of it run at the worker's priority (none: it starts at
    idle priority).
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime) + seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    if full > 0:
        signal.setitimer(signal.ITIMER_PROF, full)
    else:
        _yield_priority(signal.SIGPROF, None)


def _yield_priority(signum: int, frame: object) -> None:
    """Run on what CPU the worker and other tasks leave (``SCHED_IDLE``; else nice 19).

    An idle-priority process gives way the moment any other wakes up, where a nice
    one may finish its time slice first: each such wait is a few milliseconds that
    every hop of another task's turn (worker, Temporal, worker) would pay.
    """
    global _niced
    _niced = True
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        with contextlib.suppress(OSError):
            os.nice(NICE)


def _become(ids: tuple[int, int] | None) -> None:
    """Run as ``ids`` (uid, gid; None: as now), with no supplementary groups."""
    if ids is None:
        return
    uid, gid = ids
    if os.geteuid() != 0:
        if (uid, gid) != (os.geteuid(), os.getegid()):
            raise PermissionError(
                f"cannot run as uid {uid}, gid {gid}: only a worker running as root can "
                "switch users"
            )
        return
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # A change of user clears the parent-death signal: set it again.
    if not _die_with_server():
        raise ProcessLookupError("the file tools' process server stopped")
