"""What the workflow, its activities and its signals send and receive, and their names.

Compatibility rule: recorded histories. Everything here is written into Temporal
histories (workflow and activity inputs and results, signal arguments, the names
events are recorded under), and a running or paused task replays its history on
newer code. So:

- a model's fields are only ever added, with a default; never renamed, removed or
  given another type or default. The pydantic JSON of a model is what a history holds
  (the class's name and module are not in it, so classes may move);
- a name below never changes: the workflow, activities and signals are called by it,
  and the client reads histories by it.

This module is private: it is not API, and changes here need no deprecation (the two
activity names are also exported, as before, by ``durable_subagents.workflows``). The
public models it uses (``Message``, ``ToolCall``, ``Usage``...) live in
``durable_subagents.types``; being inside these payloads, they obey this rule too.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from pydantic import BaseModel, Field

from durable_subagents.agents._spec import (
    READ_ONLY_TOOLS,
    AgentSpec,
    PermissionMode,
    PermissionRule,
    ReasoningEffort,
    ToolLimits,
)
from durable_subagents.policy import rules_for
from durable_subagents.types import (
    Compaction,
    Message,
    PendingApproval,
    TaskStatus,
    ToolCall,
    ToolSpec,
    Usage,
)
from durable_subagents.wire._calls import (
    HELD_PATHS_SHOWN,
    UNRECORDED_READ_BYTES,
    HeldChanges,
    SettleInput,
    ToolCallInput,
    ToolCallResult,
    protected_changes,
)
from durable_subagents.wire._compact import Compact
from durable_subagents.wire._notify import (
    NotifyCall,
    NotifyEvent,
    NotifyInput,
    NotifyResult,
    NotifyTask,
)
from durable_subagents.wire._task import ContextInput, TaskInput, TaskState, WorkerBounds

__all__ = [
    "ACTIVITY_OPTIONS_ACTIVITY",
    "CHILD_STATE_SIGNAL",
    "COMPACT_ACTIVITY",
    "DECIDE_SIGNAL",
    "GIVE_UP_SIGNAL",
    "HELD_ERROR",
    "HELD_PATHS_SHOWN",
    "MAX_CALLS_KEPT",
    "MAX_CALLS_PER_TURN",
    "MODEL_TURN_ACTIVITY",
    "NOTIFY_ACTIVITY",
    "NOTIFY_WORKFLOW",
    "REGISTER_CHILD_SIGNAL",
    "RESERVE_TASK_ACTIVITY",
    "RESERVE_TASK_UPDATE",
    "RUN_TOOL_ACTIVITY",
    "SEND_INPUT_SIGNAL",
    "STATUS_QUERY",
    "TOOL_QUEUE_SUFFIX",
    "TREE_FULL",
    "UNRECORDED_READ_BYTES",
    "WORKFLOW",
    "CallDecision",
    "ChildState",
    "CompactInput",
    "CompactResult",
    "ContextInput",
    "Decisions",
    "HeldChanges",
    "ModelTurnInput",
    "ModelTurnResult",
    "NotifyCall",
    "NotifyEvent",
    "NotifyInput",
    "NotifyResult",
    "NotifyTask",
    "SettleInput",
    "TaskInput",
    "TaskState",
    "ToolCallInput",
    "ToolCallResult",
    "TurnReads",
    "WorkerBounds",
    "model_queue",
    "protected_changes",
    "tool_queue",
    "tools_digest",
]

# ---------------------------------------------------------------- names

WORKFLOW = "SubagentWorkflow"
"""The workflow type of a subagent task (input ``TaskInput``, result ``TaskResult``)."""
MODEL_TURN_ACTIVITY = "model_turn"
"""The activity that runs one model turn: ``ModelTurnInput`` -> ``ModelTurnResult``."""
COMPACT_ACTIVITY = "compact_context"
"""The activity that compacts a task's conversation: ``CompactInput`` -> ``CompactResult``."""
RUN_TOOL_ACTIVITY = "run_tool"
"""The activity (or local activity) that runs one tool call: ``ToolCallInput`` ->
``ToolCallResult``."""
ACTIVITY_OPTIONS_ACTIVITY = "activity_options"
"""The local activity a run asks its worker's activity options with, once, before its
first model turn: ``None`` -> ``ActivityOptions`` (every option set)."""
SETTLE_CHANGES_ACTIVITY = "settle_changes"
"""The activity that applies or drops a call's held changes once a person decided:
``SettleInput`` -> ``ToolCallResult``."""
OWN_TASKS_ACTIVITY = "own_registered_tasks"
"""The activity that keeps of some registered task ids those whose parent is the
asking task: ``[parent_id, [task_id, ...]]`` -> ``[task_id, ...]``."""
RESERVE_TASK_ACTIVITY = "reserve_tree_task"
"""The activity that counts a new task in its tree before it starts, by the top task's
update: ``[root_id, task_id]`` -> None (``TreeFull`` when the tree holds all it may)."""
RESERVE_TASK_UPDATE = "reserve_tree_task"
"""The top task's update that counts a new task of its tree (the new task's id)."""
TREE_FULL = "TreeFull"
"""The error type of a reservation its tree's top task refused (never retried)."""
RERUN_TOOL = "run_again"
"""The name a pause shows for a call its worker's death cut off (the decision to run it
again, for agents with ``on_interrupted="ask"``)."""
HELD_TOOL = "apply_changes"
"""The name a pause shows for a call's held changes (the decision to apply them)."""
GIVE_UP_SIGNAL = "give_up"
"""A task held by a bug in workflow code is to fail with the error instead (the reason,
a ``str``; sent by a worker with ``SUBAGENTS_FAIL_HELD_AFTER``)."""
HELD_ERROR = "HeldByBug"
"""The error type of a task that failed after a bug held it too long."""
SEND_INPUT_SIGNAL = "send_input"
"""Steering or follow-up input (a ``str``); also the start signal of a follow-up run."""
DECIDE_SIGNAL = "decide"
"""Decisions on the calls of a pause (``Decisions``)."""
CHILD_STATE_SIGNAL = "child_state"
"""A child subagent's pause state, sent to its parent task (``ChildState``)."""
REGISTER_CHILD_SIGNAL = "register_child"
"""A task spawned through the client names its parent task (the child's id, a ``str``)."""
STATUS_QUERY = "status"
"""The live state of a task (the memo's fields), answered by a worker."""
NOTIFY_WORKFLOW = "SubagentNotify"
"""The workflow that delivers one notification (``NotifyInput`` -> ``NotifyResult``): a
task starts it as a child it abandons, so delivery outlives the task and never holds
it up."""
NOTIFY_ACTIVITY = "send_notification"
"""The activity that POSTs one notification to its URL (``NotifyInput`` -> ``None``)."""
NOTIFY_UNSET = "NotifyUnset"
"""The error type of a notification without a URL on a worker without one: nothing to
post, not a failure (a task that ended before it learnt whether its workers notify)."""
MAX_CALLS_PER_TURN = 64
"""Tool calls of one model turn that may run; the rest go back as tool errors that say
so. A turn of 8,000 calls that ask made the pause's memo over Temporal's 2 MB payload
limit, and every workflow task of the task failed from then on; 64 keeps a pause's memo
near 20 KB, and a parent's with 16 paused children near 350 KB."""
MAX_CALLS_KEPT = 2 * MAX_CALLS_PER_TURN
"""Tool calls of one model answer a worker keeps; the rest are dropped from the answer
(the transcript too), so the results the next turn carries stay small. The calls kept
past ``MAX_CALLS_PER_TURN`` come back as errors that tell the model the limit."""
TOOL_QUEUE_SUFFIX = "-tools"
"""A task's tool calls go to its task queue's name plus this: a queue with slots of its
own, so tool calls, which may each run for minutes, never hold the slots every task's
model turns need."""


def tool_queue(task_queue: str) -> str:
    """The queue the tool calls of tasks on ``task_queue`` go to."""
    return task_queue + TOOL_QUEUE_SUFFIX


def model_queue(task_queue: str, provider: str) -> str:
    """The queue the model turns of ``provider`` go to, for tasks on ``task_queue``.

    Used when workers rate-limit that provider (``SUBAGENTS_MODEL_RATE_LIMITS``).
    """
    return f"{task_queue}-model-{provider}"


# ---------------------------------------------------------------- workflow and activities


class ModelTurnInput(Compact):
    """Input of the ``model_turn`` activity: the transcript head plus what is new."""

    task_id: str
    head: str | None
    new_messages: list[Message]
    model: str
    tools: list[str] | None = None
    """Allowed tool names; ``None`` means every tool the worker has."""
    disallowed_tools: list[str] = Field(default_factory=list)
    read_only: bool = False
    plan_tools: list[str] = Field(default_factory=list)
    """With ``read_only`` (a ``plan`` agent): the tool globs of the agent's ``allow``
    rules. An MCP tool the agent lists is offered in ``plan`` only where one matches it
    (read-only by the rules' word: a server's own hint is never trusted)."""
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
    """``tools_digest`` of the offered tools, read-only tools, sandbox and protected paths
    the workflow holds from the turn before: a worker that would answer the same says so with
    ``ModelTurnResult.same_tools`` instead of repeating them in every turn's result."""
    output_schema: dict[str, Any] | None = None
    """The task's output schema, on a run's first turn: the model is offered the
    ``final_answer`` tool, and the turn's answer is judged against it."""
    output_schema_ref: str | None = None
    """The same schema on later turns: the blob the first turn stored it as
    (``ModelTurnResult.output_schema_ref``), so a history holds it once per run."""
    reasoning_effort: ReasoningEffort | None = None
    """The agent's reasoning effort (``low``, ``medium``, ``high``); None: the model's."""
    temperature: float | None = None
    stream_watched: bool = False
    """Someone watched the task's stream when the turn was scheduled: publish its text
    live from the first piece (else only once ``stream_watch_ids`` say someone does)."""
    stream_watch_ids: list[str] = Field(default_factory=list)
    """The task and the tasks above it whose ``watched`` memo the turn checks."""
    stream_parent: str | None = None
    """The task whose stream takes this one's items (its parent): the turn sends its
    live pieces there directly too (``StreamDirect``)."""
    stream_after: int = 0
    """The task's stream end when the turn was scheduled (``StreamDirect.after``)."""
    context: ContextInput | None = None
    """Set by workflows that compact: the turn may answer ``compact`` instead of
    calling the model (``None``: it always calls the model, as before compaction)."""
    reads: TurnReads | None = None
    """Set when the workflow would run this turn's allowed reads right after it: the turn
    runs them itself, before it answers (``ModelTurnResult.read_results``). None: it
    runs none (a workflow recorded before, an agent with ``local_read_tools=False``, a
    turn whose calls may not run: the last one, or one of a task with a token budget or
    an output schema)."""
    may_redirect: bool = False
    """The workflow takes ``ModelTurnResult.model_queue``: a worker that rate-limits
    the turn's provider on a queue of its own may send the turn there instead of
    answering it."""


class ModelTurnResult(Compact):
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
    """The offered tools, read-only tools, sandbox and protected paths are those of
    ``known_tools`` (those fields are then left empty)."""
    protected_paths: list[str] | None = None
    """The worker's protected paths (``PROTECTED_PATHS`` and its own additions): the
    workflow decides this turn's calls with them, so the list is in the history and a
    replay decides alike. None when the turn reported no tools (``same_tools``): the
    list of the turn before stands."""
    output: dict[str, Any] | None = None
    """With an output schema: the turn's answer, which matches it."""
    output_error: str | None = None
    """With an output schema: what is wrong with the turn's answer (a ``final_answer``
    call, or a text reply with no tool calls) when it does not match."""
    output_call: str | None = None
    """The id of the ``final_answer`` call ``output`` or ``output_error`` is about."""
    output_schema_ref: str | None = None
    """The blob the turn stored ``ModelTurnInput.output_schema`` as."""
    compact: str | None = None
    """Set when the model was not answered: the context must be compacted first
    (``threshold``: it would pass the share of the window allowed; ``context_length``:
    the provider refused it as too long). ``head`` then holds the turn's new messages
    and the turn is to be run again after ``compact_context``."""
    chars: int = 0
    """Characters of the request (sizes are estimated from them; see ``_context``)."""
    context_tokens: int | None = None
    """The request's tokens as the provider's refusal counted them."""
    window: int | None = None
    """The context window the provider's refusal named."""
    stream_from: int | None = None
    """Characters of ``text`` the turn already published to the task's stream as it was
    written (None: a worker that streams nothing); the workflow publishes the rest."""
    stream_restarted: bool = False
    """The turn's attempt is a retry that published nothing yet: the text the workflow
    publishes starts the turn's text over."""
    notify: bool = False
    """The worker posts tasks' events to its own ``SUBAGENTS_NOTIFY_URL`` (for a task
    whose spawn named no ``notify_url``); part of ``known_tools``."""
    thinking: int = 0
    """Characters of thinking the answer came with. The thinking itself is only in the
    transcript (``Message.reasoning``), never in a result: a watcher reads it there."""
    read_results: dict[str, ToolCallResult] = Field(default_factory=dict)
    """The results of the calls the turn ran itself, by call id: the built-in reads its
    task's rules allow (``ModelTurnInput.reads``). The workflow decides every call as
    before and takes these results for the calls it allows instead of running them."""
    model_queue: str | None = None
    """Set instead of an answer: the model was not called, schedule the turn (and the
    task's later turns) on this queue, whose workers rate-limit the provider."""


class CompactInput(Compact):
    """Input of the ``compact_context`` activity: the turn the compaction is for."""

    turn: ModelTurnInput
    """The turn to run after it (its ``head`` is the conversation to compact)."""
    reason: str = "threshold"
    number: int = 1
    """The task's compaction count with this one."""
    attempt: int = 1
    """Compactions in a row for this turn (each later one goes further)."""


class CompactResult(Compact):
    """Result of the ``compact_context`` activity."""

    head: str
    """The transcript with the compaction point appended."""
    compaction: Compaction
    usage: Usage = Field(default_factory=Usage)
    """The summary call's tokens."""
    changed: bool = True
    """False when nothing could be compacted further (``head`` is the input's): the
    turn is then run as it is."""


def tools_digest(
    offered: list[str],
    read_only: list[str],
    sandbox: str | None,
    protected: list[str] | None = None,
    notify: bool = False,
) -> str:
    """A short fingerprint of what a model turn offered (see ``ModelTurnInput.known_tools``).

    Without ``protected`` it is the digest of workers that reported no protected paths;
    without ``notify``, of workers that post no events of their own accord.
    """
    return _digest(
        tuple(offered),
        tuple(sorted(read_only)),
        sandbox,
        None if protected is None else tuple(protected),
        notify,
    )


@functools.lru_cache(maxsize=256)
def _digest(
    offered: tuple[str, ...],
    read_only: tuple[str, ...],
    sandbox: str | None,
    protected: tuple[str, ...] | None,
    notify: bool,
) -> str:
    """``tools_digest`` of the same few offers, turn after turn, computed once each."""
    fields: list[object] = [offered, read_only, sandbox]
    if protected is not None:
        fields.append(protected)
    if notify:
        fields.append("notify")
    text = json.dumps(fields)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class TurnReads(Compact):
    """What a model turn needs to run its model's reads itself (``ModelTurnInput.reads``).

    The agent's fields the verdict on a read and its ``run_tool`` input are made of, and
    of its rules only those that can match a built-in read: a few bytes per turn.
    """

    mode: PermissionMode = "default"
    permissions: list[PermissionRule] = Field(default_factory=list)
    restrictions: list[PermissionRule] = Field(default_factory=list)
    network: bool = False
    env: list[str] | None = None
    limits: ToolLimits = Field(default_factory=ToolLimits)
    write_protected_paths: bool = False

    @classmethod
    def of(cls, spec: AgentSpec) -> TurnReads:
        """The part of ``spec`` that judges and runs its built-in reads."""
        return cls(
            mode=spec.permission_mode,
            permissions=list(rules_for(spec.permissions, *READ_ONLY_TOOLS)),
            restrictions=list(rules_for(spec.restrictions, *READ_ONLY_TOOLS)),
            network=spec.network,
            env=spec.env,
            limits=spec.limits,
            write_protected_paths=spec.write_protected_paths,
        )

    def agent(self, name: str) -> AgentSpec:
        """An agent that judges and runs the built-in reads as the task's agent does."""
        return AgentSpec(
            name=name,
            permission_mode=self.mode,
            permissions=self.permissions,
            restrictions=self.restrictions,
            network=self.network,
            env=self.env,
            limits=self.limits,
            write_protected_paths=self.write_protected_paths,
        )


# ---------------------------------------------------------------- signals


class CallDecision(BaseModel):
    """A parent's decision on one paused tool call, bound to the call's arguments."""

    call_id: str
    arguments_hash: str
    approved: bool
    reason: str | None = None
    budget_usd: float | None = None
    """On an approved ``raise_budget``: the tree's new budget (None: one more of the
    budget it started with)."""


class Decisions(BaseModel):
    """The ``decide`` signal: decisions on calls of one pause."""

    pause_id: str
    decisions: list[CallDecision]

    def summary(self) -> str:
        """The decisions in a line (``pause P: approve c1, reject c2 (why)``)."""
        parts = [
            f"{'approve' if d.approved else 'reject'} {d.call_id}"
            + (f" ({d.reason})" if d.reason else "")
            for d in self.decisions[:20]
        ]
        line = f"pause {self.pause_id}: " + ", ".join(parts)
        return line if len(line) <= 300 else line[:299] + "…"


class ChildState(BaseModel):
    """The ``child_state`` signal: a child subagent's pause state, for its parent task."""

    task_id: str
    status: TaskStatus
    pause_id: str | None = None
    pending_approvals: list[PendingApproval] = Field(default_factory=list)


# ---------------------------------------------------------------- notifications


TaskState.model_rebuild()
TaskInput.model_rebuild()
