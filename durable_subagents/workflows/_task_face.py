"""A task's run state, and how it shows: memo, search attributes, the Web UI, its parent.

``SubagentWorkflow`` is a ``TaskFace``: the state its loop and handlers change (turns,
usage, the transcript's head, the inbox, the pause, the children...) is set up here, and
so is every way the task makes it seen: the memo and search attributes (``_publish``,
only what changed), the Web UI's current details, the parent's view of a pause, a
notification, and the run's result (``_finish``).

Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from durable_subagents.workflows._approvals import Approvals
from durable_subagents.workflows._background import Background
from durable_subagents.workflows._current_details import TaskView, current_details
from durable_subagents.workflows._ledger import (
    SpendLedger,
    TreeHold,
    report_spend,
    reports_spend,
    unpriced,
)
from durable_subagents.workflows._model_turns import ModelCalls, WorkerTools
from durable_subagents.workflows._notify import Notifications, notify_task
from durable_subagents.workflows._publish import Published, task_memo
from durable_subagents.workflows._stream import TaskEvents, TaskStream
from durable_subagents.workflows._subtasks import ChildTasks
from durable_subagents.workflows._tool_calls import ToolCalls
from durable_subagents.workflows._tree import RegisteredTasks, TreeCount

with workflow.unsafe.imports_passed_through():
    from durable_subagents.spawn import model_label
    from durable_subagents.types import Message, PendingApproval, TaskResult, TaskStatus, Usage
    from durable_subagents.wire._payloads import NotifyTask, TaskInput

__all__ = ["TaskFace"]


class TaskFace:
    """A task run's state, and how the task shows it (see the module's doc)."""

    def __init__(self, input: TaskInput) -> None:
        carried = input.state.stream if input.state is not None else None
        self._stream = TaskStream(carried)
        """The task's event stream, which ``watch`` reads (see ``_stream``)."""
        self._events = TaskEvents(self._stream)
        self._status = TaskStatus.PENDING
        self._turns = 0
        self._usage = Usage()
        self._head: str | None = None
        self._model = "default"
        self._inbox: list[str] = []
        self._last_text = ""
        self._last_text_ref: str | None = None
        self._worker = WorkerTools()
        self._background = Background()
        """What handlers started: finished before the run closes or continues as new."""
        self._published = Published(self._background)
        self._input: TaskInput | None = None
        self._runs = 1
        self._approvals = Approvals()
        self._ledger = SpendLedger()
        """The tree's spend, kept by its top task when its spawn set ``budget_usd``."""
        self._hold = TreeHold()
        """A task below the top: whether the top holds the tree's model turns."""
        self._tree = TreeCount(self._ledger.spawn_refusal)
        """The tree's count of tasks, kept by its top task (``reserve_tree_task``)."""
        self._children = ChildTasks(self._republish, self._background, self._tree)
        self._time_limit_from: datetime | None = None
        self._adopted = RegisteredTasks(self._background)
        self._unread_pending = 0
        self._child_share: int | None = None
        """Each child's token budget when this turn spawns (see ``budget.child_share``)."""
        self._tools = ToolCalls(on_change=self._show_details, events=self._events)
        self._models = ModelCalls(on_change=self._show_details)
        self._compactions = 0
        self._shown: tuple[TaskStatus, str | None, list[PendingApproval]] | None = None
        """What ``_publish`` last published: status, pause id and pending calls."""
        self._output: dict[str, Any] | None = None
        """The answer that matched the output schema (the result is its JSON)."""
        self._invalid_answers = 0
        """Answers of this run that did not match the output schema."""
        self._schema_ref: str | None = None
        """The blob the output schema was stored as by this run's first turn."""
        self._notes = Notifications()
        """The run's events for its ``notify_url`` (see ``_notify``)."""
        self._given_up: str | None = None
        """Why the task is to fail if a bug holds it (``give_up``)."""

    def _republish(self) -> None:
        if self._input is not None and not self._status.terminal:
            self._publish(self._status)

    def _notify_task(
        self, status: TaskStatus, stop_reason: str | None = None, error: str | None = None
    ) -> NotifyTask:
        assert self._input is not None
        return notify_task(
            self._input,
            status,
            turns=self._turns,
            last_text=self._last_text,
            stop_reason=stop_reason,
            error=error,
        )

    async def _notify_end(self, stop_reason: str | None, error: str | None) -> None:
        """Notify the run's end, its status the one just published (``Notifications.end``)."""
        task = self._notify_task(self._status, stop_reason, error)
        await self._notes.end(self._input, self._worker.notifies, task)

    # ------------------------------------------------------------------ state

    def _finish(
        self,
        status: TaskStatus,
        *,
        stop_reason: str,
        error: str | None = None,
        pending: list[Message] | None = None,
    ) -> TaskResult:
        # Input that came too late for this run is kept: a follow-up run reads it first.
        unread = [Message(role="user", content=text) for text in self._inbox]
        self._unread_pending = sum(m.role == "user" for m in pending or [])
        self._publish(status, stop_reason=stop_reason, error=error)
        self._inbox.clear()
        return TaskResult(
            pending_messages=[*(pending or []), *unread],
            status=status,
            result=self._last_text,
            result_ref=self._last_text_ref,
            stop_reason=stop_reason,
            error=error,
            turns=self._turns,
            usage=self._usage,
            head=self._head,
            model=model_label(self._model),
            children=self._children.finished,
            output=self._output,
            compactions=self._compactions,
            tree_usage=self._tree_usage(),
        )

    def _progress(self) -> None:
        """Publish the turn's progress (turns, usage, head) while running.

        A status change is published at once; progress alone at most once per
        ``PROGRESS_EVERY`` of workflow time, so fast turns do not add a memo event each.
        """
        # The turn that first names the model (``default`` -> the worker's) is published
        # at once, so ``check`` never shows ``default`` for a task whose model has answered.
        named = self._published.memo.get("model") == model_label(self._model)
        if self._status == TaskStatus.RUNNING and not self._published.progress_due() and named:
            self._show_details()
            return
        self._publish(TaskStatus.RUNNING)

    def _publish(
        self, status: TaskStatus, *, stop_reason: str | None = None, error: str | None = None
    ) -> None:
        """Write the state to the memo and search attributes, only what changed."""
        assert self._input is not None
        self._status = status
        child_pause, child_calls = self._children.pending()
        pause_id = self._approvals.pause_id or child_pause
        pending = [*self._approvals.pending, *child_calls]
        if pending and not status.terminal and status != TaskStatus.CANCELLING:
            status = TaskStatus.PAUSED  # this task, or a child of it, waits for a decision
        self._shown = (status, pause_id, pending)
        self._events.status(status, pause_id, pending)
        self._show_details()
        memo = task_memo(
            status,
            turns=self._turns,
            usage=self._usage,
            model=model_label(self._model),
            head=self._head,
            pause_id=pause_id,
            pending=pending,
            sandbox=self._worker.sandbox,
            children=self._children.count,
            tree_usage=self._tree_usage(),
            compactions=self._compactions,
            stop_reason=stop_reason,
            error=error,
            last_text=self._last_text,
            unread=len(self._inbox) + self._unread_pending,
            ledger=self._ledger_memo(),
        )
        self._published.write_memo(memo)
        self._published.write_search_attributes(status, self._turns)
        self._published.report_to_parent(self._input.parent_is_subagent, status, pause_id, pending)
        notifies = self._notes.enabled(self._input, bool(self._worker.notifies))
        if status == TaskStatus.PAUSED and pending and notifies:
            self._notes.paused(self._notify_task(status), pause_id, pending)

    def _show_details(self) -> None:
        """Set what the Web UI shows as current details (no command, no history event)."""
        if self._input is None or self._shown is None:
            return
        status, pause_id, pending = self._shown
        view = TaskView(
            task_id=workflow.info().workflow_id,
            status=status,
            turns=self._turns,
            max_turns=self._input.max_turns,
            model=model_label(self._model),
            pause_id=pause_id,
            pending=pending,
            approval_timeout=self._input.approval_timeout if self._approvals.pending else None,
            waiting_for_model=self._models.waiting,
            running=list(self._tools.running.values()),
            queued=self._tools.queued,
            sandbox=self._worker.sandbox,
            usage=self._usage,
            tree_usage=self._tree_usage(),
            compactions=self._compactions,
            compacting=self._models.compacting,
        )
        workflow.set_current_details(current_details(view))

    # ------------------------------------------------------------------ the tree's budget

    async def _spent(self) -> None:
        """Count what the task spent: in the ledger at the top, else told to the top.

        A task below the top hears whether the tree holds before its next turn.

        Raises:
            ApplicationError: ``Unpriced``: the tree has a budget in money, and this
                task's model has no price.
        """
        assert self._input is not None
        why = unpriced(self._input, self._usage, self._model)
        if why is not None:
            raise ApplicationError(why, type="Unpriced", non_retryable=True)
        if self._ledger.budget is not None:
            self._ledger.own(self._usage, self._turns)
            self._spend_changed()
        elif reports_spend(self._input):
            word = await report_spend(self._input, self._usage, self._turns)
            if word is not None:
                self._hold.take(word)

    def _spend_changed(self) -> None:
        """The top task's ledger took a spend: warn once, hold the tree when it is spent."""
        assert self._input is not None
        ledger = self._ledger
        notifies = self._notes.enabled(self._input, bool(self._worker.notifies))
        if ledger.warn_due(self._input.budget_warn_at) and notifies:
            task = self._notify_task(self._status)
            self._notes.budget_warning(task, ledger.spent, ledger.budget or 0.0)
        if ledger.exhausted and not ledger.holding:
            # The tasks that report next hear it in the answer; the others, busy with
            # tool calls or waits, by the signal before their next turn.
            word = ledger.hold(True)
            self._events.event("budget", f"spent {ledger.spent:.6f} of {ledger.budget} USD")
            self._background.start(ledger.announce(word, self._tree.ids), "holding the tree")
        self._republish()

    async def _budget_raised(self) -> bool:
        """Pause on ``raise_budget`` until a person raises the tree's budget or rejects it.

        Returns:
            Whether the tree goes on (a rejection, or the pause's timeout, stops it).
        """
        assert self._input is not None
        ledger, first = self._ledger, self._input.budget_usd or 0.0
        while ledger.exhausted:
            ask = ledger.ask(self._turns)
            verdicts = await self._approvals.pause(
                [ask], turn=self._turns, timeout=self._input.approval_timeout, publish=self._publish
            )
            if verdicts[ask.id][0] != "allow":
                return False
            ledger.raised(self._approvals.decisions.get(ask.id), first)
            self._events.event("budget", f"raised to {ledger.budget} USD")
        await ledger.announce(ledger.hold(False), self._tree.ids)
        return True

    def _ledger_memo(self) -> dict[str, Any] | None:
        """The tree's budget and spend, for the memo (a top task with a budget only)."""
        budget = self._ledger.budget
        if budget is None:
            return None
        return {
            "budget_usd": budget,
            "spent_usd": round(self._ledger.spent, 9),
            "by_task": self._ledger.by_task(workflow.info().workflow_id),
        }

    def _tree_usage(self) -> Usage | None:
        """This task's usage and its finished subagents' (None when it spawned none)."""
        return self._usage + self._children.usage() if self._children.count else None
