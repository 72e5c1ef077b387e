"""Task events read from a task's Temporal history as it grows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import DataConverter

from durable_subagents.client._live_turn import LIVE_POLL, LiveTurn, TextResolver, ticking
from durable_subagents.client._task_state import decoded, failure_message
from durable_subagents.context._context import describe
from durable_subagents.policy import arguments_preview
from durable_subagents.spawn import model_label
from durable_subagents.types import Compaction, TaskEvent, TaskStatus, Usage
from durable_subagents.wire._payloads import (
    COMPACT_ACTIVITY,
    DECIDE_SIGNAL,
    MODEL_TURN_ACTIVITY,
    RUN_TOOL_ACTIVITY,
    SEND_INPUT_SIGNAL,
    Decisions,
)

CLOSE_STATUS: dict[int, TaskStatus | None] = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: None,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: TaskStatus.FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: TaskStatus.CANCELLED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: TaskStatus.CANCELLED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: TaskStatus.TIMED_OUT,
}
_ACTIVITY_DONE = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}


async def history_events(
    client: Client,
    task_id: str,
    run_id: str | None,
    resolve_text: TextResolver | None = None,
) -> AsyncIterator[TaskEvent]:
    """Translate history events into ``TaskEvent``s, following continue-as-new.

    While a model turn is open, its live text is polled in between (see ``_live_text``).
    """
    converter = client.data_converter
    status: TaskStatus | None = None
    said_ignored: list[Any] = []
    live = LiveTurn(client, task_id, resolve_text)
    while True:
        handle = client.get_workflow_handle(task_id, run_id=run_id)
        live.run_id = run_id
        scheduled: dict[int, tuple[str, str]] = {}
        next_run: str | None = None
        history = handle.fetch_history_events(wait_new_event=True, skip_archival=True)
        async for event in ticking(history, LIVE_POLL, lambda: live.open is not None):
            if event is None:
                for text_event in await live.poll():
                    yield text_event
                continue
            time = event.event_time.ToDatetime(UTC) if event.HasField("event_time") else None
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                summary = await _summary(event, converter)
                scheduled[event.event_id] = (attrs.activity_type.name, summary)
                if attrs.activity_type.name == MODEL_TURN_ACTIVITY:
                    live.start(event.event_id, _turn_of(summary))
                elif attrs.activity_type.name == COMPACT_ACTIVITY:
                    pass  # shown when it ends, with what it did
                else:
                    yield TaskEvent(
                        kind="tool_started",
                        task_id=task_id,
                        time=time,
                        tool=_tool_of(summary),
                        summary=summary,
                    )
            elif kind in _ACTIVITY_DONE:
                attrs = getattr(event, _ACTIVITY_DONE[kind])
                name, summary = scheduled.get(attrs.scheduled_event_id, ("", ""))
                if name == MODEL_TURN_ACTIVITY:
                    completed = kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                    result = await _result(client, attrs) if completed else None
                    for text_event in await live.finish(result, time):
                        yield text_event
                    if result is not None and result.get("compact"):
                        continue  # not answered: a compaction comes first, then the turn again
                    yield TaskEvent(
                        kind="turn",
                        task_id=task_id,
                        time=time,
                        turn=_turn_of(summary),
                        summary=_turn_summary(summary, result),
                        error=None if completed else await _call_error(converter, kind, attrs),
                        usage=_usage_of(result),
                    )
                    for tool_event in _read_events(task_id, time, result):
                        yield tool_event
                elif name == COMPACT_ACTIVITY:
                    completed = kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                    result = await _result(client, attrs) if completed else None
                    if result is not None and result.get("changed") is False:
                        continue  # nothing was left to compact
                    mark = _compaction_of(result)
                    yield TaskEvent(
                        kind="compaction",
                        task_id=task_id,
                        time=time,
                        summary=describe(mark) if mark is not None else summary,
                        error=None if completed else await _call_error(converter, kind, attrs),
                        usage=_usage_of(result),
                    )
                elif name == RUN_TOOL_ACTIVITY:
                    yield TaskEvent(
                        kind="tool_finished",
                        task_id=task_id,
                        time=time,
                        tool=_tool_of(summary),
                        summary=summary,
                        error=await _call_error(converter, kind, attrs),
                    )
            elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
                for tool_event in await _local_tool_events(task_id, time, event, converter):
                    yield tool_event
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                signal = await _signal_event(task_id, time, event, converter)
                if signal is not None:
                    yield signal
            elif kind == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
                fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
                if "ignored_decisions" in fields:
                    # Shown with the memo's next write: each new one since the last.
                    ignored = await decoded(converter, fields["ignored_decisions"], list)
                    for entry in (e for e in ignored if e not in said_ignored):
                        yield TaskEvent(
                            kind="decision_ignored",
                            task_id=task_id,
                            time=time,
                            summary=f"pause {entry['pause_id']}: {entry['reason']}",
                        )
                    said_ignored = ignored
                if "status" in fields:
                    new = TaskStatus(await decoded(converter, fields["status"], str))
                    if new != status:
                        status = new
                        yield TaskEvent(kind="status", task_id=task_id, time=time, status=new)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attrs_failed = event.workflow_task_failed_event_attributes
                if attrs_failed.HasField("failure"):
                    # Workflow code raised: the task is held, retried until a fix runs it.
                    message = await failure_message(converter, attrs_failed.failure)
                    yield TaskEvent(kind="retrying", task_id=task_id, time=time, error=message)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attrs_can = event.workflow_execution_continued_as_new_event_attributes
                next_run = attrs_can.new_execution_run_id
            elif kind in CLOSE_STATUS:
                final = CLOSE_STATUS[kind] or status or TaskStatus.COMPLETED
                yield TaskEvent(kind="closed", task_id=task_id, time=time, status=final)
                return
        if next_run is None:
            return
        run_id = next_run


async def _result(client: Client, attrs: Any) -> dict[str, Any] | None:
    """A completed activity's result as a dict (None if it cannot be read)."""
    payloads = list(attrs.result.payloads) if attrs.HasField("result") else []
    if not payloads:
        return None
    try:
        values = await client.data_converter.decode(payloads[:1])
    except Exception:
        return None
    return values[0] if values and isinstance(values[0], dict) else None


def _usage_of(result: dict[str, Any] | None) -> Usage | None:
    """The usage an activity's result reports, if it reads as one."""
    try:
        return Usage.model_validate(result["usage"]) if result and "usage" in result else None
    except ValueError:
        return None


def _compaction_of(result: dict[str, Any] | None) -> Compaction | None:
    try:
        return Compaction.model_validate(result["compaction"]) if result else None
    except (KeyError, ValueError):
        return None


async def _call_error(converter: DataConverter, kind: int, attrs: Any) -> str | None:
    """How a model-turn or tool-call activity ended, if not completed."""
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
        return "cancelled"
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
        return "timed out"
    if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
        if not attrs.HasField("failure"):
            return "failed"
        message = await failure_message(converter, attrs.failure)
        return f"failed: {message}" if message else "failed"
    return None


def _read_events(
    task_id: str, time: datetime | None, result: dict[str, Any] | None
) -> list[TaskEvent]:
    """The reads a model turn ran itself (``read_results``): a start and an end each.

    They ran before the turn answered, so both carry the time it did.
    """
    ran = result.get("read_results") if result else None
    if not isinstance(ran, dict) or not ran:
        return []
    assert result is not None
    events = []
    for call in result.get("tool_calls") or []:
        if not isinstance(call, dict) or call.get("id") not in ran:
            continue
        name, arguments = str(call.get("name", "")), call.get("arguments")
        summary = arguments_preview(name, arguments if isinstance(arguments, dict) else {})
        events += [
            TaskEvent(kind=kind, task_id=task_id, time=time, tool=name, summary=summary)
            for kind in ("tool_started", "tool_finished")
        ]
    return events


async def _local_tool_events(
    task_id: str, time: datetime | None, event: HistoryEvent, converter: DataConverter
) -> list[TaskEvent]:
    """A tool call run as a local activity: its start and its end, from its marker.

    The marker is written when the workflow task that ran the call completes, so both
    events arrive together; the start carries the time the call was scheduled.
    """
    attrs = event.marker_recorded_event_attributes
    if attrs.marker_name != "core_local_activity" or "data" not in attrs.details:
        return []
    try:
        data = await decoded(converter, attrs.details["data"].payloads[0], dict)
    except Exception:
        return []
    if data.get("activity_type") != RUN_TOOL_ACTIVITY:
        return []
    summary = await _summary(event, converter)
    tool = _tool_of(summary)
    scheduled = data.get("original_schedule_time") or {}
    started = time
    if isinstance(scheduled, dict) and "seconds" in scheduled:
        seconds = scheduled["seconds"] + scheduled.get("nanos", 0) / 1e9
        started = datetime.fromtimestamp(seconds, tz=UTC)
    failed = attrs.HasField("failure")
    return [
        TaskEvent(kind="tool_started", task_id=task_id, time=started, tool=tool, summary=summary),
        TaskEvent(
            kind="tool_finished",
            task_id=task_id,
            time=time,
            tool=tool,
            summary=summary,
            error="LOCAL_ACTIVITY_FAILED" if failed else None,
        ),
    ]


async def _signal_event(
    task_id: str, time: datetime | None, event: HistoryEvent, converter: DataConverter
) -> TaskEvent | None:
    """An input or decision signal as an event (what was sent, before the task reads it)."""
    attrs = event.workflow_execution_signaled_event_attributes
    payloads = list(attrs.input.payloads)
    if not payloads:
        return None
    try:
        if attrs.signal_name == SEND_INPUT_SIGNAL:
            text = " ".join(str(await decoded(converter, payloads[0], str)).split())
            summary = text if len(text) <= 200 else text[:199] + "…"
            return TaskEvent(kind="input", task_id=task_id, time=time, summary=summary)
        if attrs.signal_name == DECIDE_SIGNAL:
            sent = Decisions.model_validate(await decoded(converter, payloads[0], dict))
            parts = [
                f"{'approve' if d.approved else 'reject'} {d.call_id}"
                + (f" ({d.reason})" if d.reason else "")
                for d in sent.decisions
            ]
            summary = f"pause {sent.pause_id}: " + ", ".join(parts)
            return TaskEvent(kind="decision", task_id=task_id, time=time, summary=summary)
    except Exception:  # a malformed signal is the workflow's to ignore; show nothing
        return None
    return None


async def _summary(event: HistoryEvent, converter: DataConverter) -> str:
    if event.HasField("user_metadata") and event.user_metadata.HasField("summary"):
        try:
            return str(await decoded(converter, event.user_metadata.summary, str))
        except Exception:
            return ""
    return ""


def _turn_of(summary: str) -> int | None:
    """The turn number of a model turn's summary (``turn 3 · openai:gpt-4.1-mini``)."""
    parts = summary.partition(" · ")[0].split()
    if len(parts) == 2 and parts[0] == "turn" and parts[1].isdecimal():
        return int(parts[1])
    return None


def _turn_summary(summary: str, result: dict[str, Any] | None) -> str:
    """A finished turn's summary naming the model that answered.

    The summary was written when the turn was scheduled: the first turn of a task on the
    worker's default model says ``default`` there; the turn's result names the model.
    """
    model = result.get("model") if result else None
    turn = _turn_of(summary)
    if not isinstance(model, str) or not model or turn is None:
        return summary
    return f"turn {turn} · {model_label(model)}"


def _tool_of(summary: str) -> str:
    """The tool name of a tool call's summary (``bash · ls -la``); names hold no ``·``."""
    return summary.partition(" · ")[0]
