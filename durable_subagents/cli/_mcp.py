"""``subagents mcp``: the orchestrator tools as an MCP server over stdio."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from durable_subagents.cli._common import (
    Address,
    AgentsDir,
    Namespace,
    Profile,
    TaskQueue,
    err_console,
    error,
    make_settings,
    run,
)
from durable_subagents.errors import SubagentError

__all__ = ["Approvals", "Reach", "mcp"]


class Reach(enum.StrEnum):
    """Which tasks ``subagents mcp``'s model reaches by id."""

    ANY = "any"
    OWN = "own"


class Approvals(enum.StrEnum):
    """Who approves the calls subagents pause on, for ``subagents mcp``."""

    MODEL = "model"
    PERSON = "person"


def mcp(
    parent_id: Annotated[
        str | None,
        typer.Option(
            "--parent-id",
            help="Parent id of the tasks spawned; list_subagents shows only these "
            "[default: mcp-<random>, new per server]",
        ),
    ] = None,
    agents_dir: AgentsDir = None,
    address: Address = None,
    namespace: Namespace = None,
    profile: Profile = None,
    task_queue: TaskQueue = None,
    approvals: Annotated[
        Approvals,
        typer.Option(
            help="Who approves the calls subagents pause on: 'model' (approve_tool_calls) "
            "or 'person' (subagents approve; the model may only reject or cancel)",
        ),
    ] = Approvals.MODEL,
    reach: Annotated[
        Reach,
        typer.Option(
            help="Which tasks the model reaches by id: 'any' task of the namespace, or "
            "only its 'own' (spawned with this --parent-id; give a fixed one so later "
            "sessions reach earlier tasks)",
        ),
    ] = Reach.ANY,
) -> None:
    """Serve the subagent tools over MCP on stdio (for Claude Code and other MCP clients)."""
    from durable_subagents.client._mcp import default_parent_id, run_mcp
    from durable_subagents.connection._connect import check_address

    settings = make_settings(address, namespace, task_queue, profile=profile)
    parent = parent_id or default_parent_id()
    # stdout carries the protocol: anything for people goes to stderr
    err_console.print(
        f"subagents MCP server on stdio · Temporal {settings.address} (connected on first "
        f"call) · task queue {settings.task_queue} · parent id {parent} · approvals by "
        f"the {approvals.value}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    try:
        check_address(settings.address)
    except SubagentError as err:  # the tools are listed still; each call answers this
        error(f"{err}; every tool call answers this until it is fixed")
    run(
        run_mcp(
            settings, parent, agents_dir=agents_dir, approvals=approvals.value, reach=reach.value
        )
    )
