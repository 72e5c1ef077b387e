"""What a model turn takes in and how it is scheduled: its input, its activity.

The transcript lives in the blob store: a turn's input carries the head and what is new
since it (queued input, tool results), within the payload limit. Model turns and
compactions run as activities with the task's activity options for them. Workflow code:
deterministic, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from durable_subagents.workflows._activity_options import scheduled_with
from durable_subagents.workflows._outcomes import check_size
from durable_subagents.workflows._tree import spawn_tool_specs

with workflow.unsafe.imports_passed_through():
    from durable_subagents.agents import (
        DEFAULT_ACTIVITY_OPTIONS,
        ActivityConfig,
        ActivityOptions,
        AgentSpec,
    )
    from durable_subagents.spawn import model_label
    from durable_subagents.spawn._task_input import MAX_PROMPT_BYTES
    from durable_subagents.types import Message
    from durable_subagents.wire._payloads import (
        COMPACT_ACTIVITY,
        MODEL_TURN_ACTIVITY,
        CompactInput,
        CompactResult,
        ContextInput,
        ModelTurnInput,
        ModelTurnResult,
        TaskInput,
        TurnReads,
        tools_digest,
    )

_INPUT_PER_TURN = 128 * 1024
"""Bytes of queued input one model turn takes in (the rest waits for the next)."""
_RESULTS_PER_TURN = 128 * 1024
"""Bytes of tool results a model-turn input carries inline; larger ones go by name."""

MAX_COMPACTIONS_PER_TURN = 4
"""Compactions in a row one turn may need before the task fails (each goes further;
the last resort turns every tool result into a note)."""

_Result = TypeVar("_Result")


MAX_QUEUED_INPUTS = 100
"""Inputs (``send_input``) that may wait for the next turn; more are dropped."""


def queued(text: object, inbox: list[str]) -> bool:
    """Whether a ``send_input`` text may join the inbox (else it is dropped, and logged).

    Checked as the client checks it (anyone who may signal the task can send one): no
    text, over the prompt's size, or past ``MAX_QUEUED_INPUTS`` waiting is refused.
    """
    if not isinstance(text, str) or not text.strip():
        workflow.logger.warning("input dropped: it is no text, or empty")
        return False
    if len(text.encode("utf-8", "replace")) > MAX_PROMPT_BYTES:
        workflow.logger.warning("input dropped: over %d bytes", MAX_PROMPT_BYTES)
        return False
    if len(inbox) >= MAX_QUEUED_INPUTS:
        workflow.logger.warning("input dropped: %d inputs wait already", MAX_QUEUED_INPUTS)
        return False
    return True


def take_input(inbox: list[str]) -> list[Message]:
    """Queued input for the next turn, oldest first, as much as one turn carries.

    What does not fit stays queued (in ``inbox``) for the turn after, so many large
    inputs sent at once cannot push a model-turn input over the payload limit.
    """
    taken: list[Message] = []
    size = 0
    while inbox:
        text = inbox[0]
        if taken and size + len(text.encode()) > _INPUT_PER_TURN:
            break
        size += len(text.encode())
        taken.append(Message(role="user", content=inbox.pop(0)))
    return taken


def results_by_record(
    new: list[Message], records: dict[str, str]
) -> tuple[list[Message], dict[str, str]]:
    """Pass the largest tool results by record name when together they are too large.

    Each result is small (a long output is a preview and a blob reference), but a
    turn may have many: 40 parallel reads of 7 KB were over the payload limit.
    ``run_tool`` keeps every result as a record (``records``, by call id), which
    ``model_turn`` reads back.
    """
    sizes = [len(m.content.encode()) for m in new]
    total = sum(sizes)
    if total <= _RESULTS_PER_TURN:
        return new, {}
    out = list(new)
    by_name: dict[str, str] = {}
    stored = [i for i, m in enumerate(new) if m.tool_call_id in records]
    for i in sorted(stored, key=lambda i: -sizes[i]):
        if total <= _RESULTS_PER_TURN:
            break
        call_id = new[i].tool_call_id
        assert call_id is not None
        by_name[call_id] = records[call_id]
        out[i] = new[i].model_copy(update={"content": ""})
        total -= sizes[i]
    return out, by_name


def turn_input(
    inp: TaskInput,
    *,
    head: str | None,
    new: list[Message],
    records: dict[str, str],
    model: str,
    turn: int,
    known_tools: str | None,
    context: ContextInput,
    schema_ref: str | None,
    compacted: bool,
    watched: bool = False,
    stream_end: int = 0,
) -> ModelTurnInput:
    """The input of a model turn of this task.

    Args:
        inp: The task's input.
        head: The transcript's head.
        new: The messages since the head (queued input, tool results).
        records: Record names of this turn's ``run_tool`` results, by call id.
        model: The model (``default`` until a turn named the worker's).
        turn: The turn's number.
        known_tools: The digest of the tools the worker last reported (None: none yet).
        context: What the task learned of its model's context window.
        schema_ref: The blob the run's first turn stored the output schema as.
        compacted: Whether the turn runs again after a compaction.
        watched: Whether someone watches the task's stream now.
        stream_end: The task's stream end now (where the turn's pieces follow).
    """
    spec = inp.agent
    new, by_name = results_by_record(new, records)
    context = context.model_copy(update={"window": spec.context_window, "compacted": compacted})
    return ModelTurnInput(
        task_id=workflow.info().workflow_id,
        head=head,
        new_messages=new,
        result_records=by_name,
        model=model,
        tools=spec.tools,
        disallowed_tools=spec.disallowed_tools,
        read_only=spec.permission_mode == "plan",
        plan_tools=plan_tools(spec),
        turn=turn,
        workspace=inp.workspace,
        agent_name=spec.name,
        extra_tools=spawn_tool_specs(inp),
        # The schema once per run; later turns name the blob the first one stored.
        output_schema=inp.output_schema if schema_ref is None else None,
        output_schema_ref=schema_ref,
        reasoning_effort=spec.reasoning_effort,
        temperature=spec.temperature,
        max_tokens=spec.max_output_tokens or ModelTurnInput.model_fields["max_tokens"].default,
        known_tools=known_tools,
        context=context,
        reads=TurnReads.of(spec) if reads_run_in_turn(inp, turn) else None,
        stream_watched=watched,
        stream_watch_ids=[workflow.info().workflow_id, *inp.stream_ancestors],
        stream_parent=inp.parent_id if inp.streams_to_parent else None,
        stream_after=stream_end,
    )


def plan_tools(spec: AgentSpec) -> list[str]:
    """A ``plan`` agent's MCP tools its rules allow, as globs (``ModelTurnInput.plan_tools``)."""
    if spec.permission_mode != "plan":
        return []
    return [r.tool for r in spec.permissions if r.action == "allow" and r.tool.startswith("mcp__")]


def reads_run_in_turn(inp: TaskInput, turn: int) -> bool:
    """Whether turn ``turn`` runs the reads its task's rules allow itself, before it answers.

    Only where the workflow surely runs a turn's allowed calls right after it: not on the
    last turn (its calls are answered unrun), nor for a task with a token budget (the
    turn's own usage may exhaust it) or an output schema (a ``final_answer`` call may
    decide the others' fate). The workflow decides every call either way.
    """
    spec = inp.agent
    return (
        spec.local_read_tools
        and turn < inp.max_turns
        and inp.token_budget is None
        and inp.output_schema is None
    )


@dataclass
class WorkerTools:
    """What the workers told of their tools: a turn reports them when they change.

    Attributes:
        offered: The tools offered to the model.
        read_only: The offered tools that only read.
        sandbox: How the worker runs commands.
        reported_protected: The protected paths the last turn that reported tools named
            (for the digest).
        protected: Every protected path the run's workers reported; calls are decided
            with these (None: no turn has reported any yet, so ``PROTECTED_PATHS``).
        notifies: The workers post events of their own accord
            (``ModelTurnResult.notify``); None until a model turn of this run answered.
    """

    offered: list[str] = field(default_factory=list)
    read_only: set[str] = field(default_factory=set)
    sandbox: str | None = None
    reported_protected: list[str] | None = None
    protected: list[str] | None = None
    notifies: bool | None = None

    def take(self, turn: ModelTurnResult) -> None:
        """Keep what a turn that reported tools (not ``same_tools``) told."""
        self.offered = turn.offered_tools
        self.read_only = set(turn.read_only_tools)
        self.sandbox = turn.sandbox
        self._take_protected(turn.protected_paths)
        self.notifies = turn.notify

    def _take_protected(self, reported: list[str] | None) -> None:
        """Keep the paths a worker protects; a run never drops one a worker reported.

        Workers of one deployment should share a list; if they do not, the run keeps
        the union of what served it rather than the last worker's.
        """
        self.reported_protected = reported
        if reported is None:
            return
        kept = list(self.protected or [])
        self.protected = kept + [p for p in reported if p not in kept]

    def digest(self) -> str | None:
        """The digest of what the worker last reported (None: nothing yet)."""
        if not self.offered:
            return None
        return tools_digest(
            self.offered,
            list(self.read_only),
            self.sandbox,
            self.reported_protected,
            bool(self.notifies),
        )


def _too_many_compactions() -> ApplicationError:
    """The failure of a turn that still does not fit after ``MAX_COMPACTIONS_PER_TURN``."""
    return ApplicationError(
        f"the conversation still did not fit the model's context window after "
        f"{MAX_COMPACTIONS_PER_TURN} compactions in a row; use a model with a "
        "larger window, or have the task read less at once",
        type="ContextWindowExceeded",
        non_retryable=True,
    )


async def model_call(
    activity: str,
    arg: Any,
    result_type: type[_Result],
    summary: str,
    queue: str | None,
    config: ActivityConfig,
) -> _Result:
    """Run an activity that calls the model, as every such call runs.

    On the provider's queue (``queue``) once one is learned, with the task's timeouts
    and retries for it (``config``).
    """
    return await workflow.execute_activity(
        activity,
        arg,
        task_queue=queue,
        result_type=result_type,
        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary=summary,
        **scheduled_with(config),
    )


class ModelCalls:
    """Where this run's model calls go, and whether one runs now.

    Args:
        on_change: Shows the current details again (a call started).

    Attributes:
        queue: Where this run's model turns go once a worker sent one on (rate limits).
        context: What the task learned of its model's context window (see
            ``ContextInput``).
        waiting: Whether a model turn is running.
        compacting: Whether a compaction is running.
        options: The task's activity options (see ``task_options``).
    """

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self.options: ActivityOptions = DEFAULT_ACTIVITY_OPTIONS
        self.queue: str | None = None
        self.context = ContextInput()
        self.waiting = False
        self.compacting = False

    def learn(self, turn: ModelTurnResult) -> None:
        """Keep what a turn tells of the model's window: its size, or the provider's."""
        context = self.context
        if turn.compact:
            if turn.window:
                learned = context.learned
                context.learned = min(learned, turn.window) if learned else turn.window
            if turn.context_tokens and turn.chars:
                context.tokens, context.chars = turn.context_tokens, turn.chars
        elif turn.chars and turn.usage.input_tokens:
            context.tokens, context.chars = turn.usage.input_tokens, turn.chars

    async def turn(self, turn_input: ModelTurnInput, number: int, model: str) -> ModelTurnResult:
        """Run model turn ``number``, on the provider's queue if a worker sends it there."""
        turn_input.may_redirect = True
        check_size(turn_input, f"model turn {number} input")
        self.waiting = True
        self._on_change()
        try:
            result = await self._schedule_turn(turn_input, number, model)
            if result.model_queue is not None:
                # A worker that rate-limits the provider on a queue of its own sent the
                # turn on without calling the model; so go this run's later turns.
                self.queue = result.model_queue
                result = await self._schedule_turn(turn_input, number, model)
                if result.model_queue is not None:
                    raise ApplicationError(
                        f"model turn {number} was sent on from {self.queue} "
                        f"to {result.model_queue}: give every worker of the task queue "
                        "the same SUBAGENTS_MODEL_RATE_LIMITS",
                        type="InvalidRequest",
                        non_retryable=True,
                    )
            return result
        finally:
            self.waiting = False

    async def _schedule_turn(
        self, turn_input: ModelTurnInput, number: int, model: str
    ) -> ModelTurnResult:
        # The model's name is known from the first answer on (``default`` before).
        summary = f"turn {number} · {model_label(model)}"
        return await model_call(
            MODEL_TURN_ACTIVITY,
            turn_input,
            ModelTurnResult,
            summary,
            self.queue,
            self.options.model_turn,
        )

    async def compact(self, compact_input: CompactInput, model: str) -> CompactResult:
        """Run a compaction (``compact_context``): its summary is a model call.

        Raises:
            ApplicationError: The turn needed more than ``MAX_COMPACTIONS_PER_TURN``.
        """
        if compact_input.attempt > MAX_COMPACTIONS_PER_TURN:
            raise _too_many_compactions()
        number = compact_input.number
        check_size(compact_input, f"compaction {number} input")
        self.compacting = True
        self._on_change()
        try:
            # its summary is a model call: under the provider's rate limit too
            return await model_call(
                COMPACT_ACTIVITY,
                compact_input,
                CompactResult,
                f"compaction {number} · {model_label(model)}",
                self.queue,
                self.options.compaction,
            )
        finally:
            self.compacting = False
