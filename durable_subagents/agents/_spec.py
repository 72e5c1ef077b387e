"""The agent specification: what a subagent is allowed to be."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

PermissionMode = Literal["plan", "default", "accept_edits", "dont_ask"]
Action = Literal["allow", "ask", "deny"]

READ_ONLY_TOOLS = ("read_file", "list_files", "grep")
EDIT_TOOLS = ("write_file", "edit_file")
MODE_RANK: dict[str, int] = {"plan": 0, "default": 1, "accept_edits": 2, "dont_ask": 3}
"""Permission modes from the most restrictive to the most permissive."""
ALL_TOOLS = (*READ_ONLY_TOOLS, *EDIT_TOOLS, "bash")


class PermissionRule(BaseModel):
    """``tool`` + glob ``pattern`` (matched against the call's main argument) -> action.

    Rules are evaluated in order and the last match wins, as in OpenCode.
    """

    tool: str = "*"
    pattern: str = "*"
    action: Action


class AgentSpec(BaseModel):
    """A subagent: prompt, tools, permissions and limits.

    A snapshot of the resolved spec travels in the workflow input, so a task keeps the
    agent it was spawned with even if the agent's file changes later.
    """

    name: str
    description: str = ""
    system_prompt: str = ""
    model: str = "inherit"
    """``provider:model``, or ``inherit`` to use the spawner's or the worker's default."""
    tools: list[str] | None = None
    """Allowed tools; ``None`` means every tool the worker has."""
    disallowed_tools: list[str] = Field(default_factory=list)
    permissions: list[PermissionRule] = Field(default_factory=list)
    restrictions: list[PermissionRule] = Field(default_factory=list)
    """Rules added at spawn (deny or ask only); the stricter of both rule sets wins."""
    permission_mode: PermissionMode = "default"
    max_turns: int = 50
    may_spawn: bool = False
    approval_timeout: float | None = None
    """Seconds a pause waits for decisions before its calls are rejected (None: forever)."""

    def allowed_tools(self, available: list[str] | tuple[str, ...]) -> list[str]:
        """The tools this agent may call among ``available``, in ``available``'s order."""
        allowed = set(available if self.tools is None else self.tools)
        if self.permission_mode == "plan":
            allowed &= set(READ_ONLY_TOOLS)
        allowed -= set(self.disallowed_tools)
        return [t for t in available if t in allowed]
