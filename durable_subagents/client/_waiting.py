"""How ``check_task(wait=True)`` waits: by long-polling the run's history, never a sleep.

A wait wakes on the events that can settle a task (its close, a memo write of its
status or pause), then reads the task's state again. A pause whose every call was
decided already, by anyone, needs no caller and is waited past.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistoryEventFilterType
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.client._events import CLOSE_STATUS
from durable_subagents.client._task_state import InternalInfo, decoded, settled
from durable_subagents.errors import InvalidRequest
from durable_subagents.types import TaskStatus
from durable_subagents.wire._payloads import DECIDE_SIGNAL, Decisions

__all__ = ["check_timeout", "decided_already", "wait_until_settled"]

_CLOSE_EVENTS = {*CLOSE_STATUS, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW}


def check_timeout(timeout: object) -> None:
    """Refuse a timeout that is not a finite number of seconds >= 0."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        raise InvalidRequest(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")


def branch_changed(err: RPCError) -> bool:
    """Whether a history read failed because the run's history branch changed meanwhile."""
    return err.status == RPCStatusCode.INVALID_ARGUMENT and "branch" in err.message


async def wait_until_settled(
    temporal: Client,
    describe: Callable[[str], Awaitable[InternalInfo]],
    task_id: str,
    info: InternalInfo,
    after_pause: str | None,
) -> InternalInfo:
    """Long-poll the run's history until the task settles (see ``settled``).

    ``describe`` reads the task's state (``SubagentClient._info``) when an event may
    have settled it: a few calls per wait, never a poll loop.
    """
    while True:
        run_id = info.run_id
        seen = info.history_length
        handle = temporal.get_workflow_handle(task_id, run_id=run_id)
        # A task with no 'ask' rule can only settle by closing: long-poll for that
        # alone instead of waking on every memo write.
        only_close = not info.may_pause
        events = handle.fetch_history_events(
            wait_new_event=True,
            skip_archival=True,
            event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
            if only_close
            else WorkflowHistoryEventFilterType.ALL_EVENT,
        )
        try:
            async for event in events:
                if event.event_id <= seen or not await _may_settle(temporal.data_converter, event):
                    continue
                info = await describe(task_id)
                if settled(info, after_pause) or info.run_id != run_id:
                    break
            else:
                info = await describe(task_id)
        except RPCError as err:
            if not branch_changed(err):
                raise
            # The server moved the history's branch under the long poll (a workflow task
            # it rolled back): nothing is lost, the poll starts again from what is now.
            info = await describe(task_id)
        if settled(info, after_pause):
            return info


async def decided_already(temporal: Client, info: InternalInfo) -> bool:
    """Whether a paused task received decisions on every pending call, from anyone.

    Such a pause needs no caller: the task goes on once a worker reads them. (A
    client that decided remembers it; this finds decisions sent by another
    process, such as ``subagents approve`` before ``subagents check --wait``.)
    """
    if info.status != TaskStatus.PAUSED or not info.pause_id:
        return False
    pending = {p.call_id: p.arguments_hash for p in info.pending_approvals}
    handle = temporal.get_workflow_handle(info.id, run_id=info.run_id)
    converter = temporal.data_converter
    async for event in handle.fetch_history_events(skip_archival=True):
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        attrs = event.workflow_execution_signaled_event_attributes
        if attrs.signal_name != DECIDE_SIGNAL or not attrs.input.payloads:
            continue
        try:
            [sent] = await converter.decode(attrs.input.payloads[:1], [Decisions])
        except Exception:  # a malformed signal decides nothing
            continue
        if sent.pause_id != info.pause_id:
            continue
        for d in sent.decisions:
            # one bound to other arguments was ignored by the task: it decided nothing
            if d.call_id in pending and d.arguments_hash == pending[d.call_id]:
                del pending[d.call_id]
    return not pending


async def _may_settle(converter: DataConverter, event: HistoryEvent) -> bool:
    """Whether an event can make a wait return (so not every memo write costs a call)."""
    if event.event_type in _CLOSE_EVENTS:
        return True
    if event.event_type != EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
        return False
    fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
    if "status" not in fields and "pause_id" not in fields:
        return False
    if "status" in fields:
        status = TaskStatus(await decoded(converter, fields["status"], str))
        return status.terminal or status == TaskStatus.PAUSED
    return True
