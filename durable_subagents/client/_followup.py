"""Decisions on paused calls, and follow-up runs of completed tasks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.converter import DataConverter

from durable_subagents._spawn import static_details
from durable_subagents.client._info import InternalInfo
from durable_subagents.errors import InvalidRequest, TaskNotFound, UnknownCallId
from durable_subagents.types import (
    CallDecision,
    Decisions,
    TaskInput,
    TaskResult,
    TaskState,
    TaskStatus,
)
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
        search_attributes=desc.typed_search_attributes,
        static_summary=previous.description,
        static_details=static_details(follow_up, task_id),
        start_signal="send_input",
        start_signal_args=[text],
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
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
