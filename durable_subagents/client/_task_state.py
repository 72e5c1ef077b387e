"""How a task's state is read from what Temporal returns: descriptions and histories.

A task's status, pause and usage come from its workflow's description (``info_from``).
Everything the workflow writes may be encrypted (``SUBAGENTS_PAYLOAD_KEY``), so a raw
payload or failure found in a history or a description is always read through the
client's data converter, codec included, never with the bare payload converter
(``decoded``, ``failure_message``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.client import WorkflowExecutionStatus
from temporalio.converter import DataConverter

from durable_subagents.errors import PayloadEncryptionError
from durable_subagents.types import IgnoredDecision, PendingApproval, TaskInfo, TaskStatus, Usage

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
    return InternalInfo(
        id=task_id,
        run_id=run_id,
        agent=memo.get("agent") or "",
        description=memo.get("description") or "",
        status=task_status,
        result=memo.get("result_preview"),
        error=memo.get("error"),
        turns=int(memo.get("turns") or 0),
        usage=Usage.model_validate(memo.get("usage") or {}),
        tree_usage=Usage.model_validate(memo["tree_usage"]) if memo.get("tree_usage") else None,
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
        children=int(memo.get("children") or 0),
        may_pause=bool(memo.get("may_pause", True)),
    )


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
