"""An agent that asks for bash and allows only git reads, and how it decides a line."""

from __future__ import annotations

from durable_subagents import policy
from durable_subagents.agents import AgentSpec, PermissionRule

GIT_ONLY = AgentSpec(
    name="git-only",
    permission_mode="dont_ask",
    permissions=[
        PermissionRule(tool="bash", pattern="*", action="ask"),
        PermissionRule(tool="bash", pattern="git status*", action="allow"),
        PermissionRule(tool="bash", pattern="git log*", action="allow"),
        PermissionRule(tool="bash", pattern="ls*", action="allow"),
    ],
)


def decide(spec: AgentSpec, command: str) -> str:
    return policy.decide(spec, "bash", {"command": command})
