"""Agent specifications: the built-ins and how a name resolves to a spec."""

from __future__ import annotations

from collections.abc import Mapping

from durable_subagents.agents._builtin import BUILTIN_AGENTS
from durable_subagents.agents._files import (
    AgentFiles,
    discover_agents,
    find_project_root,
    load_agent_file,
    load_agents,
    scan_agents,
)
from durable_subagents.agents._spec import (
    ALL_TOOLS,
    PROTECTED_PATHS,
    READ_ONLY_TOOLS,
    AgentSpec,
    PermissionMode,
    PermissionRule,
    ToolLimits,
)
from durable_subagents.errors import InvalidRequest

__all__ = [
    "ALL_TOOLS",
    "BUILTIN_AGENTS",
    "PROTECTED_PATHS",
    "READ_ONLY_TOOLS",
    "AgentFiles",
    "AgentSpec",
    "PermissionMode",
    "PermissionRule",
    "ToolLimits",
    "discover_agents",
    "find_project_root",
    "load_agent_file",
    "load_agents",
    "resolve_agent",
    "scan_agents",
]


def resolve_agent(name: str, extra: Mapping[str, AgentSpec] | None = None) -> AgentSpec:
    """Look an agent up by name among ``extra`` (first) and the built-ins.

    Raises:
        InvalidRequest: no agent has that name; the message lists the known ones.
    """
    agents = {**BUILTIN_AGENTS, **(extra or {})}
    try:
        return agents[name]
    except KeyError:
        known = ", ".join(agents)
        raise InvalidRequest(f"unknown agent {name!r}; known: {known}") from None
