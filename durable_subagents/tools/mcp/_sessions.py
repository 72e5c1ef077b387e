"""The worker's MCP servers: their tools listed and called, whatever a server does.

``McpServers`` holds the worker's sessions with the servers of its configuration. A
stdio server is a process of the worker, started on first use for a task's workspace
(that directory as its working directory, the worker's tool environment and the
server's own ``env``, as the tool user: never root), kept per (server, workspace) while
used, closed after ``idle_timeout`` idle seconds, started afresh when it died. A remote
server (``http``: streamable HTTP; ``sse``) gets one session, shared by workspaces,
opened again when it broke.

A server is the operator's, but what it says is untrusted and it may misbehave: every
request is bounded in time (the server's ``timeout``), a stdio server's messages in
size, its listing in tools and pages, its descriptions in length. A call that is
cancelled or times out sends MCP's ``notifications/cancelled``; a stdio server that
has not answered the call ``CANCEL_GRACE`` seconds later is killed (the next call
starts a fresh process), so a cancelled call never goes on changing things.

Example:
    >>> servers = McpServers(config.servers, env=tool_env, run_as=tool_user)
    >>> tools = await servers.list_tools("git", workspace, workspace_fd)
    >>> result = await servers.call(
    ...     "git", "git_status", {"repo_path": "."}, workspace=workspace,
    ...     workspace_fd=workspace_fd, on_progress=activity.heartbeat)
    >>> await servers.aclose()
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import re
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST
from pydantic import BaseModel, ValidationError

from durable_subagents.tools._sandbox import SANDBOX_PATH
from durable_subagents.tools.mcp._config import McpServer
from durable_subagents.tools.mcp._pool import Connection, Pool, StartFailed
from durable_subagents.tools.mcp._results import McpResult, McpToolInfo, result_from, tool_info
from durable_subagents.tools.mcp._stdio import CallWatch, StdioChannel, watching
from durable_subagents.wording._terminal import UNSAFE

__all__ = ["CANCEL_GRACE", "MAX_PAGES", "McpResult", "McpServers", "McpToolInfo", "McpUnavailable"]

log = logging.getLogger(__name__)

CANCEL_GRACE = 2.0
"""Seconds a stdio server has to answer a cancelled request before it is killed."""
MAX_PAGES = 64
"""Pages of a server's tool listing followed at most."""
_MAX_REASON = 2_000
_UNSAFE = re.compile(UNSAFE)
R = TypeVar("R", bound=BaseModel)
T = TypeVar("T")


class McpUnavailable(Exception):
    """A server that would not start, died, timed out or broke the protocol.

    ``str()`` names the server and says what happened; for a stdio server that
    stopped, the last lines of its stderr (bounded, control characters removed).

    Attributes:
        server: The server's name.
        reason: What happened, as the end of a sentence.
    """

    def __init__(self, server: str, reason: str) -> None:
        self.server = server
        self.reason = _UNSAFE.sub("", reason)[:_MAX_REASON]
        super().__init__(f"MCP server {server!r} is unavailable: {self.reason}")


class _Refused(Exception):
    """The server answered a request with a JSON-RPC error."""


class _Undelivered(Exception):
    """The session had ended before the server could see the request: it may be sent again."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _cleaned(text: str, limit: int = 500) -> str:
    return _UNSAFE.sub("", text)[:limit]


class McpServers:
    """The worker's connections to its MCP servers.

    Args:
        servers: The servers by name (``load_mcp_config(...).servers``).
        env: The worker's tool environment (its allowlist), which a stdio server gets
            with its own ``env`` on top (and ``PATH`` where neither has one).
        run_as: The uid and gid a stdio server for a workspace runs as, from the
            workspace's descriptor (None: the worker's own user). A root worker passes
            its tool user; a server that would run as root is refused.
        idle_timeout: Seconds a session may stay unused before it is closed.
        max_tools: Tools kept of one server's listing; the rest are left out, with a
            warning logged once.
    """

    def __init__(
        self,
        servers: Mapping[str, McpServer],
        *,
        env: Mapping[str, str],
        run_as: Callable[[int], tuple[int, int] | None],
        idle_timeout: float = 300.0,
        max_tools: int = 512,
    ) -> None:
        self.servers = dict(servers)
        self.max_tools = max_tools
        self._env = dict(env)
        self._run_as = run_as
        self._pool = Pool(idle_timeout)
        self._said: set[tuple[str, str]] = set()

    # ------------------------------------------------------------ the surface

    async def list_tools(
        self, server: str, workspace: Path, workspace_fd: int
    ) -> list[McpToolInfo]:
        """The tools ``server`` lists (at most ``max_tools``), for a task's workspace.

        Raises:
            McpUnavailable: The server did not start, answer in time, or list its tools.
        """
        config = self._server(server)
        deadline = asyncio.get_running_loop().time() + config.timeout

        async def listing(connection: Connection) -> list[McpToolInfo]:
            try:
                return await self._listing(connection, deadline)
            except _Refused as err:
                raise McpUnavailable(server, f"it refused to list its tools: {err}") from None

        return await self._retrying(config, workspace, workspace_fd, listing)

    async def _listing(self, connection: Connection, deadline: float) -> list[McpToolInfo]:
        server = connection.server.name
        loop = asyncio.get_running_loop()
        tools: list[McpToolInfo] = []
        names: set[str] = set()
        left_out: list[str] = []
        cursors: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            remaining = deadline - loop.time()
            if remaining <= 0:
                limit = connection.server.timeout
                raise McpUnavailable(server, f"it did not list its tools within {limit:g} s")
            page = await self._send(
                connection,
                types.ListToolsRequest(params=params),
                types.ListToolsResult,
                remaining,
                "tools/list",
            )
            for tool in page.tools:
                if tool.name in names:
                    continue
                if len(tools) >= self.max_tools:
                    self._say_once(
                        server,
                        "max_tools",
                        f"lists more than {self.max_tools} tools; the first {self.max_tools} "
                        "are offered",
                    )
                    break
                info = tool_info(server, tool)
                if isinstance(info, str):
                    left_out.append(info)
                    continue
                names.add(tool.name)
                tools.append(info)
            cursor = page.next_cursor
            if not cursor or len(tools) >= self.max_tools:
                break
            if cursor in cursors:
                self._say_once(server, "cursor", "repeats a page cursor; its listing ends there")
                break
            cursors.add(cursor)
        else:
            self._say_once(
                server,
                "pages",
                f"lists tools on more than {MAX_PAGES} pages; the rest are not read",
            )
        if left_out:
            shown = "; ".join(_cleaned(why, 200) for why in left_out[:3])
            self._say_once(server, "left_out", f"left out {len(left_out)} tools: {shown}")
        return tools

    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        workspace: Path,
        workspace_fd: int,
        on_progress: Callable[[], None] | None = None,
        timeout: float | None = None,
    ) -> McpResult:
        """Call ``tool`` of ``server`` with ``arguments``, for a task's workspace.

        A call the server cannot have received (its process had died, a remote session
        had expired) is sent once more, on a fresh session.

        Args:
            server: The server's name.
            tool: The tool's name on the server.
            arguments: The tool's arguments.
            workspace: The task's workspace (shown in messages only).
            workspace_fd: A descriptor of it, held by the caller for the call: a stdio
                server started for the call works in that directory.
            on_progress: Called whenever the server says something during the call
                (the caller heartbeats), in the caller's context.
            timeout: Seconds the call may take (default: the server's ``timeout``).

        Returns:
            The result as text for the model; a JSON-RPC error the server answered
            (an unknown tool, bad arguments) is an ``is_error`` result saying so.

        Raises:
            McpUnavailable: The server did not start, died, broke the protocol, or did
                not answer within the timeout.
            asyncio.CancelledError: The call was cancelled (a stdio server that did not
                answer the cancel within ``CANCEL_GRACE`` s is killed first).
        """
        config = self._server(server)
        limit = config.timeout if timeout is None else timeout
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=tool, arguments=arguments)
        )

        async def calling(connection: Connection) -> McpResult:
            what = f"the call of {tool!r}"
            try:
                result = await self._send(
                    connection, request, types.CallToolResult, limit, what, on_progress
                )
            except _Refused as err:
                return McpResult(
                    text=f"MCP server {server!r} refused the call: {err}", is_error=True
                )
            return result_from(result)

        return await self._retrying(config, workspace, workspace_fd, calling)

    async def aclose(self) -> None:
        """Stop every server process and close every session (the worker drains)."""
        await self._pool.aclose()

    # ------------------------------------------------------------ sessions

    def _server(self, name: str) -> McpServer:
        try:
            return self.servers[name]
        except KeyError:
            known = ", ".join(sorted(self.servers)) or "none"
            raise McpUnavailable(
                name, f"this worker has no such server (it has: {known})"
            ) from None

    @contextlib.asynccontextmanager
    async def _session(
        self, server: McpServer, workspace: Path, workspace_fd: int
    ) -> AsyncIterator[Connection]:
        try:
            if server.type == "stdio":
                connection = await self._stdio(server, workspace, workspace_fd)
            else:
                connection = await self._pool.acquire(
                    ("remote", server.name), functools.partial(self._open_remote, server)
                )
        except StartFailed as err:
            self._say_once(server.name, "start", f"could not be started: {err}")
            raise McpUnavailable(server.name, f"it could not be started: {err}") from None
        try:
            yield connection
        finally:
            self._pool.release(connection)

    async def _retrying(
        self,
        server: McpServer,
        workspace: Path,
        workspace_fd: int,
        use: Callable[[Connection], Awaitable[T]],
    ) -> T:
        """``use`` a session; once more on a fresh one if the first had ended unseen."""
        for attempt in range(2):
            async with self._session(server, workspace, workspace_fd) as connection:
                try:
                    return await use(connection)
                except _Undelivered as err:
                    if attempt:
                        raise McpUnavailable(server.name, err.reason) from None
                    log.info(
                        "MCP server %r: sent again on a fresh session (%s)", server.name, err.reason
                    )
        raise AssertionError("unreachable")

    async def _stdio(self, server: McpServer, workspace: Path, workspace_fd: int) -> Connection:
        info = os.fstat(workspace_fd)
        run_as = self._run_as(workspace_fd)
        key = ("stdio", server.name, info.st_dev, info.st_ino, run_as)
        held = os.dup(workspace_fd)  # a start goes on after its caller was cancelled
        start = functools.partial(self._open_stdio, server, workspace, held, run_as)
        return await self._pool.acquire(key, start, functools.partial(os.close, held))

    async def _open_stdio(
        self, server: McpServer, workspace: Path, workspace_fd: int, run_as: tuple[int, int] | None
    ) -> Connection:
        if os.geteuid() == 0 and (run_as is None or run_as[0] == 0):
            raise StartFailed(
                "the worker runs as root and was given no other user to run it as (a root "
                "worker runs MCP servers as the tool user, never as root)"
            )
        assert server.command is not None
        env = {"PATH": SANDBOX_PATH, **self._env, **server.env}
        program = os.path.basename(server.command)
        try:
            channel = await StdioChannel.start(
                server.name,
                server.command,
                server.args,
                env=env,
                workspace_fd=workspace_fd,
                run_as=run_as,
            )
        except OSError as err:
            raise StartFailed(f"{program!r} could not be run ({err.strerror or err})") from None
        except subprocess.SubprocessError:
            user = f"uid {run_as[0]}" if run_as else "the worker's user"
            raise StartFailed(
                f"{program!r} could not be set up to run as {user} in {workspace}"
            ) from None
        connection = Connection(server, channel)
        await connection.open(server.timeout)
        return connection

    async def _open_remote(self, server: McpServer) -> Connection:
        connection = Connection(server, None)
        await connection.open(server.timeout)
        return connection

    # ------------------------------------------------------------ requests

    async def _send(
        self,
        connection: Connection,
        request: types.ClientRequest,
        result_type: type[R],
        timeout: float,
        what: str,
        on_progress: Callable[[], None] | None = None,
    ) -> R:
        name = connection.server.name
        session = connection.session
        assert session is not None
        caller = contextvars.copy_context()
        touch = (lambda: caller.run(on_progress)) if on_progress is not None else None
        watch = CallWatch(touch)

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            watch.touch()

        try:
            with watching(watch):
                async with asyncio.timeout(timeout):
                    return await session.send_request(
                        request, result_type, progress_callback=progress if touch else None
                    )
        except TimeoutError:
            stopped = await asyncio.shield(self._abandon(connection, watch, what))
            end = "; its process was stopped" if stopped else ""
            raise McpUnavailable(name, f"{what} got no answer within {timeout:g} s{end}") from None
        except asyncio.CancelledError:
            await asyncio.shield(self._abandon(connection, watch, what))
            raise
        except MCPError as err:
            # HTTP 404 to a request of a session: the server no longer knows the session
            # (it restarted, or ended it) and ran nothing; a new session is due (MCP spec)
            expired = connection.channel is None and (
                connection.http_status == 404
                or (err.code == INVALID_REQUEST and err.error.message == "Session terminated")
            )
            if err.code == CONNECTION_CLOSED or expired:
                reason = "its session expired" if expired else await connection.reason()
                self._pool.retire(connection)
                if not connection.reported:  # once, however many calls it cut off
                    connection.reported = True
                    log.warning("MCP server %r stopped: %s", name, _cleaned(reason, 2_000))
                if expired or (connection.channel is not None and not watch.written):
                    raise _Undelivered(reason) from None
                raise McpUnavailable(name, reason) from None
            raise _Refused(_cleaned(f"{err.error.message} (JSON-RPC error {err.code})")) from None
        except ValidationError as err:
            first = err.errors()[0] if err.errors() else {"loc": (), "msg": str(err)}
            where = ".".join(str(p) for p in first["loc"]) or "result"
            raise McpUnavailable(
                name, _cleaned(f"its answer to {what} is not MCP's ({where}: {first['msg']})")
            ) from None
        finally:
            if connection.channel is not None:
                connection.channel.forget(watch)

    async def _abandon(self, connection: Connection, watch: CallWatch, what: str) -> bool:
        """After a cancel: kill a stdio server that does not answer within the grace."""
        channel = connection.channel
        if channel is None or watch.request_id is None or not channel.alive:
            return False
        try:
            await asyncio.wait_for(watch.answered.wait(), CANCEL_GRACE)
            return False
        except TimeoutError:
            pass
        reason = (
            f"the worker stopped it: {what} did not end within {CANCEL_GRACE:g} s of its cancel"
        )
        log.warning("MCP server %r: %s", connection.server.name, reason)
        self._pool.retire(connection, kill=reason)
        return True

    def _say_once(self, server: str, kind: str, what: str) -> None:
        if (server, kind) not in self._said:
            self._said.add((server, kind))
            log.warning("MCP server %r %s", server, _cleaned(what, 2_000))
