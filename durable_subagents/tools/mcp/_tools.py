"""A server's tools as the worker's own: offered by name, called through its sessions.

``discover`` lists each configured server's tools when a worker starts (as the worker's
workspace root sees them) and turns the ones that can be offered into ``McpTool``s of
the worker's registry; what cannot be offered is said once, and the other servers and
tools are not held up by it. A call runs like any tool's, in the ``run_tool`` activity
on the tools queue: ``McpTool.run`` calls the server through ``McpServers`` in the
task's workspace, and a server's error result, or a server that cannot answer, is a
tool error the model reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from durable_subagents.tools._decorator import Tool, ToolContext, ToolError
from durable_subagents.tools.mcp._config import McpServer
from durable_subagents.tools.mcp._names import offerable_schema, offered_name

if TYPE_CHECKING:
    from durable_subagents.tools.mcp._sessions import McpServers, McpToolInfo

__all__ = ["LIST_TIMEOUT", "McpTool", "discover"]

log = logging.getLogger(__name__)

LIST_TIMEOUT = 60.0
"""Seconds a server may take to start and list its tools when a worker starts."""


class McpTool(Tool):
    """One tool of an MCP server, as a worker offers it (``mcp__<server>__<tool>``).

    Attributes:
        server: The server's name.
        tool: The tool's own name, what the server is called with.
        read_only_hint: What the server says of it (``readOnlyHint``): shown to a
            person deciding, never trusted; the tool counts as one that changes things.
        timeout: Seconds one call may take (the server's ``timeout``).
    """

    def __init__(
        self,
        info: McpToolInfo,
        name: str,
        parameters: dict[str, Any],
        servers: McpServers,
        timeout: float,
    ) -> None:
        # Not a Python function's tool: no signature to read, no fork server to run in.
        self.name = name
        self.description = info.description
        self.parameters = parameters
        self.read_only = False
        self.in_process = None
        self.server = info.server
        self.tool = info.name
        self.read_only_hint = info.read_only_hint
        self.timeout = timeout
        self._servers = servers

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> str:
        """Call the server's tool in the task's workspace; its text, or ``ToolError``.

        The images of its result that a model may be shown go to ``ctx.images``.
        """
        from durable_subagents.tools.mcp._sessions import McpUnavailable

        if not isinstance(arguments, dict):
            raise ToolError(f"{self.name}: arguments must be a JSON object")
        if ctx.workspace_fd is None:
            raise ToolError(f"{self.name}: no workspace is held for this call")
        try:
            result = await self._servers.call(
                self.server,
                self.tool,
                arguments,
                workspace=ctx.workspace,
                workspace_fd=ctx.workspace_fd,
                on_progress=ctx.on_output,
                timeout=self.timeout,
            )
        except McpUnavailable as err:
            raise ToolError(f"{self.name}: {err}") from None
        if result.is_error:
            raise ToolError(result.text or f"{self.name} failed (the server gave no reason)")
        ctx.images.extend(result.images)
        return result.text


async def discover(
    servers: McpServers,
    config: Mapping[str, McpServer],
    workspace: Path,
    workspace_fd: int,
    taken: set[str],
) -> tuple[list[McpTool], list[str]]:
    """The tools of every server that can be offered, and one line per what cannot.

    Args:
        servers: The worker's sessions.
        config: The servers, by name.
        workspace: The worker's workspace root (stdio servers start there to list).
        workspace_fd: A descriptor of it.
        taken: Tool names already offered (the built-ins, custom tools): never shadowed.
    """

    async def listed(name: str) -> list[McpToolInfo] | str:
        try:
            async with asyncio.timeout(LIST_TIMEOUT):
                return await servers.list_tools(name, workspace, workspace_fd)
        except TimeoutError:
            return f"did not list its tools within {LIST_TIMEOUT:g} s"
        except Exception as err:  # a broken server: said, not fatal to the others
            return str(err) or type(err).__name__

    names = sorted(config)
    results = await asyncio.gather(*(listed(n) for n in names))
    tools: list[McpTool] = []
    problems: list[str] = []
    seen = set(taken)
    for name, result in zip(names, results, strict=True):
        where = f"MCP server {name!r} ({config[name].source})"
        if isinstance(result, str):
            problems.append(f"{where}: offers no tools: {result}")
            continue
        for info in result:
            offered = offered_name(name, info.name)
            if offered is None:
                problems.append(
                    f"{where}: tool {info.name[:80]!r} not offered: its name is too long "
                    "for the model APIs (mcp__<server>__<tool> is at most 64 characters)"
                )
                continue
            if offered in seen:
                problems.append(f"{where}: tool {info.name[:80]!r} not offered: {offered} is taken")
                continue
            try:
                parameters = offerable_schema(info.input_schema)
            except ValueError as err:
                problems.append(f"{where}: tool {info.name[:80]!r} not offered: {err}")
                continue
            seen.add(offered)
            tools.append(McpTool(info, offered, parameters, servers, config[name].timeout))
    return tools, problems
