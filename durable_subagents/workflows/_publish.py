"""What a task publishes of its state: memo, search attributes, its parent's report.

The memo is what ``check`` and the Web UI read without a worker; each write is a
history event, so only what changed is written, progress alone at most once per
``PROGRESS_EVERY``, and the search attributes only when the status changes. Workflow
code: deterministic, no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

from durable_subagents.workflows._background import Background

with workflow.unsafe.imports_passed_through():
    from durable_subagents.types import PendingApproval, TaskStatus, Usage
    from durable_subagents.wire import _search_attributes as sa
    from durable_subagents.wire._payloads import CHILD_STATE_SIGNAL, ChildState

PROGRESS_EVERY = timedelta(seconds=10)
"""Least workflow time between two memo writes of progress alone. Each write is a
history event and, on the server, an update of the task's visibility record: written
at every turn (1 s apart), they took a quarter of the dev server's CPU per turn with
1,000 tasks in flight."""


def task_memo(
    status: TaskStatus,
    *,
    turns: int,
    usage: Usage,
    model: str,
    head: str | None,
    pause_id: str | None,
    pending: list[PendingApproval],
    sandbox: str | None,
    children: int,
    tree_usage: Usage | None,
    compactions: int,
    stop_reason: str | None,
    error: str | None,
    last_text: str,
    unread: int,
    ledger: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The memo of a task in ``status``: every key it has now.

    Args:
        status: The status published.
        turns: Turns taken, the current one included.
        usage: This task's tokens so far.
        model: The model's label.
        head: The transcript's head.
        pause_id: The pause the task (or a child of it) waits in.
        pending: The calls waiting for a decision.
        sandbox: How the worker runs commands.
        children: Children spawned so far.
        tree_usage: This task's usage and its finished subagents'.
        compactions: Times the conversation was compacted.
        stop_reason: Why the task stopped, once it has.
        error: What failed, once something has.
        last_text: The model's last text (its answer, once the task ended).
        unread: Input that arrived after the last turn began.
        ledger: A tree's top task's budget and spend (``budget_usd``, ``spent_usd``,
            ``by_task``); None: no budget in money.
    """
    memo: dict[str, Any] = {
        "status": status.value,
        "turns": turns,
        "usage": usage.model_dump(),
        "model": model,
        "head": head,
        "pause_id": pause_id,
        "pending_approvals": [p.model_dump() for p in pending],
    }
    if sandbox in ("none", "unavailable"):
        memo["sandbox"] = sandbox  # never silent: every task says so
    if children:
        memo["children"] = children
        if tree_usage is not None:
            memo["tree_usage"] = tree_usage.model_dump()
    if compactions:
        memo["compactions"] = compactions
    if ledger is not None:
        memo["ledger"] = ledger
    if stop_reason is not None:
        memo["stop_reason"] = stop_reason
    if error is not None:
        memo["error"] = error
    if status.terminal and last_text:
        memo["result_preview"] = last_text[:500]
    if status.terminal and unread:
        memo["unread_input"] = unread  # it arrived after the last turn began
    return memo


class Published:
    """What the task last published, so that only what changed is written again.

    Attributes:
        memo: The memo as written (read by the status query and a continue-as-new).
        progress_at: When the memo was last written.
    """

    def __init__(self, background: Background) -> None:
        self.memo: dict[str, Any] = {}
        self.progress_at: datetime | None = None
        self._background = background
        self._search_attributes: tuple[str, int] | None = None
        self._reported: tuple[str, str | None, int] | None = None
        self.ignored: list[dict[str, Any]] = []
        """The newest ignored decisions, shown with the memo's next write."""

    def progress_due(self) -> bool:
        """Whether progress alone may be written (``PROGRESS_EVERY`` since the last write)."""
        last = self.progress_at
        return last is None or workflow.now() - last >= PROGRESS_EVERY

    def write_memo(self, memo: dict[str, Any]) -> None:
        """Upsert the keys of ``memo`` that changed (and the ignored decisions, if new).

        An ignored decision never writes the memo by itself (anyone who may signal can
        send stale ones): it is said at once in the task's events, and shown in the
        memo with its next write.
        """
        if self.ignored:
            memo = {**memo, "ignored_decisions": self.ignored}
        changed = {k: v for k, v in memo.items() if self.memo.get(k) != v}
        if changed:
            self.memo.update(changed)
            workflow.upsert_memo(changed)
            self.progress_at = workflow.now()

    def write_search_attributes(self, status: TaskStatus, turns: int) -> None:
        """Upsert the status and turns when the status changed."""
        # Only a status change updates the search attributes: one update per turn
        # would add an event to every turn's history.
        state = (status.value, turns)
        last = self._search_attributes
        if last is not None and last[0] == status.value:
            state = last
        if state != last:
            self._search_attributes = state
            workflow.upsert_search_attributes(
                [sa.STATUS.value_set(status.value), sa.TURNS.value_set(turns)]
            )

    def report_to_parent(
        self,
        parent_is_subagent: bool,
        status: TaskStatus,
        pause_id: str | None,
        pending: list[PendingApproval],
    ) -> None:
        """Tell a parent subagent task when this one pauses or resumes."""
        parent = workflow.info().parent
        if not parent_is_subagent or parent is None or status.terminal:
            return
        report = (status.value, pause_id, len(pending))
        if report == self._reported or (self._reported is None and not pending):
            return
        self._reported = report
        state = ChildState(
            task_id=workflow.info().workflow_id,
            status=status,
            pause_id=pause_id,
            pending_approvals=pending,
        )
        handle = workflow.get_external_workflow_handle(parent.workflow_id)
        self._background.start(handle.signal(CHILD_STATE_SIGNAL, state), "telling the parent")
