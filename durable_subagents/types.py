"""Pydantic models shared by the client, the workflow and the activities.

Every workflow, activity and signal takes one of these models as its single argument
and returns one, so the pydantic data converter can evolve them field by field.
Field names are part of recorded histories: add fields with defaults, never rename.
"""

from __future__ import annotations

import functools
import hashlib
import json
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from durable_subagents.agents._spec import AgentSpec, ToolLimits

__all__ = [
    "AgentSpec",
    "CallDecision",
    "ChildState",
    "Decisions",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "ModelTurnInput",
    "ModelTurnResult",
    "PendingApproval",
    "TaskEvent",
    "TaskInfo",
    "TaskInput",
    "TaskResult",
    "TaskState",
    "TaskStatus",
    "ToolCall",
    "ToolCallInput",
    "ToolCallResult",
    "ToolSpec",
    "Usage",
]


class TaskStatus(StrEnum):
    """Where a task is in its life. The last four are terminal."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def terminal(self) -> bool:
        """Whether the task has stopped for good (a follow-up may still continue it)."""
        return self in _TERMINAL


_TERMINAL = {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.TIMED_OUT}


class Usage(BaseModel):
    """Token usage, summed over turns."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class ToolCall(BaseModel):
    """A tool call the model asked for.

    Large arguments (a whole file for ``write_file``) live in the blob store: then
    ``arguments`` is empty and ``arguments_ref`` names the blob.
    """

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_ref: str | None = None
    rule_target_truncated: bool = False
    """The argument permission rules match (command, path...) was too long to keep inline."""
    path: str | None = None
    """For a tool that takes a path: that path (or its default) resolved against the
    workspace, symlinks followed, relative to it (``.`` for the root; absolute when it
    lies outside). Path rules match this, not the raw argument."""


class Message(BaseModel):
    """One provider-neutral transcript message.

    ``content_ref`` set means ``content`` is only a preview and the full text is the
    named blob; the model-turn activity expands it before calling a provider.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    content_ref: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


class ToolSpec(BaseModel):
    """What a model is told about a tool: name, description and JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(BaseModel):
    """A provider-neutral request for one model turn (all blob references expanded)."""

    model: str
    """The provider's own model name (``gpt-4.1-mini``), without the provider prefix."""
    system: str = ""
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    max_tokens: int = 8192


class ModelResponse(BaseModel):
    """What a provider returns for one turn."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str | None = None
    model: str = ""


# ---------------------------------------------------------------- workflow and activities


class TaskInput(BaseModel):
    """The input of a ``SubagentWorkflow`` run.

    Carries a snapshot of the resolved agent, so a task runs the agent as it was when
    it was spawned, and spawning needs no worker.
    """

    agent: AgentSpec
    prompt: str
    description: str = ""
    parent_id: str | None = None
    model: str = "default"
    max_turns: int = 50
    turns_per_run: int | None = None
    """The spawn's turn budget; ``max_turns`` of a follow-up run is its start plus this."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    workspace: str | None = None
    time_limit: float | None = None
    approval_timeout: float | None = None
    """Seconds a pause waits for decisions; undecided calls are then rejected."""
    token_budget: int | None = None
    """Input plus output tokens this task and its children may use in all; then it
    stops with stop_reason ``token_budget``. Children spawned in one turn share what is
    left with their parent: n children get n/(n+1) of it, reserved until they finish."""
    parent_is_subagent: bool = False
    """Spawned by another subagent task: report pauses to it (it surfaces them)."""
    created_at: datetime | None = None
    state: TaskState | None = None
    """Set when the run continues an earlier one (continue-as-new or follow-up)."""


class TaskState(BaseModel):
    """What a run hands to the next run of the same task."""

    head: str | None = None
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    pending_messages: list[Message] = Field(default_factory=list)
    model: str | None = None
    runs: int = 1
    awaiting_input: bool = False
    """A follow-up run: wait for the input that comes with the start signal."""
    children: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Finished children of an earlier run (task id -> status, result, error)."""
    adopted: list[str] = Field(default_factory=list)
    """Tasks spawned through the client with this task as parent (cancelled with it)."""
    time_limit_from: datetime | None = None
    """When the time limit started counting (the first run's start, by the server)."""


@functools.cache
def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The serialized default of each optional field of ``model``."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if not field.is_required():
            value = field.get_default(call_default_factory=True)
            out[name] = value.model_dump() if isinstance(value, BaseModel) else value
    return out


def _strip(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """``data`` (a serialized ``model``) without the fields that hold their default."""
    defaults = _defaults(model)
    return {k: v for k, v in data.items() if k not in defaults or v != defaults[k]}


def _strip_calls(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``tool_calls`` stripped of defaults, if it has any."""
    if data.get("tool_calls"):
        data = {**data, "tool_calls": [_strip(c, ToolCall) for c in data["tool_calls"]]}
    return data


class _Compact(BaseModel):
    """An activity's input or result, serialized without defaults.

    Fields that hold their default (its own, and those of the messages and calls it
    holds) are left out: they would otherwise be repeated in every history event.
    """

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = _strip_calls(handler(self))
        if "new_messages" in data:
            data["new_messages"] = [_strip(_strip_calls(m), Message) for m in data["new_messages"]]
        if "call" in data:
            data["call"] = _strip(data["call"], ToolCall)
        return _strip(data, type(self))


class ModelTurnInput(_Compact):
    """Input of the ``model_turn`` activity: the transcript head plus what is new."""

    task_id: str
    head: str | None
    new_messages: list[Message]
    model: str
    tools: list[str] | None = None
    """Allowed tool names; ``None`` means every tool the worker has."""
    disallowed_tools: list[str] = Field(default_factory=list)
    read_only: bool = False
    extra_tools: list[ToolSpec] = Field(default_factory=list)
    """Tools the workflow itself handles (spawning subagents), offered besides the worker's."""
    turn: int
    workspace: str | None = None
    agent_name: str = ""
    max_tokens: int = 8192
    result_records: dict[str, str] = Field(default_factory=dict)
    """Tool results passed by name, not inline: call id -> record name. The workflow
    does this when a turn's results together are too large for one payload (many
    parallel calls); their messages in ``new_messages`` then have empty content."""
    known_tools: str | None = None
    """``tools_digest`` of the offered tools, read-only tools and sandbox the workflow
    holds from the turn before: a worker that would answer the same says so with
    ``ModelTurnResult.same_tools`` instead of repeating them in every turn's result."""


class ModelTurnResult(_Compact):
    """Result of the ``model_turn`` activity."""

    head: str
    text: str = ""
    text_ref: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str | None = None
    model: str = ""
    """The resolved ``provider:model`` that answered."""
    offered_tools: list[str] = Field(default_factory=list)
    """The tools the model was offered; calls to any other tool are refused."""
    read_only_tools: list[str] = Field(default_factory=list)
    """Which of the offered tools never change anything (permission modes allow them)."""
    sandbox: str | None = None
    """How the worker runs commands: ``bwrap``, ``none`` (on the host), or ``unavailable``."""
    same_tools: bool = False
    """The offered tools, read-only tools and sandbox are those of ``known_tools`` (the
    three fields above are then left empty)."""


def tools_digest(offered: list[str], read_only: list[str], sandbox: str | None) -> str:
    """A short fingerprint of what a model turn offered (see ``ModelTurnInput.known_tools``)."""
    text = json.dumps([offered, sorted(read_only), sandbox])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ToolCallInput(_Compact):
    """Input of the ``run_tool`` activity."""

    task_id: str
    call: ToolCall
    workspace: str | None = None
    network: bool = False
    """Whether the call's processes may use the network (the agent's ``network``)."""
    env: list[str] | None = None
    """The agent's ``env``: worker variables the call's processes may see."""
    limits: ToolLimits = Field(default_factory=ToolLimits)
    """The agent's resource limits (the worker's own are the ceiling)."""
    write_protected_paths: bool = False
    """The agent opted in to writes to ``.git``, ``.claude`` and the like."""


class ToolCallResult(_Compact):
    """Result of the ``run_tool`` activity: the output, or a preview and a blob reference."""

    call_id: str
    tool_name: str
    content: str = ""
    content_ref: str | None = None
    is_error: bool = False
    size: int = 0

    def to_message(self) -> Message:
        """The tool message the model sees next turn."""
        return Message(
            role="tool",
            content=self.content,
            content_ref=self.content_ref,
            tool_call_id=self.call_id,
            tool_name=self.tool_name,
            is_error=self.is_error,
        )


class PendingApproval(BaseModel):
    """A tool call waiting for a parent's decision."""

    call_id: str
    tool_name: str
    arguments_preview: str
    arguments_hash: str
    arguments_ref: str | None = None


class CallDecision(BaseModel):
    """A parent's decision on one paused tool call, bound to the call's arguments."""

    call_id: str
    arguments_hash: str
    approved: bool
    reason: str | None = None


class Decisions(BaseModel):
    """The ``decide`` signal: decisions on calls of one pause."""

    pause_id: str
    decisions: list[CallDecision]


class ChildState(BaseModel):
    """The ``child_state`` signal: a child subagent's pause state, for its parent task."""

    task_id: str
    status: TaskStatus
    pause_id: str | None = None
    pending_approvals: list[PendingApproval] = Field(default_factory=list)


class TaskResult(BaseModel):
    """The result of a ``SubagentWorkflow`` run that returned normally."""

    status: TaskStatus
    result: str = ""
    result_ref: str | None = None
    stop_reason: str | None = None
    error: str | None = None
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    head: str | None = None
    model: str | None = None
    pending_messages: list[Message] = Field(default_factory=list)
    """Tool results the conversation still owes (a stop at max_turns); a follow-up sends them."""
    children: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Subagents this run spawned that had finished (a follow-up run can still wait on them)."""


# ---------------------------------------------------------------- client-facing


class IgnoredDecision(BaseModel):
    """A decision the task dropped: for a pause that is over, or a call not pending."""

    pause_id: str
    call_ids: list[str]
    reason: str


class TaskInfo(BaseModel):
    """What a parent knows about a task."""

    id: str
    agent: str = ""
    description: str = ""
    status: TaskStatus
    result: str | None = None
    result_truncated: bool = False
    """The final answer is over 64 KiB: ``result`` is its head, and
    ``SubagentClient.get_result`` reads it whole from the blob store."""
    error: str | None = None
    pause_id: str | None = None
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    parent_id: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    stop_reason: str | None = None
    model: str | None = None
    run_id: str | None = None
    ignored_decisions: list[IgnoredDecision] = Field(default_factory=list)
    """The newest decisions the task dropped as stale (also in ``watch``'s events)."""
    unread_input: int = 0
    """Inputs the task received but never read, because it ended first."""
    retrying: str | None = None
    """While the task runs: the failure a model turn or tool call is being retried after
    (a model outage, a blob store that does not answer), with the attempt number."""
    settling: list[str] = Field(default_factory=list)
    """Set by ``cancel_task`` at its timeout: what the cancelling task still waits for."""
    max_turns: int | None = None
    """The task's turn limit (a child's is capped by what its parent had left)."""
    time_limit: float | None = None
    """Seconds the task may run (a child's is capped by what its parent had left)."""
    token_budget: int | None = None
    """Tokens the task and its children may use in all; None: no budget."""
    children: int = 0
    """Subagents this task has spawned (``spawn_subagent``), at most ``MAX_CHILDREN``."""
    sandbox: str | None = None
    """``none`` when the worker runs this task's commands on the host, ``unavailable``
    when it has no sandbox and refuses them; None: sandboxed (the default)."""

    @property
    def done(self) -> bool:
        """Whether the task reached a terminal status."""
        return self.status.terminal


class TaskEvent(BaseModel):
    """One event of ``SubagentClient.watch``.

    A model turn shows as its ``text`` events (the answer as it streams: each carries
    the new piece), then one ``turn`` event when the turn is recorded (``error`` set if
    it failed); then the turn's tool calls. The ``text`` pieces of a turn add up to its
    answer; a piece with ``summary="restarted"`` starts that text over (the model call
    was retried after part of an answer was shown).
    """

    kind: Literal[
        "status",
        "text",
        "turn",
        "tool_started",
        "tool_finished",
        "input",
        "decision",
        "decision_ignored",
        "closed",
    ]
    task_id: str
    time: datetime | None = None
    status: TaskStatus | None = None
    turn: int | None = None
    tool: str | None = None
    summary: str | None = None
    error: str | None = None
    text: str | None = None
    """A ``text`` event's new piece of the turn's answer."""


TaskInput.model_rebuild()
