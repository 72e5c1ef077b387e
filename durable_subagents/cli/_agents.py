"""``subagents agents`` and ``subagents tools``: what a worker or client would know."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from durable_subagents.cli._common import (
    AgentsDir,
    JsonOut,
    McpConfigFiles,
    Workspace,
    console,
    err_console,
    make_settings,
    mcp_config_option,
    run,
)
from durable_subagents.errors import SubagentError
from durable_subagents.wording._error_wording import for_shell

__all__ = ["agents", "tools"]


def agents(agents_dir: AgentsDir = None, as_json: JsonOut = False) -> None:
    """List the built-in agents and the project's own (from agent files)."""
    from durable_subagents.agents import ALL_TOOLS, BUILTIN_AGENTS, find_project_root, scan_agents
    from durable_subagents.cli._render import plain_table
    from durable_subagents.wording._terminal import shown

    try:
        found = scan_agents(agents_dir or find_project_root())
    except SubagentError as err:
        err_console.print(
            f"[red]error:[/red] {escape(for_shell(str(err)))}", soft_wrap=True, highlight=False
        )
        raise typer.Exit(1) from None
    for warning in found.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)
    specs = {**BUILTIN_AGENTS, **found.agents}
    sources = {n: _source(found.sources[n]) if n in found.sources else "built-in" for n in specs}
    offered = {n: _offered(a, ALL_TOOLS) for n, a in specs.items()}
    if as_json:
        rows = [
            {**a.model_dump(), "offered_tools": offered[n], "source": sources[n]}
            for n, a in specs.items()
        ]
        print(json.dumps(rows, indent=2))
        return
    listed: list[tuple[tuple[str, ...], str]] = []
    for n, a in specs.items():
        tools = "all" if offered[n] is None else ",".join(offered[n] or []) or "none"
        cells = (shown(n), tools, a.permission_mode, str(a.max_turns), shown(sources[n]))
        listed.append((cells, shown(a.description)))
    header = ("name", "tools", "mode", "turns", "source", "description")
    for line in plain_table(header, listed, console.width, right={3}):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _offered(spec: Any, builtin: Any) -> list[str] | None:
    """The tools a worker would offer the agent (None: every tool it has).

    The built-ins the agent may use, then its MCP entries (``mcp__git`` for a server).
    """
    if spec.tools is None and not spec.disallowed_tools and spec.permission_mode != "plan":
        return None
    return [*spec.allowed_tools(builtin), *_mcp_entries(spec)]


def _mcp_entries(spec: Any) -> list[str]:
    """The agent's MCP entries a worker would offer it, less what it disallows.

    In ``plan``, a worker offers an MCP tool only where one of the agent's ``allow``
    rules names it (agent files carry no such rules, so a plan agent's file gets none).
    """
    from durable_subagents.agents._tool_names import covers, is_mcp, rule_names

    entries = [
        t
        for t in spec.tools or ()
        if is_mcp(t) and not any(covers(d, t) for d in spec.disallowed_tools)
    ]
    if spec.permission_mode != "plan":
        return entries
    allows = [r.tool for r in spec.permissions if r.action == "allow" and is_mcp(r.tool)]
    return [t for t in entries if any(rule_names(a, t) for a in allows)]


def _source(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


def tools(
    workspace: Workspace = None, mcp_config: McpConfigFiles = None, as_json: JsonOut = False
) -> None:
    """List every tool a worker with these settings offers, with where it comes from.

    The built-in tools, then the tools of the MCP servers of the workspace's .mcp.json
    and --mcp-config (each server started once, here, to list them); what cannot be
    offered is said on stderr.
    """
    from durable_subagents.cli._render import plain_table
    from durable_subagents.tools import ToolRegistry
    from durable_subagents.wording._terminal import shown

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
