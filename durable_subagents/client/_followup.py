"""Input to a task: steering a running one, or a follow-up run of a completed one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.client._task_state import InternalInfo, describe_task
from durable_subagents.errors import InvalidRequest, TaskNotFound, WrongTaskState
from durable_subagents.spawn import (
    fairness,
    refuse_unencodable,
    static_details,
    static_summary,
)
from durable_subagents.types import TaskInfo, TaskResult, TaskStatus
from durable_subagents.wire._payloads import (
    SEND_INPUT_SIGNAL,
    WORKFLOW,
    TaskInput,
    TaskState,
)
from durable_subagents.wire._stream_items import StreamCarry


async def deliver_input(
    temporal: Client, task_queue: str, task_id: str, text: str, *, max_prompt_bytes: int
) -> TaskInfo:
    """Signal input to a running or paused task, or continue a completed one in a new run.

    Raises:
        TaskNotFound, InvalidRequest, WrongTaskState: as ``SubagentClient.send_input``.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("input is empty; send the text the subagent should read")
    refuse_unencodable("input", text)
    if len(text.encode()) > max_prompt_bytes:
        raise InvalidRequest(
            f"input is over the {max_prompt_bytes}-byte limit; write it to a file "
            "in the workspace and tell the subagent to read it"
        )
    info = await describe_task(temporal, task_id)
    if info.status == TaskStatus.CANCELLING:
        raise WrongTaskState(
            f"task {task_id!r} is being cancelled; it will not read more input. Spawn "
            "a new task instead",
            info.status.value,
        )
    if not info.status.terminal:
        # The latest run: one that continued-as-new since the describe takes it too.
        handle = temporal.get_workflow_handle(task_id)
        try:
            await handle.signal(SEND_INPUT_SIGNAL, text)
            return info.public()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        info = await describe_task(temporal, task_id)  # it closed just now
        if not info.status.terminal:
            raise InvalidRequest(f"task {task_id!r} changed while sending; send again")
    if info.status != TaskStatus.COMPLETED:
        raise WrongTaskState(
            f"task {task_id!r} is {info.status.value}; only a completed task can be "
            "continued. Spawn a new task instead",
            info.status.value,
        )
    await start_follow_up(temporal, task_queue, task_id, info, text)
    return (await describe_task(temporal, task_id)).public()


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
        # the stream's offsets go on from the closed run's
        stream=StreamCarry(base=closed.stream_end) if closed.stream_end is not None else None,
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
        WORKFLOW,
        follow_up,
        result_type=TaskResult,
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
