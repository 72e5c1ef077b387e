"""A task's own payloads: its input, what a run hands the next, what it asks its worker.

Recorded in histories: the compatibility rule of ``_payloads`` holds here (fields are
only added, with a default). ``_payloads`` exports these with the other payloads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from durable_subagents.agents._activity_options import ActivityConfig, ActivityOptions
from durable_subagents.agents._spec import AgentSpec
from durable_subagents.types import Message, Usage
from durable_subagents.wire._ledger import LedgerState
from durable_subagents.wire._stream_items import StreamCarry

__all__ = ["ContextInput", "TaskInput", "TaskState", "WorkerBounds"]


class ContextInput(BaseModel):
    """What a model turn needs to keep the conversation within the context window.

    Set by workflows that compact: a model turn of a workflow that does not send it
    (one recorded before compaction) never compacts.
    """

    window: int | None = None
    """The agent's ``context_window``."""
    learned: int | None = None
    """The smallest maximum a provider named when it refused a request as too long."""
    tokens: int = 0
    """The input tokens the last request reported (or a refusal named)."""
    chars: int = 0
    """The characters of that request (with ``tokens``: characters per token)."""
    compacted: bool = False
    """The conversation was just compacted, as far as it goes: the turn asks the model
    whatever the estimate says (only the provider's refusal compacts again)."""


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
    streams_to_parent: bool = False
    """``parent_id`` is a task whose stream takes this one's events (a child, or a task
    registered with a running parent): the run forwards its stream's items to it."""
    stream_ancestors: list[str] = Field(default_factory=list)
    """The tasks whose streams take this one's items, nearest first: a watcher of any of
    them makes this task's turns publish their text live."""
    output_schema: dict[str, Any] | None = None
    """The JSON Schema the answer must match (checked by ``check_output_schema``): the
    model answers with the ``final_answer`` tool, and the task's result is the answer."""
    created_at: datetime | None = None
    state: TaskState | None = None
    """Set when the run continues an earlier one (continue-as-new or follow-up)."""
    notify_url: str | None = None
    """Where the spawn asked the task's events to be POSTed (a pause for a decision,
    its end); None: the worker's ``SUBAGENTS_NOTIFY_URL``, if it has one. Only a URL
    the worker's allowlist holds is ever posted to; a subagent's child has none (its
    pauses are its parent's events)."""
    activity_options: ActivityOptions | None = None
    """The worker's activity options the run is bound by (every option set), before its
    agent narrows them: a child's are its parent's narrowed ones, a run continued as new
    keeps its predecessor's. None: the run asks the worker that runs its first step."""
    max_depth: int | None = None
    """Levels of subagents that may exist below this task: its children get one fewer,
    and a task with none left is not offered ``spawn_subagent``. None: a run recorded
    before depths (a task spawned by a client may spawn, a child may not)."""
    depth: int = 0
    """How far below its tree's top this task is (0: the top; a child of it: 1)."""
    tree_root: str | None = None
    """The top task of this task's tree (None: this task is the top), which counts the
    tree's tasks (``max_tasks``)."""
    max_tasks: int | None = None
    """The top task's: tasks the tree may hold, itself included (None: no count)."""
    budget_usd: float | None = None
    """The tree's spend limit in USD when it started. The top task keeps the ledger
    (``LedgerState``) and pauses when it is spent; a task below reports its spend to
    the top (``tree_root``) and holds its turns while the top says so."""
    budget_warn_at: float | None = None
    """The top task's: the share of ``budget_usd`` (0-1) at which its ``notify_url``
    hears ``budget_warning``, once."""
    agents: dict[str, AgentSpec] | None = None
    """The agents this task may spawn, as its spawner knew them (built-ins, agent files,
    the client's ``agents``), narrowed by its agent's ``spawnable``: a child resolves
    its own children from its copy, without any client. None: the built-ins (a run
    recorded before the copy), or the task spawns none."""


class WorkerBounds(BaseModel):
    """What a task asks the worker that runs its first step, once, and keeps.

    The three activity kinds are ``ActivityOptions``'s fields, so a result recorded
    before the worker said more (an ``ActivityOptions``) reads as one of these.
    """

    model_turn: ActivityConfig = ActivityConfig()
    tool_call: ActivityConfig = ActivityConfig()
    compaction: ActivityConfig = ActivityConfig()
    max_depth: int | None = None
    """The worker's ``SUBAGENTS_MAX_DEPTH``; None: a worker that did not say."""

    def options(self) -> ActivityOptions:
        """The activity options alone."""
        return ActivityOptions(
            model_turn=self.model_turn, tool_call=self.tool_call, compaction=self.compaction
        )


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
    invalid_answers: int = 0
    """Answers of this run that did not match the output schema."""
    context: ContextInput | None = None
    """What the runs learned of the model's context window (see ``ContextInput``)."""
    compactions: int = 0
    """Compactions of the conversation so far."""
    stream: StreamCarry | None = None
    """The event stream's latest items and offsets (None: a run recorded before streams)."""
    tree_tasks: list[str] = Field(default_factory=list)
    """The top task's: the ids of the tasks its tree has started below it."""
    ledger: LedgerState | None = None
    """The top task's spend ledger (None: its tree has no budget)."""
