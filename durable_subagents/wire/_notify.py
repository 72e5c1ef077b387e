"""What a task's notifications carry: the event a receiver gets, and its delivery.

Recorded in histories (the ``SubagentNotify`` workflow's input and result): the
compatibility rule of ``_payloads`` holds here. ``_payloads`` exports these too.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from durable_subagents.types import TaskStatus

__all__ = ["NotifyCall", "NotifyEvent", "NotifyInput", "NotifyResult", "NotifyTask"]


class NotifyCall(BaseModel):
    """A call awaiting a decision, as a notification names it (a preview, never whole)."""

    call_id: str
    tool_name: str
    arguments_preview: str
    arguments_hash: str
    task_id: str
    """The task whose call it is: the notifying task, or a child whose pause surfaces
    on it (then ``call_id`` is ``<child>/<child pause>/<call>``, as decisions name it)."""


class NotifyTask(BaseModel):
    """The task a notification is about, as it was when the event happened."""

    id: str
    agent: str = ""
    description: str = ""
    status: TaskStatus
    parent_id: str | None = None
    turns: int = 0
    stop_reason: str | None = None
    error: str | None = None
    result_preview: str | None = None


class NotifyEvent(BaseModel):
    """One event of a task, the body a notification receiver gets (with links added)."""

    id: str
    """Unique per event, the same in every attempt to deliver it: dedupe by it."""
    type: str
    """``task.paused``, ``task.completed``, ``task.failed``, ``task.cancelled``,
    ``task.timed_out`` or ``task.budget_warning``."""
    time: datetime
    task: NotifyTask
    pause_id: str | None = None
    """The pause to decide (``task.paused``): what the inbox and ``approve`` bind to."""
    calls: list[NotifyCall] = Field(default_factory=list)
    calls_total: int = 0
    """How many calls the pause holds (``calls`` may list fewer)."""
    spent_usd: float | None = None
    """``task.budget_warning``: what the task's tree has spent, in USD."""
    budget_usd: float | None = None
    """``task.budget_warning``: the tree's budget, in USD."""


class NotifyInput(BaseModel):
    """Input of ``SubagentNotify`` and of its ``send_notification`` activity."""

    event: NotifyEvent
    url: str | None = None
    """The spawn's ``notify_url``; None: the sending worker's ``SUBAGENTS_NOTIFY_URL``."""


class NotifyResult(BaseModel):
    """What became of a notification: delivered, or why not (never a failure)."""

    delivered: bool
    error: str | None = None
