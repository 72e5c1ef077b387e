"""The orchestrator tools as an MCP server, for Claude Code and any other MCP client.

The server publishes exactly ``SubagentTools``' tools (names, descriptions,
JSON schemas) and answers a call with the dispatcher's JSON text. It speaks MCP on
stdio, so stdout carries the protocol only; logs go to stderr.

The tasks are Temporal workflows, not children of this process: when the MCP client
restarts the server, the tasks go on and a new session reaches them by id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from durable_subagents.agents import AgentSpec, discover_agents, load_agents
from durable_subagents.client._client import SubagentClient
from durable_subagents.client._tools import SubagentTools
from durable_subagents.config import DEFAULT_ADDRESS, Settings
from durable_subagents.connection._connect import check_address, connect_client
from durable_subagents.errors import InvalidRequest, SubagentError

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Durable subagents: delegate self-contained work to LLM subagents that run as Temporal "
    "workflows. spawn_subagent returns a task_id at once; check_subagent (wait=true) or "
    "wait_subagents returns the result, or a pause for approve_tool_calls / "
    "reject_tool_calls. Tasks outlive this server: keep their ids and check them later."
)
INSTRUCTIONS_PERSON = (
    "Durable subagents: delegate self-contained work to LLM subagents that run as Temporal "
    "workflows. spawn_subagent returns a task_id at once; check_subagent (wait=true) or "
    "wait_subagents returns the result. A person approves the calls a subagent pauses on "
    "(subagents approve TASK_ID), not you; you may reject_tool_calls or cancel_subagent. "
    "Tasks outlive this server: keep their ids and check them later."
)


def default_parent_id() -> str:
    """A fresh parent id for one MCP session: ``mcp-`` and 8 random hex digits."""
    return f"mcp-{uuid.uuid4().hex[:8]}"


def create_mcp_server(
    tools: SubagentTools,
    *,
    connect: Callable[[], Awaitable[SubagentClient]] | None = None,
    name: str = "subagents",
) -> Server[Any]:
    """An MCP server exposing ``tools`` unchanged: same names, descriptions and schemas.

    A call runs ``await tools.call(name, arguments)`` and returns its JSON text as text
    content; a ``{"error": ...}`` answer sets the result's ``isError``. A failed task
    reported by ``check_subagent`` is a successful call (its view holds the task's error).

    Example:
        >>> server = create_mcp_server(SubagentTools(client, parent_id="mcp-1"))
        >>> async with stdio_server() as (read, write):
        ...     await server.run(read, write, server.create_initialization_options())

    Args:
        tools: The dispatcher; one instance per MCP session, as it remembers decisions.
        connect: Connects the client before the first call (``tools.client`` is then
            replaced by the result). It is retried on the next call while it fails, so
            the server lists its tools and answers with a clear error while Temporal is
            down, and works once it is up.
        name: The server name shown to the MCP client.
    """
    lock = asyncio.Lock()
    pending = connect

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=s["name"], description=s["description"], input_schema=s["parameters"]
                )
                for s in tools.schemas()
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        nonlocal pending
        try:
            if pending is not None and params.name in tools.names:  # else: an error, offline
                async with lock:
                    if pending is not None:
                        tools.client = await pending()
                        pending = None
            text = await tools.call(params.name, params.arguments)
        except SubagentError as err:  # TemporalUnavailable from connect
            text = _dump({"error": str(err)})
        except Exception as err:  # a lost connection, a server error: tell the model
            logger.exception("tool %s failed", params.name)
            text = _dump({"error": f"{params.name} failed: {type(err).__name__}: {err}"})
        result = json.loads(text)
        is_error = isinstance(result, Mapping) and set(result) == {"error"}
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)

    return Server(
        name,
        version=_version(),
        instructions=INSTRUCTIONS_PERSON if tools.approvals == "person" else INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def run_mcp(
    settings: Settings,
    parent_id: str | None = None,
    *,
    agents_dir: str | Path | None = None,
    default_wait: float = 50.0,
    approvals: Literal["model", "person"] = "model",
    reach: Literal["any", "own"] = "any",
) -> None:
    """Serve the subagent tools over MCP on stdin/stdout until stdin closes.

    Temporal is connected on the first tool call, not at startup: the server starts
    and lists its tools with Temporal down, and a call then answers with the
    ``TemporalUnavailable`` message (address, ``subagents dev``) as an error result.

    Args:
        settings: Connection, task queue, blob store and default model.
        parent_id: Recorded on every task spawned; ``list_subagents`` shows only these.
            Default: a fresh ``mcp-xxxxxxxx`` per server process.
        agents_dir: A project whose agent files to offer besides the built-ins;
            default: the settings' ``agents_dir``, else the project root above the
            current directory (the first with ``.git``; see ``find_project_root``).
        default_wait: Seconds ``check_subagent`` blocks when the model gives no timeout;
            below the 60 s many MCP clients allow a tool call by default.
        approvals: ``"person"`` keeps ``approve_tool_calls`` from the model (see
            ``SubagentTools``).
        reach: ``"own"``: the model reaches only tasks spawned with ``parent_id``
            (give a fixed one, or later sessions cannot reach earlier tasks).

    A broken agent file is skipped with a warning; only a spawn of its agent fails.
    """
    agents_dir = agents_dir if agents_dir is not None else settings.agents_dir
    agents = load_agents(agents_dir) if agents_dir is not None else discover_agents()
    async with stdio_server() as (read, write):
        tools = SubagentTools(
            await _unconnected(settings, agents),
            parent_id=parent_id or default_parent_id(),
            default_wait=default_wait,
            approvals=approvals,
            reach=reach,
        )

        async def connect() -> SubagentClient:
            return await SubagentClient.connect(settings=settings, agents=agents)

        server = create_mcp_server(tools, connect=connect)
        await server.run(read, write, server.create_initialization_options())


async def _unconnected(settings: Settings, agents: Mapping[str, AgentSpec]) -> SubagentClient:
    """A client that has not dialled Temporal yet: enough to list the tools.

    A malformed address (``localhost``, ``http://...``) still lists the tools: the
    client is then made for the default address, never dialled, as every call first
    runs ``connect``, which answers with the address's error until it is fixed.
    """
    address = settings.address
    try:
        check_address(address)
    except InvalidRequest:
        address = DEFAULT_ADDRESS
    lazy = await connect_client(
        address, settings.namespace, keys=settings.payload_keys(), lazy=True
    )
    return SubagentClient(lazy, task_queue=settings.task_queue, agents=agents)


def _version() -> str:
    try:
        return version("durable-subagents")
    except PackageNotFoundError:
        return ""


def _dump(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
