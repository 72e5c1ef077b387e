"""``subagents tools``: every tool a worker with these settings offers, and its source."""

from __future__ import annotations

import json
import os
from typing import Any

from rich.markup import escape

from durable_subagents.cli._common import (
    JsonOut,
    McpConfigFiles,
    Workspace,
    console,
    err_console,
    make_settings,
    mcp_config_option,
    run,
)

__all__ = ["tools"]


def tools(
    workspace: Workspace = None, mcp_config: McpConfigFiles = None, as_json: JsonOut = False
) -> None:
    """List every tool a worker with these settings offers, with where it comes from.

    The built-in tools, then the tools of the MCP servers of the workspace's .mcp.json
    and --mcp-config (each server started once, here, to list them); what cannot be
    offered is said on stderr.
    """
    from durable_subagents._terminal import shown
    from durable_subagents.cli._render import plain_table
    from durable_subagents.tools import ToolRegistry

    settings = make_settings(workspace=workspace, mcp_config=mcp_config_option(mcp_config))
    registry = ToolRegistry()
    rows: list[dict[str, Any]] = [
        {
            "name": t.name,
            "source": "built-in",
            "read_only": t.read_only,
            "description": t.description,
        }
        for t in registry
    ]
    offered, problems = run(_mcp_tools(settings))
    rows += offered
    for problem in problems:
        err_console.print(f"[yellow]warning:[/yellow] {escape(shown(problem))}", soft_wrap=True)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    listed = [
        ((shown(r["name"]), shown(r["source"])), shown(r["description"].split("\n")[0]))
        for r in rows
    ]
    for line in plain_table(("name", "source", "description"), listed, console.width):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


async def _mcp_tools(settings: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The MCP servers' tools as rows, and what could not be offered."""
    from durable_subagents.activities._workspaces import task_workspace
    from durable_subagents.tools._sandbox import BASE_ENV
    from durable_subagents.tools._sandbox_host import tool_user
    from durable_subagents.tools.mcp import load_mcp_config

    files = settings.mcp_config_files()
    if not files:
        return [], []
    config = load_mcp_config(files, os.environ)
    if not config.servers:
        return [], config.problems
    from durable_subagents.tools.mcp._sessions import McpServers
    from durable_subagents.tools.mcp._tools import discover

    env = {n: os.environ[n] for n in [*BASE_ENV, *settings.tool_env_names] if n in os.environ}
    servers = McpServers(
        config.servers, env=env, run_as=lambda fd: tool_user(fd, settings.tool_user_ids)
    )
    try:
        with task_workspace(settings.resolved_workspace, None, ()) as root:
            found, problems = await discover(
                servers, config.servers, root.path, root.fd, {"bash", "read_file"}
            )
    finally:
        await servers.aclose()
    rows = [
        {
            "name": t.name,
            "source": f"MCP server {t.server}",
            "read_only": False,
            "read_only_hint": t.read_only_hint,
            "description": t.description,
        }
        for t in found
    ]
    return rows, [*config.problems, *problems]
