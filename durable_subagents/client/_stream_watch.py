"""``watch``: a task's event stream read by offset, live and after the task closed.

The task's workflow hosts a Workflow Stream (see ``_stream_items``). While the run is
open, a watcher long-polls it with the stream's poll Update, which returns as soon as
an item is appended: no timer between a piece of text reaching the workflow and the
watcher. A closed run is read with the stream's poll Query (a worker replays it).
Continue-as-new and follow-up runs are followed: their streams go on with the same
offsets.

Events that are not items of the stream get no offset: ``retrying`` (the workflow's
code raised, so it cannot publish anything) is read from ``describe`` while the stream
is silent, and a run that was terminated gets its ``closed`` from Temporal's status.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from datetime import UTC, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowHistoryEventFilterType,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.client._task_state import _retrying
from durable_subagents.errors import InvalidRequest, TaskNotFound
from durable_subagents.types import TaskEvent, TaskStatus
from durable_subagents.wire._stream_items import STREAM_BOUNDS_QUERY, StreamEvent, topic_task

__all__ = [
    "POLL_COOLDOWN",
    "StreamUnreadable",
    "check_after",
    "stream_events",
    "stream_page",
]

POLL = "__temporal_workflow_stream_poll"
"""The Workflow Stream's poll Update and Query (``WorkflowStream``'s handlers)."""
TRUNCATED = "TruncatedOffset"
DRAINING = "StreamDraining"

POLL_COOLDOWN = 0.05
"""Seconds between a watcher's polls while items keep coming: each accepted poll is two
history events of the task, so a watcher batches what arrives within it."""
MAX_CATCH_UP = 100
"""Runs a watcher that fell behind reads one by one before it goes to the latest."""
QUERY_TIMEOUT = timedelta(seconds=10)
"""How long a read of the stream by Query waits for a worker to answer (a closed run is
replayed to answer; with no worker up, the watch falls back to the task's history)."""
BACKLOG = 16
"""Items in one poll that say the watcher is behind: it polls again at once."""
REFUSED_PAUSE = 1.0
"""Seconds before a watcher asks again when the task refused its poll."""
SILENCE_CHECK = 5.0
"""Seconds of a silent stream after which the watcher asks whether the task is held."""

_SILENT_ENDS = {
    WorkflowExecutionStatus.TERMINATED: TaskStatus.CANCELLED,
    WorkflowExecutionStatus.TIMED_OUT: TaskStatus.TIMED_OUT,
}
"""How runs end that publish no ``closed`` of their own, as ``watch`` says it."""


def check_after(after: object) -> int | None:
    """``after`` as given to ``watch``: None or an offset (an integer, at least 0)."""
    if after is None:
        return None
    if isinstance(after, bool) or not isinstance(after, int):
        raise InvalidRequest(f"after must be an offset (an integer, 0 or more), not {after!r}")
    if after < 0:
        raise InvalidRequest(f"after must be an offset of 0 or more, not {after}")
    return after


async def stream_events(
    temporal: Client, task_id: str, *, tree: bool, after: int | None
) -> AsyncIterator[TaskEvent]:
    """The task's stream from just after ``after``, until its last run closes.

    Raises:
        TaskNotFound: no task has this id.
        StreamUnreadable: the task closed and no worker can read its stream.
    """
    watcher = _Watcher(temporal, task_id, tree, 0 if after is None else after + 1)
    async for event in watcher.run():
        yield event


async def workers_poll(temporal: Client, task_queue: str) -> bool:
    """Whether a worker polled the workflow task queue lately (one may answer a Query)."""
    try:
        described = await temporal.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=temporal.namespace,
                task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            ),
            timeout=QUERY_TIMEOUT,
        )
    except RPCError:
        return True  # cannot tell: let the Query say
    return bool(described.pollers)


class StreamUnreadable(Exception):
    """A closed run's stream could not be queried (no worker to replay it)."""


class _Watcher:
    def __init__(self, temporal: Client, task_id: str, tree: bool, offset: int) -> None:
        self.temporal = temporal
        self.task_id = task_id
        self.topics: list[str] = [] if tree else [""]
        self.converter = temporal.data_converter.payload_converter
        self.offset = offset
        """The next offset wanted."""
        self.retrying: str | None = None

    async def run(self) -> AsyncIterator[TaskEvent]:
        while True:
            try:
                desc = await self.temporal.get_workflow_handle(self.task_id).describe()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    raise TaskNotFound(f"no task {self.task_id!r}") from None
                raise
            run = self.temporal.get_workflow_handle(self.task_id, run_id=desc.run_id)
            running = desc.status == WorkflowExecutionStatus.RUNNING
            if not running and not await workers_poll(self.temporal, desc.task_queue):
                raise StreamUnreadable(f"no worker polls task queue {desc.task_queue!r}")
            if desc.run_id != self.run_id:
                if self.run_id is not None:
                    # runs went by since: read each (continue-as-new links them)
                    async for event in self._catch_up(desc.run_id):
                        yield event
                self.run_id = desc.run_id
                truncated = await self._check_retained(run, closed=not running)
                if truncated is not None:
                    yield truncated
            if running:
                async for event in self._follow(run):
                    yield event
                continue  # the run closed, or goes on as new: describe again
            closed = False
            start = self.offset
            async for event in self._read_closed(run):
                closed = closed or (event.kind == "closed" and event.depth == 0)
                yield event
            if desc.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                continue
            if not closed and start <= self._end and desc.status in _SILENT_ENDS:
                # the run ended with no word of its own (terminated, or timed out by Temporal)
                status = _SILENT_ENDS[desc.status]
                yield TaskEvent(
                    kind="closed", task_id=self.task_id, offset=self._end, status=status
                )
            return

    _end = 0
    """The end of the last closed run read (its next offset)."""
    run_id: str | None = None
    """The run read last."""

    async def _catch_up(self, latest: str | None) -> AsyncIterator[TaskEvent]:
        """The rest of the run read last and of every run after it before ``latest``.

        A watcher that fell behind (a poll refused while a run closed, a slow network)
        reads what each run retained when it went on as new, by Query.
        """
        run_id = self.run_id
        for _ in range(MAX_CATCH_UP):
            if run_id is None or run_id == latest:
                return
            run = self.temporal.get_workflow_handle(self.task_id, run_id=run_id)
            if (await run.describe()).status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
                return  # a follow-up run: nothing links it, and nothing was missed
            truncated = await self._check_retained(run, closed=True)
            if truncated is not None:
                yield truncated
            async for event in self._read_closed(run):
                yield event
            run_id = None
            async for close in run.fetch_history_events(
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
            ):
                attrs = close.workflow_execution_continued_as_new_event_attributes
                run_id = attrs.new_execution_run_id or None

    # ------------------------------------------------------------------ items

    def _event(self, topic: str, data: str, offset: int) -> TaskEvent | None:
        payload = Payload()
        try:
            payload.ParseFromString(base64.b64decode(data))
            item = StreamEvent.model_validate(self.converter.from_payload(payload, dict))
        except (ValueError, ValidationError, TypeError):
            return None  # not an item this version knows: skipped, its offset still counts
        owner, depth = topic_task(self.task_id, topic)
        fields = item.model_dump(exclude_none=True, exclude={"piece"})
        if item.time is not None and item.time.tzinfo is None:
            fields["time"] = item.time.replace(tzinfo=UTC)  # the stream holds UTC
        try:
            return TaskEvent(task_id=owner, offset=offset, depth=depth, **fields)
        except ValidationError:
            return None

    def _events(self, result: PollResult) -> list[TaskEvent]:
        events = []
        for wire in result.items:
            if wire.offset < self.offset:
                continue  # already yielded (a poll that raced a truncation)
            event = self._event(wire.topic, wire.data, wire.offset)
            self.offset = wire.offset + 1
            if event is not None:
                events.append(event)
        self.offset = max(self.offset, result.next_offset)
        return events

    async def _check_retained(
        self, run: WorkflowHandle[Any, Any], closed: bool = False
    ) -> TaskEvent | None:
        """A ``truncated`` event when the stream no longer holds ``offset`` (else None).

        Raises:
            StreamUnreadable: ``closed`` and no worker answered.
        """
        try:
            bounds = await run.query(
                STREAM_BOUNDS_QUERY, result_type=list[int], rpc_timeout=QUERY_TIMEOUT
            )
        except Exception as err:
            if closed:
                raise StreamUnreadable(str(err)) from err
            return None  # no worker answers now: the polls will say it
        if len(bounds) != 2 or self.offset >= bounds[0]:
            return None
        self.offset = bounds[0]
        return TaskEvent(
            kind="truncated",
            task_id=self.task_id,
            offset=bounds[0],
            summary=f"events before offset {bounds[0]} are no longer kept; going on from it",
        )

    # ------------------------------------------------------------------ open run

    async def _follow(self, run: WorkflowHandle[Any, Any]) -> AsyncIterator[TaskEvent]:
        """Long-poll an open run until it closes or goes on as new."""
        while True:
            poll = asyncio.ensure_future(self._poll(run))
            try:
                while True:
                    done, _ = await asyncio.wait({poll}, timeout=SILENCE_CHECK)
                    if done:
                        break
                    held = await self._held(run)
                    if held is not None:
                        yield held
                result = poll.result()
            except WorkflowUpdateFailedError as err:
                kind = getattr(err.cause, "type", None)
                if kind == TRUNCATED:
                    truncated = await self._check_retained(run)
                    if truncated is None:  # cannot tell from where: go on from the base
                        self.offset = 0
                        continue
                    yield truncated
                    continue
                if kind == DRAINING:
                    await asyncio.sleep(POLL_COOLDOWN)
                return
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                return
            except RPCError:
                # The run closed, or its code fails (no Update lands until a fix runs it).
                held = await self._held(run)
                if held is not None:
                    yield held
                await asyncio.sleep(REFUSED_PAUSE)
                return
            finally:
                if not poll.done():
                    poll.cancel()
            for event in self._events(result):
                yield event
            if not result.more_ready and len(result.items) < BACKLOG:
                await asyncio.sleep(POLL_COOLDOWN)

    async def _poll(self, run: WorkflowHandle[Any, Any]) -> PollResult:
        update = await run.start_update(
            POLL,
            PollInput(topics=self.topics, from_offset=self.offset),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=PollResult,
        )
        return await update.result()

    async def _held(self, run: WorkflowHandle[Any, Any]) -> TaskEvent | None:
        """A ``retrying`` event when the silent task is held by failing code (once each)."""
        try:
            desc = await run.describe()
        except RPCError:
            return None
        raw = desc.raw_description
        if not (raw.HasField("pending_workflow_task") and raw.pending_workflow_task.attempt > 1):
            return None  # an activity's retry shows in the stream itself (a restarted turn)
        retrying = await _retrying(self.temporal, desc)
        if retrying is None or retrying == self.retrying:
            return None
        self.retrying = retrying
        return TaskEvent(kind="retrying", task_id=self.task_id, error=retrying)

    # ------------------------------------------------------------------ closed run

    async def _read_closed(self, run: WorkflowHandle[Any, Any]) -> AsyncIterator[TaskEvent]:
        while True:
            try:
                result = await run.query(
                    POLL,
                    PollInput(topics=self.topics, from_offset=self.offset),
                    result_type=PollResult,
                    rpc_timeout=QUERY_TIMEOUT,
                )
            except Exception as err:
                raise StreamUnreadable(str(err)) from err
            for event in self._events(result):
                yield event
            self._end = result.next_offset
            if not result.more_ready:
                return


async def stream_page(
    temporal: Client, task_id: str, *, tree: bool, after: int | None, limit: int
) -> list[TaskEvent]:
    """The events the task's stream holds after ``after`` now, at most ``limit``.

    Consecutive text (or thinking) pieces of one task's turn come as one event, with the
    offset of the last; a ``truncated`` event first when ``after`` is no longer kept.
    A running task whose worker does not answer within ``QUERY_TIMEOUT`` (busy, or its
    first workflow task not done yet) gives what was read: a later page brings the rest.

    Raises:
        TaskNotFound: no task has this id.
        StreamUnreadable: no worker polls the task's queue, or a closed task's stream
            could not be read.
    """
    watcher = _Watcher(temporal, task_id, tree, 0 if after is None else after + 1)
    try:
        desc = await temporal.get_workflow_handle(task_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise TaskNotFound(f"no task {task_id!r}") from None
        raise
    run = temporal.get_workflow_handle(task_id, run_id=desc.run_id)
    if not await workers_poll(temporal, desc.task_queue):
        raise StreamUnreadable(f"no worker polls task queue {desc.task_queue!r}")
    events: list[TaskEvent] = []
    try:
        await _read_page(watcher, run, events, limit)
    except StreamUnreadable:
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise
    return events


async def _read_page(
    watcher: _Watcher, run: WorkflowHandle[Any, Any], events: list[TaskEvent], limit: int
) -> None:
    """Add the stream's events to ``events`` (a turn's pieces as one), at most ``limit``."""
    truncated = await watcher._check_retained(run, closed=True)
    if truncated is not None:
        events.append(truncated)
    async for event in watcher._read_closed(run):
        last = events[-1] if events else None
        if (
            last is not None
            and event.kind in ("text", "thinking")
            and (last.kind, last.task_id, last.turn) == (event.kind, event.task_id, event.turn)
            and event.summary is None
            and last.summary in (None, "restarted")
        ):
            events[-1] = last.model_copy(
                update={"text": (last.text or "") + (event.text or ""), "offset": event.offset}
            )
            continue
        if len(events) >= limit:
            break
        events.append(event)
