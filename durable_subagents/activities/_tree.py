"""The activities a task uses to reach other tasks of its tree through Temporal.

Workflow code cannot call another workflow and hear its answer; these activities do it
for it, with the worker's client: which registered tasks really are a task's own, and
a place in its tree's count of tasks (the top task's ``reserve_tree_task`` update), and
what a task spent, for its tree's ledger (``record_spend``).
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.wire import _search_attributes as sa
from durable_subagents.wire._ledger import SPEND_ACTIVITY, SPEND_UPDATE, SpendReport, TreeBudget
from durable_subagents.wire._payloads import (
    OWN_TASKS_ACTIVITY,
    RESERVE_TASK_ACTIVITY,
    RESERVE_TASK_UPDATE,
    TREE_FULL,
)

__all__ = ["own_registered_tasks", "report_tree_spend", "reserve_tree_task"]


@activity.defn(name=OWN_TASKS_ACTIVITY)
async def own_registered_tasks(parent_id: str, task_ids: list[str]) -> list[str]:
    """Those of ``task_ids`` whose parent is ``parent_id`` (``SubagentParent``).

    A registration is a signal anyone may send: before a task cancels the tasks
    registered with it, it keeps only those that name it as their parent, so a
    forged registration cannot make it cancel a stranger's task.
    """
    client = activity.client()
    own: list[str] = []
    for task_id in task_ids:
        try:
            described = await client.get_workflow_handle(task_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                continue  # never started, or gone: nothing to cancel
            raise
        if described.typed_search_attributes.get(sa.PARENT) == parent_id:
            own.append(task_id)
    return own


@activity.defn(name=RESERVE_TASK_ACTIVITY)
async def reserve_tree_task(root_id: str, task_id: str) -> None:
    """Count ``task_id`` among the tasks of ``root_id``'s tree, before it starts.

    The top task answers (its ``reserve_tree_task`` update); the same id twice counts
    once, so a retry after a lost answer is safe.

    Raises:
        ApplicationError: ``TreeFull`` (not retried): the tree holds all the tasks it
            may, or its top task has ended.
    """
    handle = activity.client().get_workflow_handle(root_id)
    try:
        await handle.execute_update(RESERVE_TASK_UPDATE, task_id)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        message = getattr(cause, "message", None) or str(cause)
        raise ApplicationError(message, type=TREE_FULL, non_retryable=True) from None
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        raise ApplicationError(
            f"the tree's top task {root_id!r} has ended; no task of its tree may start",
            type=TREE_FULL,
            non_retryable=True,
        ) from None


@activity.defn(name=SPEND_ACTIVITY)
async def report_tree_spend(root_id: str, report: SpendReport) -> TreeBudget:
    """Tell the top task ``root_id`` what a task of its tree has spent so far.

    Its answer says whether the tree holds its model turns. The report is a total, so
    sending it again after a lost answer counts it once. A top task that has ended, or
    refuses the report, holds nothing.
    """
    handle = activity.client().get_workflow_handle(root_id)
    try:
        return await handle.execute_update(SPEND_UPDATE, report, result_type=TreeBudget)
    except WorkflowUpdateFailedError as err:
        activity.logger.warning("spend report refused by %s: %s", root_id, err.cause)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    return TreeBudget(held=False, epoch=0)
