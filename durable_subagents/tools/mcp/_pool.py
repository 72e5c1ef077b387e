"""The worker's open sessions with MCP servers, kept while used and closed when idle.

A session (``Connection``) is a ``ClientSession`` over a stdio server's process or a
remote server's HTTP transport. The SDK's session and transports live in anyio task
groups that must be entered and left by one task, so each connection has a task of
its own that holds them until the connection closes; calls come from any task.

The ``Pool`` keeps one connection per key (a stdio server per workspace directory and
user, a remote server once), starts it on first use (concurrent first uses wait for
the same start), starts a fresh one when the old one died, closes one idle for
``idle_timeout`` seconds, and closes all at ``aclose``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from durable_subagents.tools.mcp._config import McpServer
from durable_subagents.tools.mcp._stdio import StdioChannel

__all__ = ["STOP_GRACE", "Connection", "Pool", "StartFailed"]

log = logging.getLogger(__name__)

STOP_GRACE = 2.0
"""Seconds a stdio server has to exit once its input closes, before it is killed."""
_CLIENT_INFO = types.Implementation(name="durable-subagents", version="1")

Streams = tuple[Any, Any]


class StartFailed(Exception):
    """A connection that could not be opened; ``str()`` says why, without the server's name."""


def _leaf(err: BaseException) -> BaseException:
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


def _described(err: BaseException) -> str:
    err = _leaf(err)
    if isinstance(err, httpx2.HTTPStatusError):
        return f"it answered HTTP {err.response.status_code}"
    if isinstance(err, httpx2.HTTPError):
        return f"it could not be reached ({type(err).__name__})"
    text = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class Connection:
    """One session with one server: its transport, its ``ClientSession``, its holder task.

    Attributes:
        server: The server's configuration.
        channel: A stdio server's process and streams (None for a remote server).
        session: The initialized session (once open).
        busy: Requests under way on it.
        retired: No new request is given to it; it closes once ``busy`` is 0.
        http_status: The last HTTP error status a remote server answered, if any.
        reported: Its end was logged (once, whatever number of calls it cut off).
    """

    def __init__(self, server: McpServer, channel: StdioChannel | None) -> None:
        self.server = server
        self.channel = channel
        self.session: ClientSession | None = None
        self.busy = 0
        self.retired = False
        self.http_status: int | None = None
        self.reported = False
        self.broken: str | None = None
        self.idle: asyncio.TimerHandle | None = None
        self.key: Hashable | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ opening

    async def open(self, timeout: float) -> None:
        """Start the holder task and wait (at most ``timeout`` s) for ``initialize``.

        Raises:
            StartFailed: The server did not start, answer or agree within ``timeout``.
        """
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen, if late
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp {self.server.name}")
        try:
            self.session = await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            await self.close(kill=True)
            raise StartFailed(f"it did not answer MCP's initialize within {timeout:g} s") from None
        except asyncio.CancelledError:
            await asyncio.shield(self.close(kill=True))
            raise
        except Exception as err:
            reason = await self.reason(err)
            await self.close(kill=True)
            raise StartFailed(reason) from None

    def _streams(self) -> AbstractAsyncContextManager[Streams]:
        if self.channel is not None:
            return _channel_streams(self.channel)
        server = self.server
        assert server.url is not None

        async def seen(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                self.http_status = response.status_code

        def client(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            made = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
            made.event_hooks["response"].append(seen)
            return made

        if server.type == "sse":
            return sse_client(server.url, headers=dict(server.headers), httpx_client_factory=client)
        return _http_streams(server.url, client(headers=dict(server.headers)))

    async def _hold(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            async with self._streams() as (read, write):
                async with ClientSession(read, write, client_info=_CLIENT_INFO) as session:
                    await session.initialize()
                    ready.set_result(session)
                    await self._stop.wait()
        except BaseException as err:
            if not ready.done():
                ready.set_exception(err if isinstance(err, Exception) else StartFailed("stopped"))
            elif not isinstance(err, asyncio.CancelledError | GeneratorExit):
                self.broken = _described(err)
                log.debug("MCP server %r: session ended: %r", self.server.name, err)
            if isinstance(err, asyncio.CancelledError):
                raise
        finally:
            if not ready.done():
                ready.set_exception(StartFailed("it closed the connection"))
            if self.channel is not None:
                await asyncio.shield(self.channel.stop(STOP_GRACE))

    # ------------------------------------------------------------ state

    @property
    def alive(self) -> bool:
        """It may take requests: open, not retired, its process or session not ended."""
        if self.retired or self.broken is not None or self._task is None or self._task.done():
            return False
        return self.channel is None or self.channel.alive

    async def reason(self, err: BaseException | None = None) -> str:
        """Why the connection ended (or failed to open), as the end of a sentence."""
        if self.channel is not None:
            await self.channel.settled()
            why = self.channel.why_ended()
            tail = self.channel.stderr_tail()
            return f"{why}; its stderr ended with:\n{tail}" if tail else f"{why} (no stderr)"
        if self.http_status is not None:
            return f"it answered HTTP {self.http_status}"
        if self.broken is not None:
            return self.broken
        return _described(err) if err is not None else "the connection closed"

    # ------------------------------------------------------------ closing

    def kill(self, reason: str) -> None:
        """End it now: a stdio server's process group is killed at once."""
        self.retired = True
        if self.channel is not None:
            self.channel.end(reason)
        elif self.broken is None:
            self.broken = reason
        self._stop.set()

    async def close(self, *, kill: bool = False) -> None:
        """Close the session and stop its process (killed at once with ``kill``)."""
        self.retired = True
        if self.idle is not None:
            self.idle.cancel()
        if kill and self.channel is not None:
            self.channel.end(self.channel.failure or "it was stopped by the worker")
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), STOP_GRACE + 5.0)
            except TimeoutError:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            except BaseException:  # the holder's failure was reported where it happened
                pass
        elif self.channel is not None:
            await self.channel.stop(0.0)


@contextlib.asynccontextmanager
async def _channel_streams(channel: StdioChannel) -> AsyncIterator[Streams]:
    yield channel.read_stream, channel.write_stream


@contextlib.asynccontextmanager
async def _http_streams(url: str, client: httpx2.AsyncClient) -> AsyncIterator[Streams]:
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


class Pool:
    """Connections by key: started on first use, replaced when dead, closed when idle."""

    def __init__(self, idle_timeout: float) -> None:
        self.idle_timeout = idle_timeout
        self.closed = False
        self._connections: dict[Hashable, Connection] = {}
        self._starts: dict[Hashable, asyncio.Task[Connection]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def acquire(
        self,
        key: Hashable,
        start: Callable[[], Awaitable[Connection]],
        cleanup: Callable[[], None] | None = None,
    ) -> Connection:
        """The live connection for ``key``, started (once, however many wait) if needed.

        ``cleanup`` runs once ``start`` is done with what it was given, or at once when
        ``start`` is not used: a start goes on when its waiters are cancelled.

        Raises:
            StartFailed: Starting it failed (every waiter gets the same failure).
        """
        started = False
        try:
            if self.closed:
                raise StartFailed("the worker is stopping")
            connection = self._connections.get(key)
            if connection is not None and not connection.alive:
                self.retire(connection)
                connection = None
            if connection is None:
                task = self._starts.get(key)
                if task is None:
                    task = asyncio.create_task(_call(start), name="mcp start")
                    self._starts[key] = task
                    task.add_done_callback(lambda done: self._started(key, done))
                    if cleanup is not None:
                        task.add_done_callback(lambda _: cleanup())
                    started = True
                connection = await asyncio.shield(task)
        finally:
            if not started and cleanup is not None:
                cleanup()
        connection.busy += 1
        if connection.idle is not None:
            connection.idle.cancel()
            connection.idle = None
        return connection

    def _started(self, key: Hashable, task: asyncio.Task[Connection]) -> None:
        if self._starts.get(key) is task:
            del self._starts[key]
        if task.cancelled() or task.exception() is not None:
            return
        connection = task.result()
        if self.closed:
            self._close_later(connection)
            return
        self._connections[key] = connection
        connection.key = key
        self._arm_idle(connection)

    def release(self, connection: Connection) -> None:
        """A request on ``connection`` ended."""
        connection.busy -= 1
        if connection.busy > 0:
            return
        if connection.retired:
            self._close_later(connection)
        else:
            self._arm_idle(connection)

    def retire(self, connection: Connection, *, kill: str | None = None) -> None:
        """Give ``connection`` no new request; close it when idle (at once with ``kill``)."""
        if connection.key is not None and self._connections.get(connection.key) is connection:
            del self._connections[connection.key]
        connection.retired = True
        if kill is not None:
            connection.kill(kill)
        if connection.busy <= 0 or kill is not None:
            self._close_later(connection)

    def _arm_idle(self, connection: Connection) -> None:
        if connection.busy == 0 and not connection.retired:
            if connection.idle is not None:
                connection.idle.cancel()
            connection.idle = asyncio.get_running_loop().call_later(
                self.idle_timeout, self._idled, connection
            )

    def _idled(self, connection: Connection) -> None:
        connection.idle = None
        if connection.busy == 0:
            self.retire(connection)

    def _close_later(self, connection: Connection) -> None:
        task = asyncio.create_task(connection.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every connection and stop every process; later acquires fail."""
        self.closed = True
        for task in list(self._starts.values()):
            task.cancel()
        for connection in list(self._connections.values()):
            self.retire(connection)
            if connection.busy > 0:
                self._close_later(connection)
        await asyncio.gather(*self._starts.values(), return_exceptions=True)
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)


async def _call(start: Callable[[], Awaitable[Connection]]) -> Connection:
    return await start()
