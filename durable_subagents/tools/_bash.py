"""The ``bash`` tool: a shell command in the workspace, under the process sandbox."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from durable_subagents.telemetry._metrics import record_sandbox_failure
from durable_subagents.tools._decorator import ToolContext, ToolError, tool
from durable_subagents.tools._sandbox import SandboxedProcess, spawn_sandboxed
from durable_subagents.tools._sandbox_host import SandboxUnavailable

__all__ = ["MAX_OUTPUT_CHARS", "MAX_TIMEOUT", "bash", "truncate_middle"]

log = logging.getLogger(__name__)

MAX_OUTPUT_CHARS = 30_000
"""Longer output keeps its head and tail around a truncation marker."""
MAX_TIMEOUT = 600.0
"""Upper bound of ``bash``'s ``timeout`` argument, in seconds."""

_KEEP_BYTES = 1 << 20
_READ_CHUNK = 65_536
_DRAIN_GRACE = 1.0
_REAP_LIMIT = 5.0


def truncate_middle(text: str, limit: int = MAX_OUTPUT_CHARS, dropped: int = 0) -> str:
    """Keep the head and tail of ``text`` within ``limit`` characters, marking the cut.

    Args:
        text: The text to shorten.
        limit: The number of characters to keep.
        dropped: Characters already removed from the middle of ``text``.

    Returns:
        ``text`` itself if short enough, else head, ``[... N characters truncated ...]``
        and tail.
    """
    if len(text) + dropped <= limit:
        return text
    keep = limit // 2
    cut = len(text) - 2 * keep + dropped
    return f"{text[:keep]}\n[... {cut} characters truncated ...]\n{text[len(text) - keep :]}"


class _Output:
    """Merged output with bounded memory: the first and last MiB of it."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = _KEEP_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - _KEEP_BYTES
            if excess > 0:
                del self.tail[:excess]
                self.dropped += excess

    def text(self) -> str:
        whole = self.head.decode(errors="replace") + self.tail.decode(errors="replace")
        return truncate_middle(whole, dropped=self.dropped)


async def _pump(
    proc: SandboxedProcess,
    output: _Output,
    on_output: Callable[[], None] | None,
    seen: Callable[[bytes], None] | None = None,
) -> None:
    stream = proc.process.stdout
    assert stream is not None
    while data := await stream.read(_READ_CHUNK):
        output.add(data)
        for callback, args in ((seen, (data,)), (on_output, ())):
            if callback is None:
                continue
            try:
                callback(*args)
            except Exception:
                log.exception("an output callback failed")


async def _finish(
    proc: SandboxedProcess, reader: asyncio.Task[None], *, grace: float, discard: bool = False
) -> None:
    """Kill what is left of the command, wait for it to exit and collect its last output.

    Then its changes land (``release``), or, ``discard``, are dropped unread.
    """
    proc.kill()
    try:
        await asyncio.wait_for(proc.exited(), _REAP_LIMIT)
    except TimeoutError:
        log.warning("sandboxed process %s did not exit after SIGKILL", proc.pid)
    await asyncio.wait({reader}, timeout=grace)
    reader.cancel()
    await (proc.discard() if discard else proc.release())


@tool
async def bash(ctx: ToolContext, command: str, timeout: float = 120) -> str:
    """Run a shell command in the workspace root and return its output.

    The command runs with `bash -c` in the workspace root; stdout and stderr come back
    together. There is no input (programs that prompt get end-of-file) and no terminal.
    Each call starts a fresh shell: `cd`, variables and background jobs do not carry
    over, and anything the command leaves running in the background is stopped when it
    finishes. Commands run in a sandbox: what a command writes in the workspace reaches
    it when the command ends, except changes under `.git`, `.claude` and similar
    protected paths (at any depth), which wait for a person or are refused, and files
    changed meanwhile by others, which are kept; the result then says so. `/tmp` is
    private and emptied after each call, there is no network unless this agent allows
    it, and processes, memory, file size and CPU time are limited. A non-zero exit
    status is appended as `[exit code N]`. Output over 30000
    characters keeps its beginning and end with `[... N characters truncated ...]`
    between them: filter long output (`| tail -50`, `grep`) to see what matters.

    Args:
        ctx: Supplied by the worker (the workspace root, the sandbox); not a model argument.
        command: The command line (bash syntax: pipes, `&&`, redirections work).
        timeout: Seconds after which the command is killed (at most 600).
    """
    if not timeout > 0:  # also refuses NaN
        raise ToolError("bash: timeout must be a positive number of seconds")
    timeout = min(timeout, MAX_TIMEOUT)
    try:
        proc = await spawn_sandboxed(
            ["bash", "-c", command], mode=ctx.sandbox, profile=ctx.profile()
        )
    except SandboxUnavailable as e:
        record_sandbox_failure("unavailable")
        raise ToolError(f"bash: this worker cannot run commands: {e}") from None
    except OSError as e:
        record_sandbox_failure("spawn")
        raise ToolError(f"bash: cannot start the command: {e}") from None
    output = _Output()
    reader = asyncio.create_task(_pump(proc, output, ctx.on_output, ctx.seen_output))
    exited = asyncio.create_task(proc.exited())
    try:
        async with asyncio.timeout(timeout):
            done, _ = await asyncio.wait({reader, exited}, return_when=asyncio.FIRST_COMPLETED)
            code = await (proc.wait() if reader in done else exited)
    except TimeoutError:
        await asyncio.shield(_finish(proc, reader, grace=_DRAIN_GRACE))
        partial = output.text()
        raise ToolError(
            f"command timed out after {timeout:g}s" + (f"\n{partial}" if partial else "")
        ) from None
    except asyncio.CancelledError:
        # Activity cancellation: nothing the command started may keep running. What it
        # changed lands, unless the call is handed back (its worker is stopping): then
        # the attempt that runs it again starts from the workspace as it was.
        proc.kill()
        handed_back = ctx.handing_back is not None and ctx.handing_back()
        await asyncio.shield(_finish(proc, reader, grace=0, discard=handed_back))
        raise
    finally:
        exited.cancel()
    # Leftovers of the process group (only possible without a PID namespace).
    await _finish(proc, reader, grace=_DRAIN_GRACE)
    text = output.text()
    if code != 0:
        separator = "" if not text or text.endswith("\n") else "\n"
        text = f"{text}{separator}[exit code {code}]"
    if proc.landing is not None:
        proc.landing.reported = True
        if notes := proc.landing.summary():
            separator = "" if not text or text.endswith("\n") else "\n"
            text += separator + notes
    return text
