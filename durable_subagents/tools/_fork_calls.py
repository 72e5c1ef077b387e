"""What passes between the worker and a fork server's child for one call.

A request is a frame carrying the call and the limits the child applies (CPU time per
call; memory, file size and open files once per child). The answer is a frame of JSON;
a child that dies instead is described by how it died (its CPU or memory limit, a
signal), so the model reads why its call failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import resource
import signal
import socket
from typing import Any

from durable_subagents.agents._spec import DEFAULT_LIMITS, ToolLimits
from durable_subagents.tools._decorator import ToolContext, ToolError
from durable_subagents.tools._forkserver import (
    FRAME,
)

__all__ = [
    "MAX_ANSWER_BYTES",
    "cpu_seconds",
    "died",
    "exchange",
    "limits_of",
    "parse_answer",
    "plan",
    "settle",
    "unpack",
]

log = logging.getLogger("durable_subagents.tools._processes")

MAX_ANSWER_BYTES = 64 << 20
"""An answer larger than this is refused (the tools' own caps keep theirs far below)."""
READ_BYTES = 1 << 16
"""Most bytes one read of a child's socket takes."""


def settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], outcome: Any) -> None:
    def settle() -> None:
        if future.done():
            return
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody waits
        loop.call_soon_threadsafe(settle)


async def exchange(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, request: bytes, fds: tuple[int, ...] = ()
) -> bytes:
    """Send a request frame, then read the answer frame; b"" if the child ended first.

    ``fds`` (the workspace's descriptor) go along with the frame's first bytes
    (``SCM_RIGHTS``): the child walks from the very directory the worker checked.

    The first read takes the header with as much of the answer as has come (a tool's
    answer is mostly one read): a read for the header alone cost a wait of its own.
    """
    try:
        frame = FRAME.pack(len(request)) + request
        if fds:
            frame = frame[await _send_with_fds(loop, sock, frame, fds) :]
        await loop.sock_sendall(sock, frame)
        head = await receive(loop, sock, FRAME.size, at_most=READ_BYTES)
        (size,) = FRAME.unpack_from(head)
        body = head[FRAME.size :]
        if size > MAX_ANSWER_BYTES or len(body) > size:
            return b""  # over the cap, or more than one answer: not a child of ours
        if len(body) == size:
            return body
        return body + await receive(loop, sock, size - len(body))
    except (OSError, EOFError):
        return b""  # its exit status says why


async def _send_with_fds(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, data: bytes, fds: tuple[int, ...]
) -> int:
    """Send the start of ``data`` with ``fds``; how many bytes went."""
    while True:
        try:
            return socket.send_fds(sock, [data], list(fds))
        except BlockingIOError:
            writable = loop.create_future()
            loop.add_writer(sock, writable.set_result, None)
            try:
                await writable
            finally:
                loop.remove_writer(sock)


async def receive(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int, at_most: int = 0
) -> bytes:
    """``size`` bytes from ``sock``, or (``at_most``) up to that many once ``size`` came."""
    chunks: list[bytes] = []
    got = 0
    while got < size:
        chunk = await loop.sock_recv(sock, max(min(size - got, READ_BYTES), at_most - got))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def parse_answer(raw: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(raw)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def unpack(name: str, answer: dict[str, Any], ctx: ToolContext) -> str:
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
            f"{name} ran out of its {limits_of(ctx).memory_mb} MiB memory limit and was "
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


def died(name: str, exited: asyncio.Future[int], ctx: ToolContext) -> str:
    """What the model reads when a child ended without an answer."""
    status = exited.result() if exited.done() and not exited.exception() else None
    if status is not None and os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number == signal.SIGXCPU:
            return (
                f"{name} ran over its {cpu_seconds(ctx)} s CPU-time limit and was stopped; "
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


def plan(ctx: ToolContext) -> tuple[list[tuple[int, int, int]], int]:
    """A call's limits, worked out in the worker, where that is cheap.

    Returns:
        The rlimits its child takes once (memory, file size, open files, no core
        dumps), none above a hard limit the worker itself runs under; and the call's
        CPU seconds (``cpu_seconds``), which the child counts from each call's start.
    """
    limits = limits_of(ctx)
    wanted = [(resource.RLIMIT_CORE, 0, 0)]
    if limits.memory_mb:
        wanted.append((resource.RLIMIT_DATA, limits.memory_mb << 20, limits.memory_mb << 20))
    if limits.file_size_mb:
        size = limits.file_size_mb << 20
        wanted.append((resource.RLIMIT_FSIZE, size, size))
    if limits.open_files:
        wanted.append((resource.RLIMIT_NOFILE, limits.open_files, limits.open_files))
    fixed = []
    for which, soft, hard in wanted:
        _, current = resource.getrlimit(which)
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        fixed.append((which, soft, hard))
    return fixed, cpu_seconds(ctx)


def limits_of(ctx: ToolContext) -> ToolLimits:
    return ctx.limits.filled_from(DEFAULT_LIMITS)


def cpu_seconds(ctx: ToolContext) -> int:
    """A call's CPU-time limit: its limits' ``cpu_seconds``, at most its time limit."""
    cpu = limits_of(ctx).cpu_seconds or DEFAULT_LIMITS.cpu_seconds or 1
    return max(1, min(cpu, math.ceil(ctx.time_limit)))
