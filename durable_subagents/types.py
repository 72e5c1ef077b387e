"""Public models: what ``SubagentClient`` returns, and what providers and tools see.

Compatibility rule: API stability. These are imported by users (``TaskInfo``,
``TaskEvent``, ``TaskStatus``...), so a name or field here changes only with a
deprecation. Some of them are also parts of what histories record (``Message``,
``ToolCall``, ``Usage``, ``TaskStatus``, ``PendingApproval``, ``ToolSpec``, and
``TaskResult``, the workflow's result): for those, the rule of recorded histories
holds as well, so their fields are only added, with defaults.

The workflow's, activities' and signals' own payloads, which only recorded histories
constrain, are in the private ``durable_subagents.wire._payloads``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    computed_field,
    model_serializer,
)

from durable_subagents.agents._spec import AgentSpec, ReasoningEffort

__all__ = [
    "AgentSpec",
    "Compaction",
    "IgnoredDecision",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "PendingApproval",
    "ReasoningBlock",
    "TaskEvent",
    "TaskInfo",
    "TaskResult",
    "TaskStatus",
    "ToolCall",
    "ToolImage",
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
    """Token usage, summed over model calls (turns, and the summaries of compactions).

    ``input_tokens`` counts every input token of every request, those read from and
    written to the provider's prompt cache included: Anthropic's ``input_tokens`` +
    ``cache_creation_input_tokens`` + ``cache_read_input_tokens``, OpenAI's
    ``prompt_tokens``. The two cache fields say how many of them the cache served or
    stored (as OpenTelemetry's ``gen_ai.usage.cache_read.input_tokens`` does), so
    ``input_tokens - cache_read_tokens - cache_write_tokens`` were billed at the full
    rate. A token budget counts ``input_tokens`` whole, cached ones too: it bounds the
    work the model does, not the bill.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    """Output tokens the model spent reasoning before it answered (part of
    ``output_tokens``; OpenAI's ``completion_tokens_details.reasoning_tokens``)."""
    cache_read_tokens: int = 0
    """Input tokens read from the provider's prompt cache (billed at about a tenth)."""
    cache_write_tokens: int = 0
    """Input tokens written to the prompt cache (Anthropic bills them at 1.25x)."""
    estimated: bool = False
    """Some of the counts are estimates: a server reported no usage for a call, so its
    tokens were counted as 4 characters of the request's and the answer's JSON a token."""
    cost_usd: float | None = None
    """What the tokens cost in USD, at the worker's prices (``docs/models.md#prices``),
    rounded to a billionth of a dollar. A sum holds the parts that had a price: None
    only when none had (a model without a price, or usage recorded before prices)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            estimated=self.estimated or other.estimated,
            cost_usd=_cost_sum(self.cost_usd, other.cost_usd),
        )

    @model_serializer(mode="wrap")
    def _without_unknown_cost(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out while None: usage recorded before prices (and of models without
        # one) is written as it always was, in memos, results and histories.
        data: dict[str, Any] = handler(self)
        if data.get("cost_usd", 0) is None:
            del data["cost_usd"]
        return data


def _cost_sum(a: float | None, b: float | None) -> float | None:
    """Two costs added, rounded as each is (9 places); None only when both are."""
    if a is None or b is None:
        return b if a is None else a
    return round(a + b, 9)


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
    lies outside). Path rules match this, and the file tools run only where it still
    leads: the decision is bound to it."""
    written_path: str | None = None
    """The same path as written, normalized without following symlinks; set only where
    a symlink makes it differ from ``path``. Rules judge both (the stricter answer wins)."""
    read_only_hint: bool | None = None
    """For an MCP tool: what its server says of it (``readOnlyHint``), set by the worker.
    Shown to a person deciding on the call; never trusted to decide anything."""


class Compaction(BaseModel):
    """A compaction point: from here on the model was sent a shorter view of the task.

    Indices count the transcript's own messages (compaction points left out): tool
    results before ``noted`` were sent as short notes naming the call, and the
    messages from the end of the task's prompt up to ``summarized`` as the summary
    this point's message holds. Every message stays in the transcript, whole.
    """

    number: int
    """1 for the task's first compaction, 2 for the next..."""
    reason: str = "threshold"
    """``threshold`` (the context neared the window) or ``context_length`` (the
    provider refused the request as too long)."""
    noted: int = 0
    summarized: int = 0
    tokens_before: int = 0
    """The context's size before, in tokens (estimated)."""
    tokens_after: int = 0
    window: int = 0
    """The model's context window it was compacted for."""
    model_calls: int = 0
    """Model calls it took: 1 when it wrote a summary, else 0."""


THINKING_SEPARATOR = "\n\n"
"""What separates the texts of a turn's thinking blocks when they are shown as one."""


class ReasoningBlock(BaseModel):
    """A block of a model's reasoning, kept exactly as the provider sent it.

    Anthropic's extended thinking: a ``thinking`` block (its text and the ``signature``
    that lets the API check it came from the model) or a ``redacted_thinking`` block
    (opaque ``data``). OpenAI's Responses API: a ``reasoning`` item (``data`` is the
    item's JSON, its ``encrypted_content`` included; ``thinking`` its summary). The APIs
    want them back unchanged, in their order, so they are stored as they arrived and
    sent again as they are; they are never the answer. Each provider sends back only
    its own kinds.
    """

    type: Literal["thinking", "redacted_thinking", "reasoning"] = "thinking"
    thinking: str = ""
    signature: str = ""
    data: str = ""
    """A ``redacted_thinking`` block's encrypted content; a ``reasoning`` item's JSON."""


ImageType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
"""The image formats a tool's result may carry: those both providers' APIs take."""
IMAGE_TYPES: tuple[ImageType, ...] = ("image/png", "image/jpeg", "image/gif", "image/webp")


class ToolImage(BaseModel):
    """An image a tool's result carries, kept in the blob store: messages name it.

    The model is shown it where the provider's API takes images in (or beside) a tool
    result; elsewhere the result's text says it was there (see ``Message.images``).
    """

    media_type: ImageType
    ref: str
    """The blob that holds the image's bytes."""
    size: int = 0
    """The image's size in bytes."""
    data: str = ""
    """The image base64-encoded: set only in a ``ModelRequest`` (the model turn reads
    the blob), never in what is stored or recorded."""


class Message(BaseModel):
    """One provider-neutral transcript message.

    ``content_ref`` set means ``content`` is only a preview and the full text is the
    named blob; the model-turn activity expands it before calling a provider.

    A message with ``compaction`` set marks a compaction point (role ``system``): its
    content is the summary the model was given from there on in place of the earlier
    turns ("" if the compaction only turned tool results into notes).

    An assistant message's ``reasoning`` holds the thinking blocks the model wrote
    before its answer, byte for byte (signatures included); ``content`` never holds
    any of it.

    A tool message's ``images`` are images its result carries (an MCP server's
    screenshot), by blob reference; its ``content`` names each of them in text, so a
    view without them (a provider that takes none, a compacted result) still says
    they were there.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    content_ref: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    compaction: Compaction | None = None
    reasoning: list[ReasoningBlock] = Field(default_factory=list)
    images: list[ToolImage] = Field(default_factory=list)

    @property
    def thinking(self) -> str:
        """The text of the message's thinking blocks, one after the other ("" if none)."""
        return thinking_text(self.reasoning)


def thinking_text(blocks: list[ReasoningBlock]) -> str:
    """The readable text of reasoning blocks (redacted ones have none)."""
    return THINKING_SEPARATOR.join(b.thinking for b in blocks if b.thinking)


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
    reasoning_effort: ReasoningEffort | None = None
    """How hard a reasoning model thinks before it answers; None: the model's default."""
    temperature: float | None = None
    """Sampling temperature; None: the model's default."""
    turn: int = 0
    """The task's turn this request is for (1, 2...); 0 when it is no turn (a summary)."""
    purpose: Literal["turn", "summary"] = "turn"
    """``summary``: a compaction's summary call (no tools offered)."""
    cache_key: str | None = None
    """A stable name of the conversation (the task id) for providers that route
    requests to their prompt cache by it (OpenAI's ``prompt_cache_key``)."""
    prompt_cache: bool = True
    """Whether to ask for prompt caching (Anthropic's ``cache_control`` breakpoints)."""
    output_schema: dict[str, Any] | None = None
    """The JSON Schema of the task's structured answer, for providers that can hold the
    answer's text to it (the Responses API's ``text.format``); the ``final_answer`` tool
    is among ``tools`` either way."""


class ModelResponse(BaseModel):
    """What a provider returns for one turn."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str | None = None
    model: str = ""
    reasoning: list[ReasoningBlock] = Field(default_factory=list)
    """The thinking blocks before the answer, as the provider sent them."""


# ---------------------------------------------------------------- what a parent sees


class PendingApproval(BaseModel):
    """A tool call waiting for a parent's decision."""

    call_id: str
    tool_name: str
    arguments_preview: str
    arguments_hash: str
    arguments_ref: str | None = None
    resolved_path: str | None = None
    """Where the call's path leads through symlinks, when that differs from what it says
    (``hk/x`` written, ``.git/hooks/x`` resolved): what an approval is bound to. The call
    runs only if the path still leads there."""


class TaskResult(BaseModel):
    """The result of a ``SubagentWorkflow`` run that returned normally.

    What awaiting a ``start_subagent`` handle gives, and what a history records as the
    run's result.
    """

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
    output: dict[str, Any] | None = None
    """The structured answer, validated against the spawn's output schema (``result``
    is its JSON text); None when the spawn gave no schema or no answer matched."""
    compactions: int = 0
    """Times the conversation was compacted to fit the model's context window."""
    tree_usage: Usage | None = None
    """Usage of this task and every subagent below it that finished (None: it spawned none)."""
    stream_end: int | None = None
    """The offset after the run's last stream event (a follow-up run's stream goes on from
    it); None: a run recorded before streams."""


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
    output: dict[str, Any] | None = None
    """The structured answer when the spawn gave an ``output_schema``: validated against
    it (``result`` is its JSON text). None otherwise, and for a task that stopped
    before a valid answer: an answer that does not match is never reported here."""
    pause_id: str | None = None
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    turns: int = 0
    """Model turns taken, the running one included; 0 for a task that ended before any
    model answer (it failed or was stopped at its first model call)."""
    usage: Usage = Field(default_factory=Usage)
    tree_usage: Usage | None = None
    """Usage of this task and of every subagent below it, finished or running; None
    when it spawned none. A running subagent counts with what its memo last said
    (``check_task`` reads those of a running tree; ``list_tasks`` counts finished
    subagents only)."""
    tree_cost_usd: float | None = None
    """What this task and every subagent below it cost in USD (``tree_usage``'s cost,
    or ``usage``'s without subagents); None when no model they used had a price."""
    compactions: int = 0
    """Times the conversation was compacted to fit the model's context window (each is
    a ``compaction`` event of ``watch`` and a marked point of ``get_transcript``)."""
    parent_id: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    stop_reason: str | None = None
    model: str | None = None
    run_id: str | None = None
    ignored_decisions: list[IgnoredDecision] = Field(default_factory=list)
    """The newest decisions the task dropped as stale, as of the memo's last write (a stale
    decision never writes it itself: ``watch``'s ``decision_ignored`` events say it at once)."""
    unread_input: int = 0
    """Inputs the task received but never read, because it ended first."""
    retrying: str | None = None
    """While the task runs: the failure a model turn or tool call is being retried after
    (a model outage, a blob store that does not answer), with the attempt number."""
    waiting: str | None = None
    """While the task runs: a model turn or tool call that has waited over 10 s for a
    worker to start it, and on which task queue (no worker polls it, or all its slots
    are taken), so a task never waits in silence."""
    settling: list[str] = Field(default_factory=list)
    """Set by ``cancel_task`` at its timeout: what the cancelling task still waits for."""
    max_turns: int | None = None
    """The task's turn limit (a child's is capped by what its parent had left)."""
    time_limit: float | None = None
    """Seconds the task may run (a child's is capped by what its parent had left)."""
    token_budget: int | None = None
    """Tokens the task and its children may use in all; None: no budget."""
    budget_usd: float | None = None
    """A tree's top task: what the tree may spend in USD now (raised as people raise
    it); None: no budget in money."""
    spent_usd: float | None = None
    """A tree's top task with a budget: what the tree has spent, as its ledger counted
    it (each task's turns as they end, running subagents included)."""
    spend_by_task: dict[str, float] = Field(default_factory=dict)
    """A tree's top task with a budget: what each task of the tree spent (task id ->
    USD), the top task first."""
    children: int = 0
    """Subagents this task has spawned (``spawn_subagent``), at most ``MAX_CHILDREN``."""
    sandbox: str | None = None
    """``none`` when the worker runs this task's commands on the host, ``unavailable``
    when it has no sandbox and refuses them; None: sandboxed (the default)."""

    @property
    def done(self) -> bool:
        """Whether the task reached a terminal status."""
        return self.status.terminal

    @computed_field  # type: ignore[prop-decorator]
    @property
    def paused_tasks(self) -> dict[str, str]:
        """The tasks of this one's tree that wait for a decision, each with its pause id.

        This task itself, and any subagent below it at any depth, read from the pending
        calls' ids (a descendant's is the path down to it: ``<child>/<its pause>/...``).
        ``approve(task_id, pause_id=...)`` decides at that task; ``approve`` of this one
        routes each decision down its path.
        """
        waiting: dict[str, str] = {}
        for call in self.pending_approvals:
            path = call.call_id.split("/")
            task, pause = self.id, self.pause_id
            while len(path) >= 3:  # each step down is <task id>/<its pause id>/
                task, pause, path = path[0], path[1], path[2:]
            if pause:
                waiting.setdefault(task, pause)
        return waiting


class TaskEvent(BaseModel):
    """One event of ``SubagentClient.watch``.

    A model turn shows as its ``thinking`` events (the model's reasoning as it streams,
    when it thinks aloud), its ``text`` events (the answer as it streams: each carries
    the new piece), then one ``turn`` event when the turn is recorded (``error`` set if
    it failed); then the turn's tool calls. The ``text`` pieces of a turn add up to its
    answer, and its ``thinking`` pieces to its thinking, which never is part of the
    answer; a piece with ``summary="restarted"`` starts that text (or thinking) over
    (the model call was retried after part of it was shown). A ``compaction`` event says the
    conversation was made to fit the model's context window, and by how much. A
    ``budget`` event says the tree's budget in money was spent, or raised, or that the
    task waits until it is raised. A
    ``retrying`` event says the task's workflow code raised (``error``: what): the task
    is held at its last step, retried, until a worker with a fix runs it.

    ``offset`` places the event in the stream watched: it increases strictly, and
    ``watch(task_id, after=offset)`` goes on exactly after it. With ``tree=True`` the
    stream holds the events of every task below the watched one too: ``task_id`` says
    whose event it is and ``depth`` how many levels below. A ``truncated`` event says
    that events before ``offset`` are no longer kept: the stream goes on from there.
    """

    kind: Literal[
        "status",
        "thinking",
        "text",
        "turn",
        "tool_started",
        "tool_finished",
        "input",
        "decision",
        "decision_ignored",
        "compaction",
        "budget",
        "retrying",
        "closed",
        "truncated",
    ]
    task_id: str
    offset: int | None = None
    """The event's place in the stream watched (None: read from the history of a run
    recorded before streams, or one no worker can read the stream of)."""
    depth: int = 0
    """Levels below the watched task (0: its own event; ``watch(tree=True)``)."""
    time: datetime | None = None
    """When it happened, in UTC (timezone-aware, as ``TaskInfo.created_at``): the time
    its history recorded, or, for live text, when it was seen."""
    status: TaskStatus | None = None
    turn: int | None = None
    tool: str | None = None
    summary: str | None = None
    error: str | None = None
    text: str | None = None
    """A ``text`` event's new piece of the turn's answer; a ``thinking`` event's new
    piece of the turn's thinking."""
    usage: Usage | None = None
    """A ``turn`` event's tokens (cache reads and writes included)."""
    result: str | None = None
    """A ``tool_finished`` event's result: its first 200 characters, on one line."""
