"""An MCP client session against ``subagents mcp``."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent


@asynccontextmanager
async def mcp_session(
    tmp_path: Path, env: dict[str, str], *args: str, cwd: Path | None = None
) -> AsyncIterator[ClientSession]:
    """The server started in ``cwd`` (default ``tmp_path``), its stderr in ``mcp.err``."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "durable_subagents", "mcp", *args],
        env=env,
        cwd=cwd or tmp_path,
    )
    with (tmp_path / "mcp.err").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, name: str, **arguments: Any) -> tuple[bool, Any]:
    """One tool call: (isError, the JSON the tool answered)."""
    result = await session.call_tool(name, arguments)
    assert isinstance(result, CallToolResult)
    [content] = result.content
    assert isinstance(content, TextContent)
    return result.is_error, json.loads(content.text)


NAMES = [
    "spawn_subagent",
    "check_subagent",
    "wait_subagents",
    "approve_tool_calls",
    "reject_tool_calls",
    "send_subagent_input",
    "cancel_subagent",
    "show_tool_call",
    "list_subagents",
]
