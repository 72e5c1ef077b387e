"""Run the file tools in processes of their own, forked from a small server.

The file tools parse, walk and match in Python. Run in the worker's interpreter, their
CPU time and the GIL would be every task's: eight searches through hostile ignore
files slowed another task's three-step run from under a second to eight. So each call
runs in a child process. A fork server, started once per worker process, forks one
child per call; the child applies the call's limits (CPU time, memory, file size, open
files), a low priority and, when the context names them, the call's user and group,
runs the tool function and writes its answer back. The worker only waits on a socket.

- The server is a fresh interpreter holding only the tool modules, never a fork of the
  worker (whose other threads belong to Temporal's runtime and the event loop).
- Cancellation and the time limit kill the child and wait until it is gone. The server,
  which reaps its children, does the killing, so a pid can never be reused under it.
- A child that ends without an answer (its CPU or memory limit, a crash) becomes a
  ``ToolError`` that says which.
- Nothing outlives the worker: the server kills its children and exits when its
  control socket closes (the worker stopped or died), and each child dies with the
  server (``PR_SET_PDEATHSIG``).
- Requests reach the server only over a socket pair the worker made, never a path or
  an abstract socket that another process (a tool's command) could connect to; the
  worker reads answers as JSON, never as pickle.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import importlib
import itertools
import json
import logging
import math
import os
import pickle
import resource
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_subagents.activities.tools._decorator import Tool, ToolContext, ToolError, _as_text
from durable_subagents.agents._spec import DEFAULT_LIMITS, ToolLimits

__all__ = [
    "NICE",
    "ForkServer",
    "fork_server",
    "forked",
    "prestart_fork_server",
    "running_calls",
    "stop_fork_server",
]

log = logging.getLogger(__name__)

NICE = 10
"""Niceness of a file tool's process once it has used ``FULL_PRIORITY_CPU``: the
worker's event loop, workflow tasks and the other tasks' model turns come first."""
FULL_PRIORITY_CPU = 0.05
"""CPU seconds a call runs at the worker's own priority. A read takes a millisecond or
two and answers as fast as it would in the worker; a heavy search yields after this."""
START_TIMEOUT = 60.0
"""Seconds the server may take to start (a fresh interpreter importing the tools)."""
REAP_WAIT = 5.0
"""Seconds to wait for a killed child to be reaped before giving up on it."""
MAX_ANSWER_BYTES = 64 << 20
"""An answer larger than this is refused (the tools' own caps keep theirs far below)."""

_MESSAGE = struct.Struct("!cQq")
"""A control message: kind, call id, and a pid or a wait status."""
_RUN, _KILL, _STARTED, _EXITED, _HELLO = b"R", b"K", b"S", b"X", b"H"
_PR_SET_PDEATHSIG = 1
_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
"""Worker variables the server keeps (locale and paths); no credentials reach it."""

_BOOT = """\
import json, sys, types
sys.path[:] = json.loads(sys.argv[2])
# The package's and the activities' __init__ re-export the client, the worker and
# temporalio's service stubs, which the tools never use: leaving them out halves the
# server's start time and memory, and every child's.
for name, path in json.loads(sys.argv[3]).items():
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
from durable_subagents.activities.tools._forkserver import serve
serve(int(sys.argv[1]))
"""


def forked(t: Tool) -> Tool:
    """Mark ``t`` (a sync tool defined at a module's top level) to run in a child process."""
    t.forked = True
    return t


# ---------------------------------------------------------------- the worker's side


class ServerGone(RuntimeError):
    """The fork server stopped while a call was under way."""


@dataclass
class _Call:
    task_id: str
    loop: asyncio.AbstractEventLoop
    exited: asyncio.Future[int]
    pid: int | None = None
    done: bool = False


class ForkServer:
    """The worker's handle on its fork server: start it, send it calls, stop it.

    One per worker process (see ``fork_server``). Blocking to create (it waits for the
    server's greeting); calls are async.
    """

    def __init__(self) -> None:
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        package = Path(__file__).resolve().parents[2]
        stubs = {
            "durable_subagents": str(package),
            "durable_subagents.activities": str(package / "activities"),
        }
        argv = [sys.executable, "-I", "-c", _BOOT, str(theirs.fileno())]
        search = [p or os.getcwd() for p in sys.path]  # "" is the worker's directory
        argv += [json.dumps(search), json.dumps(stubs)]
        try:
            self.process = subprocess.Popen(
                argv,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env={k: os.environ[k] for k in _ENV if k in os.environ},
                # Its own session: a Ctrl-C meant for the worker must not kill it
                # while the worker finishes its calls; it ends with the worker instead.
                start_new_session=True,
            )
        except BaseException:
            control.close()
            raise
        finally:
            theirs.close()
        self._control = control
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count(1)
        self._closed = False
        try:
            control.settimeout(START_TIMEOUT)
            hello = control.recv(_MESSAGE.size)
            control.settimeout(None)
        except OSError as err:
            self._abandon()
            raise ServerGone(f"the file tools' process server did not start: {err}") from None
        if not hello or hello[:1] != _HELLO:
            self._abandon()
            raise ServerGone(
                "the file tools' process server did not start (exit status "
                f"{self.process.poll()}; its error is in the worker's log)"
            )
        self.pid = self.process.pid
        self._reader = threading.Thread(target=self._read, name="fork-server", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        """Whether the server still takes calls."""
        return not self._closed and self.process.poll() is None

    def running(self, task_id: str | None = None) -> list[int]:
        """Pids of the children running now, for one task or for all."""
        with self._lock:
            return [
                c.pid
                for c in self._calls.values()
                if c.pid is not None and not c.done and task_id in (None, c.task_id)
            ]

    async def call(self, tool: Tool, ctx: ToolContext, kwargs: dict[str, Any]) -> str:
        """Run ``tool`` in a child with ``ctx`` and ``kwargs``; its text, or ``ToolError``.

        Raises:
            ToolError: The tool refused, or its process ended without an answer.
            ServerGone: The server stopped meanwhile (the worker is shutting down).
        """
        loop = asyncio.get_running_loop()
        ref = (tool.fn.__module__, tool.fn.__name__)
        request = pickle.dumps((ref, ctx, kwargs, _plan(ctx)), protocol=pickle.HIGHEST_PROTOCOL)
        call_id = next(self._ids)
        call = _Call(ctx.task_id, loop, loop.create_future())
        call.exited.add_done_callback(lambda f: f.cancelled() or f.exception())
        mine, theirs = socket.socketpair()
        try:
            try:
                self._start(call_id, call, theirs)
            finally:
                theirs.close()
            mine.setblocking(False)
            try:
                raw = await _exchange(loop, mine, request)
            except asyncio.CancelledError:
                await asyncio.shield(self._kill(call_id, call))
                raise
        finally:
            mine.close()
        answer = _parse(raw)
        if answer is None:
            # It died, or is still writing an answer over the cap: make sure, then ask why.
            with contextlib.suppress(OSError):
                self._send(_KILL, call_id, 0)
            status = await self._status(call_id, call)
            raise ToolError(_died(tool.name, status, ctx))
        return _unpack(tool.name, answer, ctx)

    def _start(self, call_id: int, call: _Call, sock: socket.socket) -> None:
        """Register the call and send the server its socket."""
        with self._lock:
            if self._closed:
                raise ServerGone("the file tools' process server stopped")
            self._calls[call_id] = call
        try:
            self._send(_RUN, call_id, 0, [sock.fileno()])
        except OSError as err:
            with self._lock:
                self._calls.pop(call_id, None)
            raise ServerGone(f"the file tools' process server stopped ({err})") from None

    async def _kill(self, call_id: int, call: _Call) -> None:
        with contextlib.suppress(OSError):
            self._send(_KILL, call_id, 0)
        with contextlib.suppress(ServerGone):  # it killed its children as it stopped
            await self._status(call_id, call)

    async def _status(self, call_id: int, call: _Call) -> int | None:
        """The child's wait status once it is reaped; None if that took too long.

        Raises:
            ServerGone: The server stopped (and killed the child) meanwhile.
        """
        try:
            return await asyncio.wait_for(asyncio.shield(call.exited), REAP_WAIT)
        except TimeoutError:
            log.warning("a file tool's process (call %d) was not reaped in time", call_id)
            return None

    def _send(self, kind: bytes, call_id: int, value: int, fds: list[int] | None = None) -> None:
        message = _MESSAGE.pack(kind, call_id, value)
        with self._send_lock:
            if fds:
                socket.send_fds(self._control, [message], fds)
            else:
                self._control.send(message)

    def _read(self) -> None:
        """The control socket's reader: children started and reaped, or the server gone."""
        while True:
            try:
                data = self._control.recv(_MESSAGE.size)
            except OSError:
                data = b""
            if len(data) != _MESSAGE.size:
                self._gone()
                return
            kind, call_id, value = _MESSAGE.unpack(data)
            with self._lock:
                call = self._calls.get(call_id)
                if call is None:
                    continue
                if kind == _STARTED:
                    call.pid = value
                    continue
                if kind != _EXITED:
                    continue
                call.done = True
                del self._calls[call_id]
            _settle(call, value)

    def _gone(self) -> None:
        with self._lock:
            self._closed = True
            calls, self._calls = list(self._calls.values()), {}
        for call in calls:
            call.done = True
            _settle(call, ServerGone("the file tools' process server stopped"))

    def close(self) -> None:
        """Stop the server: it kills its children, reaps them and exits."""
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_RDWR)  # wakes the reader thread
        try:
            self.process.wait(REAP_WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(REAP_WAIT)
        self._control.close()

    def _abandon(self) -> None:
        self._control.close()
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()


def _settle(call: _Call, outcome: int | Exception) -> None:
    def settle() -> None:
        if call.exited.done():
            return
        if isinstance(outcome, Exception):
            call.exited.set_exception(outcome)
        else:
            call.exited.set_result(outcome)

    with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody waits
        call.loop.call_soon_threadsafe(settle)


async def _exchange(loop: asyncio.AbstractEventLoop, sock: socket.socket, request: bytes) -> bytes:
    """Send the request, then read the answer until the child closes its end."""
    try:
        await loop.sock_sendall(sock, request)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        return b""  # the child died before reading it all: its exit status says why
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = await loop.sock_recv(sock, 1 << 16)
        except OSError:
            return b""
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            return b""
        chunks.append(chunk)


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(raw)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _unpack(name: str, answer: dict[str, Any], ctx: ToolContext) -> str:
    """The tool's text from a child's answer, or the ``ToolError`` it stands for."""
    if "ok" in answer:
        return str(answer["ok"])
    if "tool_error" in answer:
        message = str(answer["tool_error"])
        if answer.get("stopped"):  # its own check saw the deadline first
            ctx._stop.set()
            message = f"{name} {message}"
    elif "memory" in answer:
        message = (
            f"{name} ran out of its {_limits(ctx).memory_mb} MiB memory limit and was "
            "stopped; narrow the path or pattern"
        )
    elif "setup" in answer:
        message = f"{name} could not start: {answer['setup']}"
    else:
        # The tool's own bug, as the activity reports one raised in a thread.
        crash = answer.get("crash", {})
        log.error("tool %s raised in its process:\n%s", name, crash.get("traceback", ""))
        message = f"{name} failed: {crash.get('type', 'Error')}: {crash.get('message', '')}"
    raise ToolError(message)


def _died(name: str, status: int | None, ctx: ToolContext) -> str:
    """What the model reads when a child ended without an answer."""
    if status is not None and os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number == signal.SIGXCPU:
            return (
                f"{name} ran over its {_cpu_seconds(ctx)} s CPU-time limit and was stopped; "
                "narrow the path or pattern"
            )
        how = f"was killed by {signal.Signals(number).name}"
        if number == signal.SIGKILL:
            how += " (out of memory, or over its CPU-time limit)"
    elif status is not None and os.WIFEXITED(status):
        how = f"exited with status {os.WEXITSTATUS(status)}"
    else:
        how = "ended"
    log.warning("tool %s: its process %s without an answer", name, how)
    return f"{name} failed: its process {how} before it answered; the call did not complete"


def _plan(ctx: ToolContext) -> list[tuple[int, int, int]]:
    """The rlimits of a call's process, worked out in the worker, where that is cheap.

    None is above a hard limit the worker itself runs under.
    """
    limits = _limits(ctx)
    cpu = _cpu_seconds(ctx)
    wanted = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at the soft limit, SIGKILL after
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if limits.memory_mb:
        wanted.append((resource.RLIMIT_DATA, limits.memory_mb << 20, limits.memory_mb << 20))
    if limits.file_size_mb:
        size = limits.file_size_mb << 20
        wanted.append((resource.RLIMIT_FSIZE, size, size))
    if limits.open_files:
        wanted.append((resource.RLIMIT_NOFILE, limits.open_files, limits.open_files))
    plan = []
    for which, soft, hard in wanted:
        _, current = resource.getrlimit(which)
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        plan.append((which, soft, hard))
    return plan


def _limits(ctx: ToolContext) -> ToolLimits:
    return ctx.limits.filled_from(DEFAULT_LIMITS)


def _cpu_seconds(ctx: ToolContext) -> int:
    """A call's CPU-time limit: its limits' ``cpu_seconds``, at most its time limit."""
    cpu = _limits(ctx).cpu_seconds or DEFAULT_LIMITS.cpu_seconds or 1
    return max(1, min(cpu, math.ceil(ctx.time_limit)))


_server: ForkServer | None = None
_server_lock = threading.Lock()


def fork_server() -> ForkServer:
    """This process's fork server, started on first use (or again if it stopped)."""
    global _server
    with _server_lock:
        if _server is None or not _server.alive:
            if _server is not None:
                _server.close()
            _server = ForkServer()
        return _server


def prestart_fork_server() -> None:
    """Start this process's fork server in the background: the first call need not wait."""

    def start() -> None:
        try:
            fork_server()
        except Exception:
            log.exception("the file tools' process server did not start")

    threading.Thread(target=start, name="fork-server-start", daemon=True).start()


def stop_fork_server() -> None:
    """Stop this process's fork server, if it runs (it starts again when next needed)."""
    global _server
    with _server_lock:
        server, _server = _server, None
    if server is not None:
        server.close()


def running_calls(task_id: str | None = None) -> list[int]:
    """Pids of the file-tool processes running now, for ``task_id`` or for every task."""
    server = _server
    return server.running(task_id) if server is not None else []


async def run_forked(tool: Tool, ctx: ToolContext, kwargs: dict[str, Any]) -> str:
    """Run a ``forked`` tool's call in a child process, within the call's time limit."""
    server = _server if _server is not None and _server.alive else None
    if server is None:
        server = await asyncio.to_thread(fork_server)
    ctx._deadline = time.monotonic() + ctx.time_limit
    try:
        async with asyncio.timeout(ctx.time_limit):
            return await server.call(tool, ctx, kwargs)
    except TimeoutError:
        ctx._stop.set()
        raise ToolError(f"{tool.name} {ctx._stopped_message()}") from None
    except ServerGone as err:
        raise ToolError(f"{tool.name} failed: {err}; try again") from None


# ---------------------------------------------------------------- the server's side


def serve(fd: int) -> None:
    """The fork server's loop: hand each call to a child, kill on request, reap, report."""
    control = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    importlib.import_module("durable_subagents.activities.tools._files")
    _warm_up()
    gc.collect()
    gc.freeze()  # the children share these pages instead of copying them at a collection
    server = _Server(control)
    server.fork_spare()
    control.send(_MESSAGE.pack(_HELLO, 0, os.getpid()))
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj is not control:
                    with contextlib.suppress(OSError):
                        while os.read(wake_r, 512):
                            pass
                elif not server.receive():
                    return  # the worker closed its end, or died
            server.reap()
            if server.spare is None:
                server.fork_spare()
    finally:
        server.kill_all()


def _warm_up() -> None:
    """Run each file tool once in the server, before any child is forked.

    What a first call builds lazily (compiled patterns, caches, imports inside
    functions) every child then inherits built: a fresh process's first listing took
    3.4 ms, its second 1.4.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="subagents-warm-up-") as tmp:
        root = Path(tmp)
        (root / ".gitignore").write_text("*.log\nbuild/\n!keep.log\n")
        (root / "a.txt").write_text("one\ntwo\n")
        ctx = pickle.loads(pickle.dumps(ToolContext(workspace=root, task_id="warm-up")))
        files = importlib.import_module("durable_subagents.activities.tools._files")
        calls = [
            ("read_file", {"path": "a.txt"}),
            ("list_files", {}),
            ("grep", {"pattern": "one"}),
            ("write_file", {"path": "b/c.txt", "content": "x"}),
            ("edit_file", {"path": "b/c.txt", "old": "x", "new": "y"}),
        ]
        for name, kwargs in calls:
            with contextlib.suppress(Exception):
                json.dumps({"ok": _as_text(getattr(files, name).fn(ctx, **kwargs))})


class _Server:
    """The fork server's children: a spare, ready for the next call, and the callers'.

    A fork of the server costs a few milliseconds (copying its page tables); the spare
    takes that off the call's path: a call's socket goes to a child that already exists,
    and the next spare is forked while the call runs.
    """

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.pid = os.getpid()
        self.spare: tuple[int, socket.socket] | None = None
        self.pids: dict[int, int] = {}
        """Running calls' children by call id, until reaped."""
        self.calls: dict[int, int] = {}
        """The same, call id by pid."""

    def fork_spare(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                _spare(theirs.fileno(), self.pid)
            finally:
                os._exit(70)
        theirs.close()
        self.spare = (pid, mine)

    def receive(self) -> bool:
        """Act on one message from the worker; False once the worker is gone."""
        message, fds, _, _ = socket.recv_fds(self.control, _MESSAGE.size, 4)
        if len(message) != _MESSAGE.size:
            return False
        kind, call_id, _ = _MESSAGE.unpack(message)
        try:
            if kind == _RUN and fds:
                pid = self.hand_over(fds[0])
                self.pids[call_id], self.calls[pid] = pid, call_id
                self.control.send(_MESSAGE.pack(_STARTED, call_id, pid))
            elif kind == _KILL and call_id in self.pids:
                os.kill(self.pids[call_id], signal.SIGKILL)
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def hand_over(self, fd: int) -> int:
        """Give a call's socket to the spare (forking one if there is none); its pid."""
        while True:
            if self.spare is None:
                self.fork_spare()
            assert self.spare is not None
            (pid, sock), self.spare = self.spare, None
            try:
                socket.send_fds(sock, [b"C"], [fd])
                return pid
            except OSError:
                continue  # the spare died meanwhile (it is reaped as any child)
            finally:
                sock.close()

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.spare is not None and self.spare[0] == pid:
                self.spare[1].close()
                self.spare = None
            call_id = self.calls.pop(pid, None)
            if call_id is not None:
                del self.pids[call_id]
                self.control.send(_MESSAGE.pack(_EXITED, call_id, status))

    def kill_all(self) -> None:
        pids = list(self.calls)
        if self.spare is not None:
            pids.append(self.spare[0])
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _spare(fd: int, server: int) -> None:
    """A spare child: wait for a call's socket, then serve that call and exit."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    prctl = _load_prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server:
        return  # the server died before the death signal was set
    # Only its socket to the server stays: not the control socket, the selector or
    # the other children's sockets.
    os.closerange(3, fd)
    os.closerange(fd + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    with socket.socket(fileno=fd) as handover:
        _, fds, _, _ = socket.recv_fds(handover, 1, 1)
    if not fds:
        return  # the server stopped
    with socket.socket(fileno=fds[0]) as sock:
        chunks = []
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
        sock.sendall(json.dumps(_answer(b"".join(chunks))).encode())
    # Closed before exiting: the worker reads the end of the answer now, not after
    # the kernel has torn this process's memory down.
    os._exit(0)


def _answer(request: bytes) -> dict[str, Any]:
    (module, name), ctx, kwargs, plan = pickle.loads(request)
    try:
        _limit(plan)
        _become(ctx.uid, ctx.gid)
    except OSError as err:
        return {"setup": str(err)}
    try:
        tool = getattr(importlib.import_module(module), name)
        return {"ok": _as_text(tool.fn(ctx, **kwargs))}
    except ToolError as err:
        return {"tool_error": str(err), "stopped": ctx.stopped}
    except MemoryError:
        return {"memory": True}
    except Exception as err:
        return {
            "crash": {
                "type": type(err).__name__,
                "message": str(err),
                "traceback": traceback.format_exc(),
            }
        }


def _limit(plan: list[tuple[int, int, int]]) -> None:
    """Apply a call's limits (see ``_plan``), and lower its priority after a while."""
    for which, soft, hard in plan:
        resource.setrlimit(which, (soft, hard))
    signal.signal(signal.SIGPROF, _yield_priority)
    signal.setitimer(signal.ITIMER_PROF, FULL_PRIORITY_CPU)


def _yield_priority(signum: int, frame: object) -> None:
    with contextlib.suppress(OSError):
        os.nice(NICE)


def _become(uid: int | None, gid: int | None) -> None:
    """Run as ``uid``/``gid`` (None: as now), with no supplementary groups."""
    if uid is None and gid is None:
        return
    if os.geteuid() != 0:
        if uid not in (None, os.geteuid()) or gid not in (None, os.getegid()):
            raise PermissionError(
                f"cannot run as uid {uid}, gid {gid}: only a worker running as root can "
                "switch users"
            )
        return
    os.setgroups([])
    if gid is not None:
        os.setresgid(gid, gid, gid)
    if uid is not None:
        os.setresuid(uid, uid, uid)
