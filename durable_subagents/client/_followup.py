"""Decisions on paused calls, and follow-up runs of completed tasks."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.converter import DataConverter

from durable_subagents._payloads import (
    SEND_INPUT_SIGNAL,
    CallDecision,
    Decisions,
    TaskInput,
    TaskState,
)
from durable_subagents._spawn_request import fairness, static_details, static_summary
from durable_subagents.client._task_state import InternalInfo
from durable_subagents.errors import InvalidRequest, TaskNotFound, UnknownCallId
from durable_subagents.types import TaskResult, TaskStatus
from durable_subagents.workflows import SubagentWorkflow


def decisions_for(
    info: InternalInfo, call_ids: Sequence[str] | None, *, approved: bool, reason: str | None
) -> Decisions:
    """The ``decide`` signal for calls of the task's current pause.

    ``None`` expands to every pending call of this pause, each bound to its argument
    hash, so a late "approve all" can never approve a later pause.

    Raises:
        UnknownCallId: a call id is not pending in the current pause.
        InvalidRequest: ``call_ids`` is empty.
    """
    assert info.pause_id is not None
    pending = {p.call_id: p for p in info.pending_approvals}
    if isinstance(call_ids, str):
        call_ids = [call_ids]
    chosen = list(pending) if call_ids is None else list(dict.fromkeys(call_ids))
    if not chosen:
        raise InvalidRequest(
            "call_ids is empty; name the calls to decide, or pass None for every call of "
            f"pause {info.pause_id}"
        )
    unknown = [c for c in chosen if c not in pending]
    if unknown:
        raise UnknownCallId(
            f"call(s) {', '.join(unknown)} are not pending in pause {info.pause_id}; "
            f"pending: {', '.join(pending) or 'none'}"
        )
    decisions = Decisions(
        pause_id=info.pause_id,
        decisions=[
            CallDecision(
                call_id=c,
                arguments_hash=pending[c].arguments_hash,
                approved=approved,
                reason=reason,
            )
            for c in chosen
        ],
    )
    return decisions


@dataclass
class Decided:
    """The calls of one pause this client decided (call id -> approved)."""

    pause_id: str
    calls: dict[str, bool] = field(default_factory=dict)
    complete: bool = False
    """Every call of the pause is decided: the task resumes once it reads them."""


class DecisionMemory:
    """The decisions a client sent, per task, so that its waits skip a decided pause.

    Between a decision and the task taking it in (at once with a worker, whenever one
    comes back without), the task still reads as paused on that pause; a wait that
    returned it would hand the caller a pause it already answered.
    """

    LIMIT = 10_000
    """Tasks remembered at most (the oldest are forgotten first)."""

    def __init__(self) -> None:
        self._tasks: OrderedDict[str, Decided] = OrderedDict()

    def get(self, task_id: str, pause_id: str | None) -> Decided | None:
        """What was decided of ``pause_id`` (forgetting an older pause's decisions)."""
        decided = self._tasks.get(task_id)
        if decided is not None and decided.pause_id != pause_id:
            del self._tasks[task_id]
            return None
        return decided

    def peek(self, task_id: str) -> Decided | None:
        """What was decided on ``task_id``'s latest decided pause."""
        return self._tasks.get(task_id)

    def skip(self, task_id: str) -> str | None:
        """The pause of ``task_id`` this client decided completely, if any."""
        decided = self._tasks.get(task_id)
        return decided.pause_id if decided is not None and decided.complete else None

    def repeats(self, info: InternalInfo, decisions: Decisions) -> bool:
        """Whether every decision was sent before, with the same verdict."""
        decided = self.get(info.id, info.pause_id)
        return decided is not None and all(
            decided.calls.get(d.call_id) is d.approved for d in decisions.decisions
        )

    def record(self, info: InternalInfo, decisions: Decisions) -> None:
        """Remember decisions sent on ``info``'s pause."""
        assert info.pause_id is not None
        decided = self.get(info.id, info.pause_id) or Decided(info.pause_id)
        for d in decisions.decisions:
            decided.calls.setdefault(d.call_id, d.approved)
        decided.complete = {p.call_id for p in info.pending_approvals} <= decided.calls.keys()
        self._tasks[info.id] = decided
        self._tasks.move_to_end(info.id)
        while len(self._tasks) > self.LIMIT:
            self._tasks.popitem(last=False)


async def start_follow_up(
    temporal: Client, task_queue: str, task_id: str, info: InternalInfo, text: str
) -> None:
    """Start the next run of a completed task from its closed run's transcript head.

    Signal-with-start alone would be unsafe: it would revive cancelled tasks and
    could start from a stale transcript, so the closed run is read first.
    """
    handle = temporal.get_workflow_handle(task_id, run_id=info.run_id, result_type=TaskResult)
    previous = await _run_input(handle, temporal.data_converter)
    closed = await handle.result(follow_runs=False)
    desc = await handle.describe()
    state = TaskState(
        head=closed.head,
        turns=closed.turns,
        usage=closed.usage,
        model=previous.state.model if previous.state else None,
        runs=(previous.state.runs if previous.state else 1) + 1,
        pending_messages=closed.pending_messages,
        children=closed.children,
        awaiting_input=True,
        compactions=closed.compactions,
        context=previous.state.context if previous.state else None,
    )
    follow_up = previous.model_copy(
        update={
            "state": state,
            "max_turns": info.turns + per_run_turns(previous),
            "turns_per_run": per_run_turns(previous),
            "created_at": datetime.now(UTC),
        }
    )
    memo = {**(await desc.memo()), "status": TaskStatus.PENDING.value}
    for key in ("error", "stop_reason", "result_preview", "unread_input"):
        memo.pop(key, None)
    await temporal.start_workflow(
        SubagentWorkflow.run,
        follow_up,
        id=task_id,
        task_queue=task_queue,
        memo=memo,
        search_attributes=_settable(desc.typed_search_attributes),
        static_summary=static_summary(previous),
        static_details=static_details(follow_up, task_id),
        start_signal=SEND_INPUT_SIGNAL,
        start_signal_args=[text],
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        priority=fairness(previous, task_id),
    )


def _settable(attributes: TypedSearchAttributes) -> TypedSearchAttributes:
    """The closed run's search attributes less the server's own (``Temporal*``).

    The server adds some to a run (``TemporalUsedWorkerDeploymentVersions`` on versioned
    workers, ``TemporalChangeVersion`` where a patch was used) and refuses a start that
    sets them.
    """
    return TypedSearchAttributes(
        [pair for pair in attributes if not pair.key.name.startswith("Temporal")]
    )


def per_run_turns(run: TaskInput) -> int:
    """The turn budget each run of a task gets (the spawn's ``max_turns``)."""
    if run.turns_per_run is not None:
        return run.turns_per_run
    return run.max_turns if run.state is None else run.agent.max_turns


async def _run_input(handle: WorkflowHandle[Any, Any], converter: DataConverter) -> TaskInput:
    """The input a run was started with (from its first history event)."""
    async for event in handle.fetch_history_events():
        attrs = event.workflow_execution_started_event_attributes
        decoded = await converter.decode(attrs.input.payloads, [TaskInput])
        return TaskInput.model_validate(decoded[0])
    raise TaskNotFound(f"task {handle.id!r} has no history")
