"""The file tools run in processes of their own: the worker's side.

The file tools parse, walk and match in Python. Run in the worker's interpreter, their
CPU time and the GIL would be every task's: eight searches through hostile ignore
files slowed another task's three-step run from 0.44 s to 8.3 s. So a ``forked``
tool's call runs in a child of a fork server (``_forkserver``) that each worker process
starts once. A child serves one user and one set of limits: its first call takes a fresh
child (the memory, file-size and open-file limits, and the user if the context names
one, are set then, for good); later calls with the same user and limits, of any task,
reuse it while it is idle, one call at a time, so a read costs no fork. A fresh child
costs about 4 ms of CPU (the pages it writes are copied): kept per task, 1,000 tasks in
flight forked at nearly every turn, or would hold 2.7 MB each. Sharing one across tasks
gives a call no more than it had: the child runs only these tools' own code, each call
confines itself to its own task's workspace, and the user, set once, is the boundary the
kernel keeps. At most ``TASK_PARALLEL`` calls of a task run at once (half the worker's
cores), so a task's searches never take the whole machine. Each call gets its own
CPU-time limit, and the worker's priority for its first 50 ms of CPU, unless another
call of its task is running (a task's parallel calls buy it no more of the CPU); past
that the child runs at idle priority, on the CPU the worker and other tasks leave. A
child that went to idle priority, grew large, failed, or sat idle for ``IDLE_SECONDS``
is let go.

- The time limit and a cancel kill the child, through the server that reaps it, and
  wait until it is gone.
- A child that ends without an answer (its CPU or memory limit, a crash) becomes a
  ``ToolError`` that says which.
- Nothing outlives the worker: the server kills its children and exits when its
  control socket closes (the worker stopped or died), and each child dies with the
  server. The worker reads answers as JSON, never pickle.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_subagents.tools._decorator import Tool, ToolContext, ToolError
from durable_subagents.tools._fork_calls import (
    died,
    exchange,
    parse_answer,
    plan,
    settle,
    unpack,
)
from durable_subagents.tools._forkserver import (
    BOOT,
    EXITED,
    FULL_PRIORITY_CPU,
    HELLO,
    KILL,
    MESSAGE,
    SPARE,
    TAKEN,
)

__all__ = [
    "ForkServer",
    "ServerGone",
    "fork_server",
    "forked",
    "prestart_fork_server",
    "run_forked",
    "running_calls",
    "stop_fork_server",
]

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0
"""Seconds the server may take to start (a fresh interpreter importing the tools)."""
REAP_WAIT = 5.0
"""Seconds to wait for a killed child to be reaped before giving up on it."""
IDLE_SECONDS = 30.0
"""How long an idle child is kept for a next call."""
MAX_IDLE = 32
"""Idle children kept in all; past it the longest idle goes. As many calls as run at
once need one each, however many tasks are in flight."""
TASK_PARALLEL = max(1, (os.cpu_count() or 1) // 2)
"""Calls of one task that run at once; the task's others wait their turn. So a task's
file tools use at most half the worker's cores, however many searches it asks for at
once: the other half stays free for the worker and the other tasks (as a process of
its own per task would on a two-core machine)."""
MAX_CALLS = 200
"""Calls one child serves before it is let go."""
_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
"""Worker variables the server keeps (locale and paths); no credentials reach it."""


def forked(t: Tool) -> Tool:
    """Mark ``t`` (a sync tool defined at a module's top level) to run in a child process."""
    t.in_process = run_forked
    return t


class ServerGone(RuntimeError):
    """The fork server stopped while a call needed it."""


@dataclass
class _Call:
    task_id: str
    loop: asyncio.AbstractEventLoop
    exited: asyncio.Future[int]


Key = tuple[Any, Any]
"""Whose calls a child serves: the user and the limits it set once, for good."""


@dataclass(eq=False)
class _Child:
    """A child of the server, from the worker's side."""

    pid: int
    sock: socket.socket
    key: Key | None = None
    """Whose calls it serves, once taken."""
    call: _Call | None = None
    """The call it runs now."""
    status: int | None = None
    """Its wait status, if it was reaped while taken and not running a call yet."""
    calls: int = 0
    idle_since: float = 0.0


class ForkServer:
    """The worker's handle on its fork server: start it, run calls in it, stop it.

    One per worker process (see ``fork_server``). Creating one blocks until the server
    has greeted (a fresh interpreter: a few hundred milliseconds); calls are async.
    """

    def __init__(self) -> None:
        control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        package = Path(__file__).resolve().parents[1]
        stubs = {"durable_subagents": str(package)}
        search = [p or os.getcwd() for p in sys.path]  # "" is the worker's directory
        argv = [sys.executable, "-I", "-c", BOOT, str(theirs.fileno())]
        argv += [json.dumps(search), json.dumps(stubs)]
        # The worker's own binary, through its /proc link: a path the worker's user may
        # not walk (an interpreter under root's home, the user switched by setpriv)
        # still started the worker, and starts the server.
        exe = "/proc/self/exe" if os.path.exists("/proc/self/exe") else sys.executable
        try:
            self.process = subprocess.Popen(
                argv,
                executable=exe,
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
        self._children: dict[int, _Child] = {}
        """Every child the server told of and has not reported reaped."""
        self._spares: collections.deque[_Child] = collections.deque()
        self._idle: dict[Key, list[_Child]] = {}
        self._waiting: collections.deque[
            tuple[asyncio.AbstractEventLoop, asyncio.Future[_Child]]
        ] = collections.deque()
        self._closed = False
        self._slots: dict[tuple[asyncio.AbstractEventLoop, str], tuple[asyncio.Semaphore, int]] = {}
        """Each task's turns to run (``TASK_PARALLEL`` at once), and how many hold or want one."""
        try:
            control.settimeout(START_TIMEOUT)
            hello = control.recv(MESSAGE.size)
        except OSError as err:
            self._abandon()
            raise ServerGone(f"the file tools' process server did not start: {err}") from None
        if len(hello) != MESSAGE.size or hello[:1] != HELLO:
            self._abandon()
            raise ServerGone(
                "the file tools' process server did not start (exit status "
                f"{self.process.poll()}; its error is in the worker's log)"
            )
        control.settimeout(1.0)  # the reader wakes to let idle children go
        self.pid = self.process.pid
        self._reader = threading.Thread(target=self._read, name="fork-server", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        """Whether the server still takes calls."""
        return not self._closed and self.process.poll() is None

    @property
    def ready(self) -> int:
        """Spare children waiting for a task (one, once the server has forked it)."""
        with self._lock:
            return len(self._spares)

    def idle(self) -> list[int]:
        """Pids of the children kept for a next call."""
        with self._lock:
            return [c.pid for children in self._idle.values() for c in children]

    @property
    def held(self) -> set[int]:
        """Descriptors of the children's sockets the worker holds: spares, idle, running."""
        with self._lock:
            children = [
                *self._spares,
                *(c for kept in self._idle.values() for c in kept),
                *(c for c in self._children.values() if c.call is not None),
            ]
            return {c.sock.fileno() for c in children}

    def running(self, task_id: str | None = None) -> list[int]:
        """Pids of the children running calls now, for one task or for all."""
        with self._lock:
            return [
                c.pid
                for c in self._children.values()
                if c.call is not None and task_id in (None, c.call.task_id)
            ]

    async def call(self, tool: Tool, ctx: ToolContext, kwargs: dict[str, Any]) -> str:
        """Run ``tool`` in a child with ``ctx`` and ``kwargs``; its text, or ``ToolError``.

        The call waits while ``TASK_PARALLEL`` calls of its task run (that wait counts
        in its time limit, as it would in one process per task).

        Raises:
            ToolError: The tool refused, or its process ended without an answer.
            ServerGone: The server stopped meanwhile (the worker is shutting down).
        """
        ctx._waiting = True
        async with self._task_slot(ctx.task_id):
            ctx._waiting = False
            return await self._call(tool, ctx, kwargs)

    @contextlib.asynccontextmanager
    async def _task_slot(self, task_id: str) -> AsyncIterator[None]:
        key = (asyncio.get_running_loop(), task_id)
        turns, users = self._slots.get(key) or (asyncio.Semaphore(TASK_PARALLEL), 0)
        self._slots[key] = (turns, users + 1)
        try:
            async with turns:
                yield
        finally:
            turns, users = self._slots[key]
            if users == 1:
                del self._slots[key]
            else:
                self._slots[key] = (turns, users - 1)

    async def _call(self, tool: Tool, ctx: ToolContext, kwargs: dict[str, Any]) -> str:
        loop = asyncio.get_running_loop()
        fixed, cpu = plan(ctx)
        key: Key = (ctx.run_as, tuple(fixed))
        ref = (tool.fn.__module__, tool.fn.__name__)
        child = await self._take(loop, key)
        call = _Call(ctx.task_id, loop, loop.create_future())
        call.exited.add_done_callback(lambda f: f.cancelled() or f.exception())
        with self._lock:
            # One call of a task at a time runs at the worker's priority: the task's
            # parallel calls share that, so their number buys no more of the CPU.
            busy = any(
                c.call is not None and c.call.task_id == ctx.task_id
                for c in self._children.values()
            )
            child.call = call
            child.calls += 1
            status, child.status = child.status, None
        if status is not None:
            call.exited.set_result(status)
        full = 0.0 if busy else FULL_PRIORITY_CPU
        request = pickle.dumps((ref, ctx, kwargs, (fixed, cpu, full)), pickle.HIGHEST_PROTOCOL)
        try:
            fds = () if ctx.workspace_fd is None else (ctx.workspace_fd,)
            raw = await exchange(loop, child.sock, request, fds)
        except asyncio.CancelledError:
            await asyncio.shield(self._kill(child))
            raise
        answer = parse_answer(raw)
        if answer is None:
            # It died, or is still writing an answer over the cap: make sure, then ask why.
            await self._kill(child)
            if call.exited.done() and isinstance(call.exited.exception(), ServerGone):
                raise ServerGone("the file tools' process server stopped")
            raise ToolError(died(tool.name, call.exited, ctx))
        self._release(child, reuse=not answer.get("retire") and child.calls < MAX_CALLS)
        return unpack(tool.name, answer, ctx)

    async def _take(self, loop: asyncio.AbstractEventLoop, key: Key) -> _Child:
        """An idle child with these limits, else a spare (waiting for one if none is ready)."""
        with self._lock:
            if self._closed:
                raise ServerGone("the file tools' process server stopped")
            idle = self._idle.get(key)
            if idle:
                child = idle.pop()
                if not idle:
                    del self._idle[key]
                return child
            if self._spares:
                child = self._spares.popleft()
                waiter = None
            else:
                waiter = loop.create_future()
                self._waiting.append((loop, waiter))
        if waiter is not None:
            child = await waiter
        child.key = key
        child.sock.setblocking(False)
        with contextlib.suppress(OSError):  # gone: the exchange finds out
            self._send(TAKEN, child.pid)
        return child

    def _release(self, child: _Child, *, reuse: bool) -> None:
        """After a call: keep the child for a next one with its limits, or let it go."""
        with self._lock:
            child.call = None
            if reuse and not self._closed and child.pid in self._children:
                assert child.key is not None
                child.idle_since = time.monotonic()
                self._idle.setdefault(child.key, []).append(child)
                reuse = True
            else:
                reuse = False
        if not reuse:
            child.sock.close()  # it reads the end of its stream and exits
        self._prune()

    def _prune(self) -> None:
        """Let go the children idle too long, and the longest idle past ``MAX_IDLE``."""
        now = time.monotonic()
        with self._lock:
            idle = sorted(
                (c for children in self._idle.values() for c in children),
                key=lambda c: c.idle_since,
            )
            stale = [c for c in idle if now - c.idle_since > IDLE_SECONDS]
            stale += [c for c in idle[: max(0, len(idle) - MAX_IDLE)] if c not in stale]
            for child in stale:
                assert child.key is not None
                self._idle[child.key].remove(child)
                if not self._idle[child.key]:
                    del self._idle[child.key]
        for child in stale:
            child.sock.close()

    def _offer(self, child: _Child) -> None:
        """Give a spare to the first caller still waiting, or keep it for the next."""
        with self._lock:
            while self._waiting:
                loop, waiter = self._waiting.popleft()
                with contextlib.suppress(RuntimeError):  # its loop has closed
                    loop.call_soon_threadsafe(self._hand, waiter, child)
                    return
            if self._closed:
                child.sock.close()
            else:
                self._spares.append(child)

    def _hand(self, waiter: asyncio.Future[_Child], child: _Child) -> None:
        if waiter.done():  # cancelled meanwhile
            self._offer(child)
        else:
            waiter.set_result(child)

    async def _kill(self, child: _Child) -> None:
        """Kill a child that runs a call, and wait until it is reaped."""
        with contextlib.suppress(OSError):
            self._send(KILL, child.pid)
        assert child.call is not None
        try:
            await asyncio.wait_for(asyncio.shield(child.call.exited), REAP_WAIT)
        except TimeoutError:
            log.warning("a file tool's process (%d) was not reaped in time", child.pid)
        except ServerGone:
            pass  # it killed its children as it stopped
        finally:
            with self._lock:
                child.call = None
            child.sock.close()

    def _send(self, kind: bytes, pid: int) -> None:
        with self._send_lock:
            self._control.send(MESSAGE.pack(kind, pid, 0))

    def _read(self) -> None:
        """The control socket's reader: spares forked, children reaped, the server gone."""
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self._control, MESSAGE.size, 1)
            except TimeoutError:
                self._prune()
                continue
            except OSError:
                data, fds = b"", []
            if len(data) != MESSAGE.size:
                for fd in fds:
                    os.close(fd)
                self._gone()
                return
            kind, pid, value = MESSAGE.unpack(data)
            if kind == SPARE and fds:
                child = _Child(pid, socket.socket(fileno=fds[0]))
                with self._lock:
                    self._children[pid] = child
                self._offer(child)
            elif kind == EXITED:
                self._exited(pid, value)

    def _exited(self, pid: int, status: int) -> None:
        with self._lock:
            child = self._children.pop(pid, None)
            if child is None:
                return
            call = child.call
            waiting = child in self._spares
            if waiting:
                self._spares.remove(child)
            idle = self._idle.get(child.key) if child.key is not None else None
            if idle is not None and child in idle:
                waiting = True
                idle.remove(child)
                if not idle:
                    del self._idle[child.key]  # type: ignore[arg-type]
            elif call is None:
                child.status = status  # taken: the call about to start finds it
        if call is not None:
            settle(call.loop, call.exited, status)
        elif waiting:
            child.sock.close()

    def _gone(self) -> None:
        with self._lock:
            self._closed = True
            children, self._children = list(self._children.values()), {}
            waiting, self._waiting = list(self._waiting), collections.deque()
            self._spares.clear()
            self._idle.clear()
        gone = ServerGone("the file tools' process server stopped")
        for child in children:
            if child.call is not None:
                settle(child.call.loop, child.call.exited, gone)
            else:
                child.sock.close()
        for loop, waiter in waiting:
            settle(loop, waiter, gone)

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
    """Start this process's fork server in the background: the first call need not wait.

    Only on Linux: elsewhere the file tools run in threads (see ``Tool.run``).
    """
    if not sys.platform.startswith("linux"):
        return

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
        if ctx._waiting:
            raise ToolError(
                f"{tool.name} did not start within its {ctx.time_limit:g} s time limit: this "
                f"task's other file-tool calls ran first ({TASK_PARALLEL} at a time); ask for "
                "fewer at once, or narrower ones"
            ) from None
        raise ToolError(f"{tool.name} {ctx._stopped_message()}") from None
    except ServerGone as err:
        raise ToolError(f"{tool.name} failed: {err}; try again") from None
