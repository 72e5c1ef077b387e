"""A stdio MCP server: a process of the worker, and the streams its session reads and writes.

The SDK's own ``stdio_client`` starts a server as the worker's user in the worker's
directory and buffers a line of any length; here a hostile server is one the worker
must outlast. So the process starts as the tool user (never root), in its own process
group, with the task's workspace as working directory taken from the held descriptor
(``fchdir`` in the child, never a path resolved again), dying with the worker; a
message longer than ``MAX_MESSAGE_BYTES`` ends the session; a line that is not
JSON-RPC is skipped; only the last ``STDERR_KEEP_BYTES`` of stderr are kept. The
server's own requests (``ping``; sampling, elicitation and roots, which the worker
does not offer) are answered here, without waiting: a server that sends requests and
never reads the answers cannot block the channel, and costs at most
``MAX_UNSENT_ANSWERS`` bytes (later requests go unanswered).

A request sent under ``watching(watch)`` is followed: the channel notes its id, tells
the watch whenever the server says anything while it is open, and whether the server
answered it (after a cancel, an answer means the server stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from types import TracebackType

import anyio
import mcp_types as types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage

from durable_subagents.tools._preexec import child_setup
from durable_subagents.wording._terminal import UNSAFE

__all__ = [
    "MAX_MESSAGE_BYTES",
    "CallWatch",
    "StdioChannel",
    "watching",
]

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 4 << 20
"""A line (one JSON-RPC message) longer than this ends the server's session."""
STDERR_KEEP_BYTES = 16 << 10
"""The tail of a server's stderr kept to explain why it stopped."""
STDERR_LINES = 20
"""Lines of that tail shown in an error."""
_STDERR_LINE_CHARS = 300
MAX_UNSENT_ANSWERS = 64 << 10
"""Bytes waiting to reach a server's input past which its requests are not answered."""
_READ_CHUNK = 64 << 10
_UNSAFE = re.compile(UNSAFE)
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)?")
"""Terminal escape sequences (CSI, OSC, two-character ones), removed whole."""

_CALL: ContextVar[CallWatch | None] = ContextVar("durable_subagents_mcp_call", default=None)


EXIT_SEEN = 0.5
"""Seconds a server whose input broke is given to be seen exiting (its status is the reason)."""


class CallWatch:
    """One request to a stdio server, followed by the channel that carries it.

    Attributes:
        request_id: The call's JSON-RPC id, once handed to the channel.
        written: The request reached the server's input pipe (before that, a server
            that died cannot have seen it).
        answered: Set when the server answered it (a result or an error).
    """

    def __init__(self, on_message: Callable[[], None] | None = None) -> None:
        self.request_id: types.RequestId | None = None
        self.written = False
        self.answered = asyncio.Event()
        self._on_message = on_message

    def touch(self) -> None:
        """The server said something while the call was open."""
        if self._on_message is None:
            return
        try:
            self._on_message()
        except Exception:
            log.exception("an MCP call's progress callback failed")


@contextlib.contextmanager
def watching(watch: CallWatch) -> Iterator[None]:
    """Have the request sent next in this context followed by ``watch``."""
    token = _CALL.set(watch)
    try:
        yield
    finally:
        _CALL.reset(token)


class _WriteStream:
    """The session's write stream: notes calls as they go out, then hands them on."""

    def __init__(self, inner: anyio.abc.ObjectSendStream[SessionMessage], channel: StdioChannel):
        self._inner = inner
        self._channel = channel

    async def send(self, item: SessionMessage, /) -> None:
        self._channel._sending(item.message)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WriteStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class StdioChannel:
    """A stdio server's process and the two streams a ``ClientSession`` runs on.

    Attributes:
        name: The server's name (for messages).
        process: The server's process (its pid is also its process group's id).
        read_stream: What the server sent, one JSON-RPC message at a time.
        write_stream: What the session sends to the server.
        failure: Why the channel ended, when the worker ended it (None otherwise).
    """

    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self.process = process
        self.failure: str | None = None
        self._stderr = bytearray()
        self._stderr_cut = False
        self._watches: dict[types.RequestId, CallWatch] = {}
        self._malformed = 0
        self._unanswered = 0
        self._to_session, self.read_stream = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        send, self._from_session = anyio.create_memory_object_stream[SessionMessage](0)
        self.write_stream = _WriteStream(send, self)
        self._tasks = [
            asyncio.create_task(self._read(), name=f"mcp {name} stdout"),
            asyncio.create_task(self._write(), name=f"mcp {name} stdin"),
            asyncio.create_task(self._read_stderr(), name=f"mcp {name} stderr"),
        ]

    @classmethod
    async def start(
        cls,
        name: str,
        command: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        workspace_fd: int,
        run_as: tuple[int, int] | None,
    ) -> StdioChannel:
        """Start the server's process in the workspace, as ``run_as``.

        Raises:
            OSError: The program could not be started (missing, not executable).
            subprocess.SubprocessError: The child could not be set up (the workspace
                could not be entered, the user not switched).
        """
        preexec = child_setup(os.getpid(), [lambda: os.fchdir(workspace_fd)], run_as)
        process = await asyncio.create_subprocess_exec(
            command,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            preexec_fn=preexec,
            start_new_session=True,
            close_fds=True,
        )
        return cls(name, process)

    # ------------------------------------------------------------ state

    @property
    def alive(self) -> bool:
        """The process runs and the channel carries messages."""
        return (
            self.failure is None
            and self.process.returncode is None
            and not self._tasks[0].done()
            and not self._tasks[1].done()
        )

    def forget(self, watch: CallWatch) -> None:
        """Stop following ``watch``'s request (it returned, failed or was given up)."""
        if watch.request_id is not None:
            self._watches.pop(coerce_request_id(watch.request_id), None)

    def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr, control characters removed."""
        text = self._stderr.decode("utf-8", "replace")
        lines = text.splitlines()
        if self._stderr_cut and lines:
            lines = lines[1:]  # the first one is cut somewhere in its middle
        shown = []
        for line in lines[-STDERR_LINES:]:
            line = _UNSAFE.sub("", _ESCAPES.sub("", line)).rstrip()
            if len(line) > _STDERR_LINE_CHARS:
                line = line[:_STDERR_LINE_CHARS] + " [...]"
            shown.append(line)
        return "\n".join(shown).strip("\n")

    async def settled(self, timeout: float = 1.0) -> None:
        """Wait (at most ``timeout`` s) for the process to exit and its stderr to end."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._exited(), timeout)

    async def _exited(self) -> None:
        # Process.wait() returns once the pipes closed too: stderr is read to its end
        await self.process.wait()
        await asyncio.shield(self._tasks[2])

    def why_ended(self) -> str:
        """Why the channel ended: the worker's reason, or how the process exited."""
        if self.failure is not None:
            return self.failure
        code = self.process.returncode
        if code is None:
            return "it closed its output"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"it was killed by {signal.Signals(-code).name}"
        return f"it exited with status {code}"

    # ------------------------------------------------------------ ending

    def end(self, reason: str) -> None:
        """End the channel now: kill the process group and close the session's stream."""
        if self.failure is None:
            self.failure = reason
        self.kill()
        self._to_session.close()

    def kill(self) -> None:
        """SIGKILL the server's process group (its children too, unless they left it)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    async def stop(self, grace: float) -> None:
        """Ask the server to exit (its input closes), kill it after ``grace`` seconds."""
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.process.wait(), grace)
        self.kill()  # the group: children it left behind go too
        await self.settled(1.0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._to_session.close()
        # a pipe whose reading was paused (a full buffer) never sees its end: closed
        # here, or the transport outlives the loop (the SDK's stdio client does the same)
        transport = getattr(self.process, "_transport", None)
        if transport is not None:
            transport.close()

    # ------------------------------------------------------------ traffic

    def _sending(self, message: types.JSONRPCMessage) -> None:
        if isinstance(message, types.JSONRPCRequest):
            watch = _CALL.get()
            if watch is not None and watch.request_id is None:
                watch.request_id = message.id
                self._watches[coerce_request_id(message.id)] = watch

    def _written(self, message: types.JSONRPCMessage) -> None:
        if isinstance(message, types.JSONRPCRequest):
            watch = self._watches.get(coerce_request_id(message.id))
            if watch is not None:
                watch.written = True

    def _received(self, message: types.JSONRPCMessage) -> bool:
        """Note what ``message`` tells about open calls; False: drop it."""
        for open_call in list(self._watches.values()):
            open_call.touch()
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            if message.id is not None:
                watch = self._watches.get(coerce_request_id(message.id))
                if watch is not None:
                    watch.answered.set()
        elif isinstance(message, types.JSONRPCRequest):
            self._answer(message)
            return False
        return True

    def _answer(self, request: types.JSONRPCRequest) -> None:
        """Answer a request of the server's at once: ``ping``, or "not offered"."""
        stdin = self.process.stdin
        if stdin is None or stdin.is_closing():
            return
        if stdin.transport.get_write_buffer_size() > MAX_UNSENT_ANSWERS:
            self._unanswered += 1
            if self._unanswered == 1:
                log.warning(
                    "MCP server %r sends requests and does not read the answers; "
                    "its requests go unanswered while %d KiB wait",
                    self.name,
                    MAX_UNSENT_ANSWERS >> 10,
                )
            return
        answer: types.JSONRPCResponse | types.JSONRPCError
        if request.method == "ping":
            answer = types.JSONRPCResponse(jsonrpc="2.0", id=request.id, result={})
        else:
            error = types.ErrorData(code=types.METHOD_NOT_FOUND, message="Method not found")
            answer = types.JSONRPCError(jsonrpc="2.0", id=request.id, error=error)
        stdin.write(answer.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")

    async def _deliver(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError:
            self._malformed += 1
            if self._malformed == 1:
                log.warning(
                    "MCP server %r wrote a line that is not JSON-RPC on its stdout; "
                    "such lines are skipped",
                    self.name,
                )
            return
        if self._received(message):
            await self._to_session.send(SessionMessage(message))

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        pending = bytearray()
        try:
            while chunk := await stdout.read(_READ_CHUNK):
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    if len(pending) + end - start > MAX_MESSAGE_BYTES:
                        self._too_long()
                        return
                    pending += chunk[start:end]
                    line = bytes(pending)
                    pending.clear()
                    start = end + 1
                    await self._deliver(line)
                pending += chunk[start:]
                if len(pending) > MAX_MESSAGE_BYTES:
                    self._too_long()
                    return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is gone
        except (OSError, ValueError) as err:
            self.end(f"its output could not be read ({err})")
        finally:
            self._to_session.close()

    def _too_long(self) -> None:
        self.end(f"it sent a message longer than {MAX_MESSAGE_BYTES >> 20} MiB")

    async def _write(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            async with self._from_session:
                async for item in self._from_session:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode() + b"\n")
                    await stdin.drain()
                    if stdin.is_closing():  # the write failed; drain may not say so yet
                        raise BrokenPipeError
                    self._written(item.message)
        except (OSError, RuntimeError):
            if self.alive:
                # A server that exited breaks the pipe before its exit is seen: a moment
                # lets its status, rather than the broken pipe, say why it ended.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self.process.wait()), EXIT_SEEN)
            if self.alive:
                self.end("it stopped reading its input")
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()

    async def _read_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        with contextlib.suppress(OSError, ValueError):
            while chunk := await stderr.read(_READ_CHUNK):
                self._stderr += chunk
                if len(self._stderr) > STDERR_KEEP_BYTES:
                    del self._stderr[: len(self._stderr) - STDERR_KEEP_BYTES]
                    self._stderr_cut = True
