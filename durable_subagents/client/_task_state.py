"""How a task's state is read from what Temporal returns: descriptions and histories.

A task's status, pause and usage come from its workflow's description (``info_from``).
Everything the workflow writes may be encrypted (``SUBAGENTS_PAYLOAD_KEY``), so a raw
payload or failure found in a history or a description is always read through the
client's data converter, codec included, never with the bare payload converter
(``decoded``, ``failure_message``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.common.v1 import WorkflowExecution as RunRef
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.failure.v1 import Failure
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.errors import InvalidRequest, PayloadEncryptionError, TaskNotFound
from durable_subagents.types import (
    IgnoredDecision,
    PendingApproval,
    TaskInfo,
    TaskResult,
    TaskStatus,
    Usage,
)
from durable_subagents.wire import _search_attributes as sa
from durable_subagents.wire._payloads import RUN_TOOL_ACTIVITY, WORKFLOW

_CLOSED_STATUS = {
    WorkflowExecutionStatus.FAILED: TaskStatus.FAILED,
    WorkflowExecutionStatus.CANCELED: TaskStatus.CANCELLED,
    WorkflowExecutionStatus.TERMINATED: TaskStatus.CANCELLED,
    WorkflowExecutionStatus.TIMED_OUT: TaskStatus.TIMED_OUT,
}


class InternalInfo(TaskInfo):
    """``TaskInfo`` plus what the client needs internally (history length, head)."""

    history_length: int = 0
    head: str | None = None
    may_pause: bool = True
    result_ref: str | None = None

    def public(self) -> TaskInfo:
        """The public ``TaskInfo`` without the internal fields."""
        return TaskInfo.model_validate(
            self.model_dump(exclude={"history_length", "head", "may_pause", "result_ref"})
        )


def info_from(
    task_id: str,
    run_id: str | None,
    status: WorkflowExecutionStatus | None,
    memo: Mapping[str, Any],
) -> InternalInfo:
    """Build the info from the memo; a closed run's own status wins over the memo."""
    memo_status = memo.get("status") or TaskStatus.PENDING.value
    if status in _CLOSED_STATUS:
        task_status = _CLOSED_STATUS[status]
    elif status == WorkflowExecutionStatus.COMPLETED:
        # a run that returns normally ends completed, or timed_out by its own timer
        timed_out = memo_status == TaskStatus.TIMED_OUT.value
        task_status = TaskStatus.TIMED_OUT if timed_out else TaskStatus.COMPLETED
    else:
        task_status = TaskStatus(memo_status)
    created = memo.get("created_at")
    paused = not task_status.terminal
    turns = int(memo.get("turns") or 0)
    if task_status.terminal and not memo.get("head") and not memo.get(_FROM_ATTRIBUTES):
        # The memo counts a turn from its start; a task that ended with no transcript
        # never had a model answer (it failed, or was stopped, at its first model call).
        turns = 0
    usage = Usage.model_validate(memo.get("usage") or {})
    tree_usage = Usage.model_validate(memo["tree_usage"]) if memo.get("tree_usage") else None
    return InternalInfo(
        id=task_id,
        run_id=run_id,
        agent=memo.get("agent") or "",
        description=memo.get("description") or "",
        status=task_status,
        result=memo.get("result_preview"),
        error=memo.get("error"),
        turns=turns,
        usage=usage,
        tree_usage=tree_usage,
        tree_cost_usd=(tree_usage or usage).cost_usd,
        compactions=int(memo.get("compactions") or 0),
        parent_id=memo.get("parent_id"),
        created_at=datetime.fromisoformat(created) if created else None,
        stop_reason=memo.get("stop_reason"),
        model=memo.get("model"),
        pause_id=memo.get("pause_id") if paused else None,
        pending_approvals=[
            PendingApproval.model_validate(p) for p in memo.get("pending_approvals") or []
        ]
        if paused
        else [],
        head=memo.get("head"),
        ignored_decisions=[
            IgnoredDecision.model_validate(d) for d in memo.get("ignored_decisions") or []
        ],
        unread_input=int(memo.get("unread_input") or 0),
        sandbox=memo.get("sandbox") or None,
        max_turns=memo.get("max_turns"),
        time_limit=memo.get("time_limit"),
        token_budget=memo.get("token_budget"),
        **_ledger(memo),
        children=int(memo.get("children") or 0),
        may_pause=bool(memo.get("may_pause", True)),
    )


def _ledger(memo: Mapping[str, Any]) -> dict[str, Any]:
    """A tree's top task's budget and spend, from its memo (its spawn's budget at first)."""
    ledger = memo.get("ledger")
    if not isinstance(ledger, dict):
        budget = memo.get("budget_usd")
        return {"budget_usd": budget, "spent_usd": 0.0 if budget is not None else None}
    by_task = ledger.get("by_task")
    return {
        "budget_usd": ledger.get("budget_usd"),
        "spent_usd": ledger.get("spent_usd"),
        "spend_by_task": dict(by_task) if isinstance(by_task, dict) else {},
    }


def settled(info: TaskInfo, after_pause: str | None) -> bool:
    """Whether a wait should return: terminal, or paused on a pause not yet decided."""
    if info.status.terminal:
        return True
    return info.status == TaskStatus.PAUSED and info.pause_id != after_pause


def quote(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def decoded(converter: DataConverter, payload: Payload, type_hint: type) -> Any:
    """One payload's value.

    Raises:
        PayloadKeyMissing: it is encrypted with a key this client lacks.
    """
    [value] = await converter.decode([payload], [type_hint])
    return value


async def failure_message(converter: DataConverter, failure: Failure) -> str:
    """A failure's message, decrypted when it is encrypted.

    A failure this client cannot decrypt is described by the key it needs, rather than
    by Temporal's placeholder ("Encoded failure").
    """
    copy = Failure()
    copy.CopyFrom(failure)  # decoding works in place
    try:
        error = await converter.decode_failure(copy)
    except PayloadEncryptionError as err:
        return f"(encrypted with key {err.key_id}, which this client does not hold)"
    return getattr(error, "message", None) or str(error) or failure.message


async def describe_task(temporal: Client, task_id: str) -> InternalInfo:
    """A task's state from its workflow's description (and, once closed, its result).

    Raises:
        TaskNotFound: no subagent task has this id.
    """
    handle = temporal.get_workflow_handle(task_id)
    try:
        desc = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise TaskNotFound(
                f"no task {task_id!r} in namespace {temporal.namespace!r}; "
                "list_tasks() lists the tasks"
            ) from None
        raise
    if desc.workflow_type != WORKFLOW:
        raise TaskNotFound(f"{task_id!r} is a {desc.workflow_type} workflow, not a subagent task")
    memo = await desc.memo()
    info = info_from(task_id, desc.run_id, desc.status, memo)
    info.history_length = desc.history_length
    info.finished_at = desc.close_time
    extended = desc.raw_description.workflow_extended_info
    if desc.status == WorkflowExecutionStatus.RUNNING and extended.cancel_requested:
        info.status = TaskStatus.CANCELLING
    if desc.status == WorkflowExecutionStatus.RUNNING:
        info.retrying = await _retrying(temporal, desc)
        info.waiting = _waiting(desc)
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        await _fill_result(temporal, info, desc)
    elif desc.status == WorkflowExecutionStatus.FAILED and not info.error:
        info.error = await _failure(temporal, task_id, desc.run_id)
    elif desc.status == WorkflowExecutionStatus.TERMINATED:
        info.stop_reason, info.error = "terminated", info.error or "terminated"
    elif desc.status == WorkflowExecutionStatus.TIMED_OUT:
        info.stop_reason = "execution_timeout"
        info.error = info.error or "the workflow's execution timeout was reached"
    return info


async def _fill_result(
    temporal: Client, info: InternalInfo, desc: WorkflowExecutionDescription
) -> None:
    handle: WorkflowHandle[Any, TaskResult] = temporal.get_workflow_handle(
        desc.id, run_id=desc.run_id, result_type=TaskResult
    )
    result = await handle.result(follow_runs=False)
    info.status = result.status
    info.result = result.result
    info.stop_reason = result.stop_reason
    info.error = result.error
    info.turns = result.turns
    info.usage = result.usage
    info.tree_usage = result.tree_usage or info.tree_usage
    info.tree_cost_usd = (info.tree_usage or info.usage).cost_usd
    info.compactions = max(result.compactions, info.compactions)
    info.model = result.model
    info.head = result.head
    info.output = result.output
    # A longer answer stays in the store until asked for (get_result).
    info.result_ref = result.result_ref
    info.result_truncated = result.result_ref is not None


async def _retrying(temporal: Client, desc: WorkflowExecutionDescription) -> str | None:
    """What a running task's step is being retried after, if it is.

    A pending activity on its second attempt or later gives its last failure. A
    workflow task failing again and again (a worker that cannot decrypt the task, a
    bug) gives the failure its history recorded: the task is not stuck in silence.
    """
    converter = temporal.data_converter
    raw = desc.raw_description
    for pending in raw.pending_activities:
        if pending.attempt > 1 and pending.HasField("last_failure"):
            name = pending.activity_type.name.replace("_", " ")
            message = await failure_message(converter, pending.last_failure)
            return f"{name}, attempt {pending.attempt}: {message}"
    if raw.HasField("pending_workflow_task") and raw.pending_workflow_task.attempt > 1:
        attempt = raw.pending_workflow_task.attempt
        failure = await _last_workflow_task_failure(temporal, desc.id, desc.run_id)
        message = await failure_message(converter, failure) if failure else "no failure shown"
        return f"workflow task, attempt {attempt}: {message}"
    return None


async def _last_workflow_task_failure(
    temporal: Client, task_id: str, run_id: str | None
) -> Failure | None:
    """The newest workflow task failure in a run's history (read from its end)."""
    response = await temporal.workflow_service.get_workflow_execution_history_reverse(
        GetWorkflowExecutionHistoryReverseRequest(
            namespace=temporal.namespace,
            execution=RunRef(workflow_id=task_id, run_id=run_id or ""),
            maximum_page_size=50,
        )
    )
    for event in response.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            attrs = event.workflow_task_failed_event_attributes
            return attrs.failure if attrs.HasField("failure") else None
    return None


async def _failure(temporal: Client, task_id: str, run_id: str | None) -> str:
    handle = temporal.get_workflow_handle(task_id, run_id=run_id)
    try:
        await handle.result(follow_runs=False)
    except WorkflowFailureError as err:
        cause = err.cause
        return getattr(cause, "message", None) or str(cause)
    return "failed"


WAITING_AFTER = 10.0
"""Seconds a model turn or tool call may wait for a worker before ``TaskInfo.waiting``
says so."""


def _waiting(desc: WorkflowExecutionDescription) -> str | None:
    """A step of a running task that no worker has started for ``WAITING_AFTER`` s."""
    now = datetime.now(UTC)
    for pending in desc.raw_description.pending_activities:
        if pending.state != PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
            continue
        if not pending.HasField("scheduled_time"):
            continue
        waited = (now - pending.scheduled_time.ToDatetime(tzinfo=UTC)).total_seconds()
        if waited < WAITING_AFTER:  # a retry's next attempt lies in the future
            continue
        queue = pending.activity_options.task_queue.name or desc.task_queue
        what = "tool call" if pending.activity_type.name == RUN_TOOL_ACTIVITY else "model turn"
        return (
            f"a {what} has waited {waited:.0f} s for a worker on task queue {queue!r}: no "
            "worker polls it (start one: subagents worker), or all its slots are taken"
        )
    return None


async def settling(temporal: Client, task_id: str) -> list[str]:
    """What a cancelling task still waits for: its open activities and children."""
    desc = await temporal.get_workflow_handle(task_id).describe()
    raw = desc.raw_description
    out = []
    for activity in raw.pending_activities:
        state = PendingActivityState.Name(activity.state).removeprefix("PENDING_ACTIVITY_STATE_")
        line = f"activity {activity.activity_type.name} ({state.lower()}"
        line += f", attempt {activity.attempt})"
        if activity.last_worker_identity:
            line += f" on {activity.last_worker_identity}"
        out.append(line)
    out += [f"child task {c.workflow_id}" for c in raw.pending_children]
    if not out:
        out.append("the workflow itself: no worker has processed the cancel yet")
    return out


def visible_memo(execution: WorkflowExecution, err: PayloadEncryptionError) -> dict[str, Any]:
    """What a task's plain search attributes say, for a memo this client cannot decrypt.

    One task under a key this client lacks (an old key dropped while its tasks are
    still kept, another team's key) must not hide the rest of the list.
    """
    attrs = execution.typed_search_attributes
    return {
        "status": attrs.get(sa.STATUS),
        "agent": attrs.get(sa.AGENT),
        "parent_id": attrs.get(sa.PARENT),
        "turns": attrs.get(sa.TURNS),
        "description": f"(encrypted with key {err.key_id}, which this client does not hold)",
        _FROM_ATTRIBUTES: True,
    }


_FROM_ATTRIBUTES = "_from_search_attributes"
"""Marks a memo made of the search attributes: its turns are the task's, head or not."""


async def list_task_infos(
    temporal: Client,
    parent_id: str | None = None,
    status: TaskStatus | str | None = None,
    *,
    limit: int | None = None,
) -> list[TaskInfo]:
    """Tasks in the namespace, newest first (see ``SubagentClient.list_tasks``)."""
    if limit is not None and limit < 1:
        raise InvalidRequest(f"limit must be at least 1, got {limit}")
    query = f"WorkflowType = '{WORKFLOW}'"
    if parent_id is not None:
        query += f" AND {sa.PARENT.name} = {quote(parent_id)}"
    try:
        wanted = TaskStatus(status) if status is not None else None
    except ValueError:
        raise InvalidRequest(
            f"unknown status {status!r}; use one of {', '.join(s.value for s in TaskStatus)}"
        ) from None
    latest: dict[str, Any] = {}
    async for execution in temporal.list_workflows(query):
        seen = latest.get(execution.id)
        if seen is None or execution.start_time > seen.start_time:
            latest[execution.id] = execution
    infos = []
    for execution in sorted(latest.values(), key=lambda e: e.start_time, reverse=True):
        try:
            memo = await execution.memo()
        except PayloadEncryptionError as err:
            memo = visible_memo(execution, err)
        info = info_from(execution.id, execution.run_id, execution.status, memo)
        info.finished_at = execution.close_time
        if wanted is None or info.status == wanted:
            infos.append(info.public())
            if len(infos) == limit:
                break
    return infos
