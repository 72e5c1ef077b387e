"""Notifications of a task's events, each delivered by a workflow of its own.

A task with a ``notify_url`` tells a receiver when it pauses for a decision and when
it ends. Each event is a ``SubagentNotify`` child workflow the task abandons: its
``send_notification`` activity retries with backoff for up to a day while the
receiver is down, on after the task has ended, and the task never waits for the
receiver. What the task pays is the child's start: its events in the history and, at
the end, one round trip to the server before the run closes.

The event names the calls in preview only (at most ``MAX_CALLS``), so a pause with
many calls adds little to the history. Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ApplicationError

from durable_subagents.workflows._outcomes import error_message

with workflow.unsafe.imports_passed_through():
    from durable_subagents.types import PendingApproval, TaskStatus
    from durable_subagents.wire._payloads import (
        NOTIFY_ACTIVITY,
        NOTIFY_UNSET,
        NOTIFY_WORKFLOW,
        NotifyCall,
        NotifyEvent,
        NotifyInput,
        NotifyResult,
        NotifyTask,
        TaskInput,
    )

MAX_CALLS = 20
"""Calls a ``task.paused`` event lists (``calls_total`` says how many there are)."""
_TEXT = 500
"""Characters of a description, an error or a result an event carries."""

DELIVERY_WINDOW = timedelta(hours=24)
"""How long a notification is retried while its receiver fails (then it is dropped)."""
RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=10),
    non_retryable_error_types=["NotifyRefused"],
)
"""Backoff of a failing receiver: 1 s, 2 s, 4 s... then every 10 minutes."""

EVENT_TYPES = {
    TaskStatus.COMPLETED: "task.completed",
    TaskStatus.FAILED: "task.failed",
    TaskStatus.CANCELLED: "task.cancelled",
    TaskStatus.TIMED_OUT: "task.timed_out",
}


@workflow.defn(name=NOTIFY_WORKFLOW)
class NotifyWorkflow:
    """Deliver one notification; a receiver that never takes it is reported, never raised."""

    @workflow.run
    async def run(self, input: NotifyInput) -> NotifyResult:
        """POST the event, retried with backoff within ``DELIVERY_WINDOW``."""
        try:
            await workflow.execute_activity(
                NOTIFY_ACTIVITY,
                input,
                start_to_close_timeout=timedelta(seconds=60),
                schedule_to_close_timeout=DELIVERY_WINDOW,
                retry_policy=RETRY,
                summary=f"{input.event.type} {input.event.task.id}",
            )
        except ActivityError as err:
            # A result, not a failure: the task that started it is not told either way.
            message = error_message(err)
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == NOTIFY_UNSET:
                workflow.logger.debug("notification %s: %s", input.event.id, message)
            else:
                workflow.logger.warning(
                    "notification %s not delivered: %s", input.event.id, message
                )
            return NotifyResult(delivered=False, error=message)
        return NotifyResult(delivered=True)


def notify_task(
    task_input: TaskInput,
    status: TaskStatus,
    *,
    turns: int,
    last_text: str,
    stop_reason: str | None = None,
    error: str | None = None,
) -> NotifyTask:
    """The task as a notification names it."""
    return NotifyTask(
        id=workflow.info().workflow_id,
        agent=task_input.agent.name,
        description=task_input.description,
        status=status,
        parent_id=task_input.parent_id,
        turns=turns,
        stop_reason=stop_reason,
        error=error,
        result_preview=last_text if status == TaskStatus.COMPLETED else None,
    )


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= _TEXT else text[: _TEXT - 1] + "…"


class Notifications:
    """The events of one task run, each started once as a ``SubagentNotify`` child.

    Workflow code: it runs inside ``SubagentWorkflow``.
    """

    def __init__(self) -> None:
        self._input: TaskInput | None = None
        self._told: set[str] = set()
        """Pending call ids already in an event (a child's carry its pause id)."""
        self._starting: list[asyncio.Task[None]] = []

    def enabled(self, task_input: TaskInput | None, worker_notifies: bool) -> bool:
        """Whether this run notifies, now that this much is known.

        It does when its spawn named a URL, or a worker it ran on reported a URL of its
        own (a model turn's ``notify``). A subagent's child never does: its pauses are
        its parent's events, and its end is its parent's business.
        """
        if task_input is None or not (task_input.notify_url or worker_notifies):
            return False
        if task_input.parent_is_subagent and not task_input.notify_url:
            return False
        self._input = task_input
        return True

    async def end(
        self, task_input: TaskInput | None, worker_notifies: bool | None, task: NotifyTask
    ) -> None:
        """Notify the run's end, if it notifies.

        A run that ends before any model turn answered (its first one failed, or it was
        cancelled) does not know whether the workers notify (``worker_notifies`` None):
        its event goes to the worker that delivers it, which posts it to its own URL or
        drops it.
        """
        if self.enabled(task_input, worker_notifies is not False):
            await self.ended(task)

    def paused(
        self, task: NotifyTask, pause_id: str | None, pending: list[PendingApproval]
    ) -> None:
        """A pause whose calls were not all told of yet: one ``task.paused`` event.

        A second child pausing beside the first adds calls to the same pause: that is
        an event too, naming every call that waits.
        """
        new = [p for p in pending if p.call_id not in self._told]
        if not new or pause_id is None:
            return
        self._told.update(p.call_id for p in new)
        calls = [
            NotifyCall(
                call_id=p.call_id,
                tool_name=p.tool_name,
                arguments_preview=p.arguments_preview,
                arguments_hash=p.arguments_hash,
                task_id=p.call_id.split("/", 1)[0] if "/" in p.call_id else task.id,
            )
            for p in pending[:MAX_CALLS]
        ]
        event = self._event("task.paused", task)
        event.pause_id = pause_id
        event.calls = calls
        event.calls_total = len(pending)
        self._starting.append(asyncio.create_task(self._start(event)))

    def budget_warning(self, task: NotifyTask, spent: float, budget: float) -> None:
        """The tree passed its budget's soft limit (``budget_warn_at``): one event."""
        event = self._event("task.budget_warning", task)
        event.spent_usd, event.budget_usd = round(spent, 6), budget
        self._starting.append(asyncio.create_task(self._start(event)))

    async def ended(self, task: NotifyTask) -> None:
        """The run ended: start its event and wait until every event of the run started.

        A child not started when the run closes would never be: this is the one wait
        a notification costs a task (the server's, never the receiver's).
        """
        kind = EVENT_TYPES.get(task.status)
        if kind is not None:
            self._starting.append(asyncio.create_task(self._start(self._event(kind, task))))
        await self.started()

    async def started(self) -> None:
        """Wait until the events issued so far have started (before continue-as-new too)."""
        starting, self._starting = self._starting, []
        await asyncio.gather(*starting)

    def _event(self, kind: str, task: NotifyTask) -> NotifyEvent:
        task = task.model_copy(
            update={
                "description": _cut(task.description) or "",
                "error": _cut(task.error),
                "result_preview": _cut(task.result_preview),
            }
        )
        event_id = f"{task.id}-notify-{workflow.uuid4().hex[:16]}"
        return NotifyEvent(id=event_id, type=kind, time=workflow.now(), task=task)

    async def _start(self, event: NotifyEvent) -> None:
        assert self._input is not None
        try:
            await workflow.start_child_workflow(
                NOTIFY_WORKFLOW,
                NotifyInput(url=self._input.notify_url, event=event),
                id=event.id,
                task_queue=workflow.info().task_queue,
                result_type=NotifyResult,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                cancellation_type=workflow.ChildWorkflowCancellationType.ABANDON,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"{event.type} of {event.task.id}",
            )
        except Exception as err:  # a notification never fails its task
            workflow.logger.warning("notification %s not started: %s", event.id, err)


__all__ = ["EVENT_TYPES", "MAX_CALLS", "Notifications", "NotifyWorkflow"]
