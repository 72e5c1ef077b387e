"""Starting a task's workflow: its id, its start options, and its parent's knowledge of it.

A task spawned with the id of a running task registers with it by signal, so that the
parent's cancellation reaches it durably; a parent being cancelled takes no new task.
"""

from __future__ import annotations

import uuid

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.client._task_state import describe_task
from durable_subagents.errors import TaskNotFound, WrongTaskState
from durable_subagents.spawn import (
    fairness,
    start_metadata,
    static_details,
    static_summary,
)
from durable_subagents.types import TaskResult, TaskStatus
from durable_subagents.wire._payloads import REGISTER_CHILD_SIGNAL, WORKFLOW, TaskInput

__all__ = ["live_parent", "register_with_parent", "start_task"]


async def start_task(
    temporal: Client,
    task_queue: str,
    agent: str,
    task_input: TaskInput,
    *,
    task_id: str | None,
    parent_id: str | None,
) -> str:
    """Start the task's workflow (once per id) and register it with a live parent.

    Returns:
        The task id: ``task_id``, or a new ``subagent-<agent>-<hex>``.

    Raises:
        WrongTaskState: the parent is being cancelled, or ended while this task started.
    """
    workflow_id = task_id or f"subagent-{agent}-{uuid.uuid4().hex[:12]}"
    registers = parent_id is not None and await live_parent(temporal, parent_id)
    if registers:
        # Its events go to the parent's stream too: watch(parent, tree=True) shows them.
        task_input = task_input.model_copy(
            update={"streams_to_parent": True, "stream_ancestors": [parent_id]}
        )
    memo, attributes = start_metadata(task_input)
    try:
        await temporal.start_workflow(
            WORKFLOW,  # by name: a client never imports the workflow's code
            task_input,
            result_type=TaskResult,
            id=workflow_id,
            task_queue=task_queue,
            memo=memo,
            search_attributes=attributes,
            static_summary=static_summary(task_input),
            static_details=static_details(task_input, workflow_id),
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            priority=fairness(task_input, workflow_id),
        )
    except WorkflowAlreadyStartedError:
        if task_id is None:
            raise
    if registers:
        assert parent_id is not None
        await register_with_parent(temporal, parent_id, workflow_id)
    return workflow_id


async def live_parent(temporal: Client, parent_id: str) -> bool:
    """Whether ``parent_id`` is a task the new one must register with.

    A parent outside this namespace (an orchestrator's own id) is recorded only; a
    finished parent too. A parent being cancelled takes no new tasks.
    """
    try:
        parent = await describe_task(temporal, parent_id)
    except TaskNotFound:
        return False
    if parent.status in (TaskStatus.CANCELLING, TaskStatus.CANCELLED):
        raise WrongTaskState(
            f"parent task {parent_id!r} is {parent.status.value}; its tasks are being "
            "cancelled, so it takes no new ones",
            parent.status.value,
        )
    return not parent.status.terminal


async def register_with_parent(temporal: Client, parent_id: str, task_id: str) -> None:
    """Signal the parent so its cancellation cancels this task (durably)."""
    try:
        await temporal.get_workflow_handle(parent_id).signal(REGISTER_CHILD_SIGNAL, task_id)
        return
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    parent = await describe_task(temporal, parent_id)  # it closed between the check and the signal
    if parent.status in (TaskStatus.CANCELLED, TaskStatus.FAILED, TaskStatus.TIMED_OUT):
        await temporal.get_workflow_handle(task_id).cancel()
        raise WrongTaskState(
            f"parent task {parent_id!r} ended {parent.status.value} while task "
            f"{task_id!r} was starting; the new task was cancelled with it",
            parent.status.value,
        )
