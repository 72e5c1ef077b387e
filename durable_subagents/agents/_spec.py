"""The agent specification: what a subagent is allowed to be."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from durable_subagents.agents._activity_options import ActivityOptions, check_agent_options

# Re-exported: the sandbox and the tools read the default list from here.
from durable_subagents.agents._protected import PROTECTED_PATHS as PROTECTED_PATHS
from durable_subagents.agents._tool_names import covers, is_mcp, rule_names

PermissionMode = Literal["plan", "default", "accept_edits", "dont_ask"]
Action = Literal["allow", "ask", "deny"]
ReasoningEffort = Literal["low", "medium", "high"]
OnInterrupted = Literal["report", "rerun", "ask"]
REASONING_EFFORTS: tuple[ReasoningEffort, ...] = ("low", "medium", "high")
"""Reasoning efforts from the least to the most."""
MAX_OUTPUT_TOKENS = 1_000_000
"""The largest ``max_output_tokens`` an agent may ask for (models allow far less)."""

READ_ONLY_TOOLS = ("read_file", "list_files", "grep")
EDIT_TOOLS = ("write_file", "edit_file")
SPAWN_TOOLS = ("spawn_subagent", "wait_subagents")
"""The tools an agent with ``may_spawn`` is offered; the workflow runs them itself."""
ALL_TOOLS = (*READ_ONLY_TOOLS, *EDIT_TOOLS, "bash")


class ToolLimits(BaseModel):
    """Resource limits of one tool call's processes; ``None`` keeps the worker's value.

    An agent (or a spawn) can only lower them: the worker applies the smaller of its
    own limit and the agent's.
    """

    processes: int | None = Field(None, ge=1)
    """Processes and threads alive at once in one call."""
    memory_mb: int | None = Field(None, ge=16)
    """Memory of one call's processes, in MiB (per process where no cgroup is available)."""
    file_size_mb: int | None = Field(None, ge=1)
    """Largest file one call may write, in MiB."""
    cpu_seconds: int | None = Field(None, ge=1)
    """CPU time of each process of one call, in seconds."""
    open_files: int | None = Field(None, ge=16)
    """Open file descriptors per process."""

    def capped_by(self, other: ToolLimits) -> ToolLimits:
        """The stricter of two sets of limits, field by field."""
        merged: dict[str, int | None] = {}
        for name in type(self).model_fields:
            values = [v for v in (getattr(self, name), getattr(other, name)) if v is not None]
            merged[name] = min(values) if values else None
        return ToolLimits(**merged)

    def filled_from(self, defaults: ToolLimits) -> ToolLimits:
        """These limits, with each unset field taken from ``defaults``."""
        return ToolLimits(
            **{
                name: getattr(self, name) if getattr(self, name) is not None else value
                for name, value in defaults.model_dump().items()
            }
        )


DEFAULT_LIMITS = ToolLimits(
    processes=256, memory_mb=2048, file_size_mb=512, cpu_seconds=600, open_files=1024
)
"""What a worker allows each tool call unless configured otherwise (next to the model,
not in ``config``: the file tools' processes use it without the worker's settings)."""


MAX_DEPTH_LIMIT = 10
"""The deepest tree any setting may ask for (a worker's ``SUBAGENTS_MAX_DEPTH`` too)."""
DEFAULT_WORKER_DEPTH = 5
"""A worker's ``SUBAGENTS_MAX_DEPTH`` when it is not set (Claude Code's hard cap)."""
DEFAULT_MAX_DEPTH = 3
"""Levels of subagents a task that may spawn gets when nobody says (Claude Code's)."""


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
    """Offered ``spawn_subagent`` and ``wait_subagents`` (agent files: the ``Agent`` or
    ``Task`` tool in ``tools``), while its task has depth left (``max_depth``)."""
    spawnable: list[str] | None = None
    """The agents it may spawn, by name (agent files: ``Agent(explore, reviewer)``);
    None: every agent its spawner knew."""
    max_depth: int | None = Field(None, ge=0, le=MAX_DEPTH_LIMIT)
    """Levels of subagents its tasks may have below them (agent files: ``maxDepth``);
    None: the spawn's, else 3. A worker allows at most ``SUBAGENTS_MAX_DEPTH``."""
    approval_timeout: float | None = None
    """Seconds a pause waits for decisions before its calls are rejected (None: forever)."""
    network: bool = False
    """Whether tool processes may use the network (off: a private network namespace
    with only loopback, so nothing reaches Temporal, the blob store or the internet)."""
    env: list[str] | None = None
    """Names of worker environment variables passed to tool processes, among those the
    worker passes (``SUBAGENTS_TOOL_ENV``); ``None``: all of those."""
    limits: ToolLimits = Field(default_factory=ToolLimits)
    """Resource limits of each tool call, below the worker's (never above)."""
    on_interrupted: OnInterrupted = "report"
    """What becomes of a tool call that may change anything (``bash``, edits, MCP tools)
    when its worker died while it ran: ``report`` (the model reads that it was cut off,
    after how long, with its output so far, and decides), ``rerun`` (it runs again, as
    a read does), or ``ask`` (a person decides whether it runs again)."""
    write_protected_paths: bool = False
    """Opt in to writes to the protected paths (``PROTECTED_PATHS``: ``.git``, ``.claude``,
    hook managers' and editors' configuration...) without asking."""
    context_window: int | None = Field(None, ge=1024)
    """The model's context window in tokens, when the worker's table does not know it
    (a local model) or the agent should use less of it: the worker compacts the
    conversation before a turn passes ``SUBAGENTS_COMPACT_AT`` (80 %) of it."""
    local_read_tools: bool = True
    """Run ``read_file``, ``list_files`` and ``grep`` without an activity of their own: the
    model turn that asked for them runs the ones the rules allow before it answers (a
    turn that reads costs one activity and one workflow task), and the workflow runs
    the rest, once approved, as local activities. A worker crash mid-read runs the turn
    again elsewhere, model call included; a cancel reaches a running read with the
    turn's next heartbeat (1 s). False: every call is an activity of its own."""

    reasoning_effort: ReasoningEffort | None = None
    """How hard a reasoning model thinks before each answer (OpenAI's ``reasoning_effort``,
    Anthropic's extended thinking); None: the model's default. A spawn may lower it,
    never raise it."""
    temperature: float | None = Field(None, ge=0, le=2)
    """Sampling temperature; None: the model's default."""
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_OUTPUT_TOKENS)
    """Most tokens one model answer may take, reasoning included (Anthropic's thinking gets
    its effort's budget on top); None: 8,192."""

    activity_options: ActivityOptions | None = None
    """Shorter timeouts and fewer attempts for this agent's model turns, tool calls and
    compactions than its worker's (``start_to_close``, ``heartbeat``,
    ``schedule_to_close``, ``maximum_attempts``); a value beyond the worker's is kept at
    the worker's. Its children take the narrowed values. None: the worker's."""

    @field_validator("activity_options")
    @classmethod
    def _narrowing_only(cls, value: ActivityOptions | None) -> ActivityOptions | None:
        return None if value is None else check_agent_options(value)

    def allowed_tools(self, available: list[str] | tuple[str, ...]) -> list[str]:
        """The tools this agent may call among ``available``, in ``available``'s order.

        ``mcp__<server>`` in ``tools`` or ``disallowed_tools`` stands for all of that
        server's tools (``covers``). In ``plan``, the read-only tools, and an MCP tool the
        agent lists where one of its ``allow`` rules names it, as a worker offers them.
        """
        listed = self.tools
        allowed = [t for t in available if listed is None or any(covers(n, t) for n in listed)]
        if self.permission_mode == "plan":
            allows = [r.tool for r in self.permissions if r.action == "allow" and is_mcp(r.tool)]
            allowed = [
                t
                for t in allowed
                if t in READ_ONLY_TOOLS
                or (listed is not None and is_mcp(t) and any(rule_names(a, t) for a in allows))
            ]
        return [t for t in allowed if not any(covers(n, t) for n in self.disallowed_tools)]
