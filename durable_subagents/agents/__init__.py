"""Agent specifications: the built-ins and how a name resolves to a spec."""

from __future__ import annotations

from collections.abc import Mapping

from durable_subagents.agents._activity_options import (
    DEFAULT_ACTIVITY_OPTIONS,
    ActivityConfig,
    ActivityOptions,
    parse_activity_options,
)
from durable_subagents.agents._agent_file import AgentFileError
from durable_subagents.agents._builtin import BUILTIN_AGENTS
from durable_subagents.agents._files import (
    AgentFiles,
    UnloadableAgent,
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
    REASONING_EFFORTS,
    AgentSpec,
    PermissionMode,
    PermissionRule,
    ReasoningEffort,
    ToolLimits,
)
from durable_subagents.errors import InvalidRequest

__all__ = [
    "ALL_TOOLS",
    "BUILTIN_AGENTS",
    "DEFAULT_ACTIVITY_OPTIONS",
    "PROTECTED_PATHS",
    "READ_ONLY_TOOLS",
    "REASONING_EFFORTS",
    "ActivityConfig",
    "ActivityOptions",
    "AgentFileError",
    "AgentFiles",
    "AgentSpec",
    "PermissionMode",
    "PermissionRule",
    "ReasoningEffort",
    "ToolLimits",
    "UnloadableAgent",
    "discover_agents",
    "find_project_root",
    "load_agent_file",
    "load_agents",
    "parse_activity_options",
    "resolve_agent",
    "scan_agents",
]


def resolve_agent(name: str, extra: Mapping[str, AgentSpec] | None = None) -> AgentSpec:
    """Look an agent up by name among ``extra`` (first) and the built-ins.

    A namespaced name (``plugin:agent``) also finds the agent its file defines, which
    is named ``plugin.agent``.

    Raises:
        InvalidRequest: no agent has that name (the message lists the known ones), or
            its file is broken (the message names the file, the line and the problem).
    """
    agents = {**BUILTIN_AGENTS, **(extra or {})}
    spec = agents.get(name)
    if spec is None and ":" in name:
        spec = agents.get(name.replace(":", "."))
    if spec is None:
        known = ", ".join(agents)
        raise InvalidRequest(f"unknown agent {name!r}; known: {known}")
    if isinstance(spec, UnloadableAgent):
        raise InvalidRequest(f"agent {name!r} cannot be used: {spec.error}")
    return spec
