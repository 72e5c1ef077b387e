"""A task's event stream in the workflow: what it publishes, keeps, forwards and carries.

The log is a Workflow Stream (``temporalio.contrib.workflow_streams``): its poll Update
and Query serve watchers, its publish signal takes the model turn's text. This module
adds what a task needs on top (see ``_stream_items``):

- the workflow's own events (``publish``), which cost no history event: a replay
  publishes them again;
- a child's items (``take_forward``), kept under its topic, each once, in order;
- forwarding this stream's items to the parent task (``forwarding``), when there is
  one, so the parent's stream holds the subtree's events;
- a bound on what stays in memory (``trim``) and what a continue-as-new carries.

Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.contrib.workflow_streams import (
    PollInput,
    PollResult,
    PublisherState,
    WorkflowStream,
    WorkflowStreamItem,
)
from temporalio.exceptions import ActivityError, CancelledError, FailureError, TimeoutError
from temporalio.workflow import ExternalWorkflowHandle

from durable_subagents.workflows._stream_direct import DirectPieces, may_be_piece

with workflow.unsafe.imports_passed_through():
    from durable_subagents.policy import arguments_preview
    from durable_subagents.spawn import model_label
    from durable_subagents.spawn._options import TASK_ID
    from durable_subagents.types import PendingApproval, TaskStatus, ToolCall
    from durable_subagents.wire._payloads import ModelTurnResult, ToolCallResult
    from durable_subagents.wire._stream_items import (
        CARRY_BYTES,
        FORWARD_SIGNAL,
        MAX_DEPTH,
        MAX_FORWARD_BYTES,
        RETAIN_BYTES,
        RETAIN_ITEMS,
        STREAM_BOUNDS_QUERY,
        ForwardedItem,
        StreamCarry,
        StreamDirect,
        StreamEvent,
        StreamForward,
        child_topic,
    )

FORWARD_PATCH = "stream-forward-to-parent"
"""Runs recorded before a child forwarded its stream send no forward signal on replay."""

RECENT_POLLS = 32
"""Polls a stream remembers the offsets of (to keep what a slow watcher has not read)."""
READER_BYTES = 1024 * 1024
"""Bytes of items a stream keeps, and carries across continue-as-new, for a watcher
that is behind (polled within ``WATCH_GRACE``); past them it is told ``truncated``."""
WATCH_GRACE = timedelta(seconds=10)
"""A stream polled this recently counts as watched (a watcher polls again at once)."""
WATCHED_MEMO = "watched"
"""Memo key: someone watches this task's stream (its and its children's turns read it)."""
UNWATCHED_PATCH = "stream-memo-clears-when-unwatched"
"""Runs recorded before it cleared the ``watched`` memo only when a turn was scheduled."""

PUBLISHER_TTL = timedelta(minutes=15)
"""How long a model turn's publisher is remembered (its retried signal is dropped)."""

MAX_FORWARDS_IN_FLIGHT = 2
"""Forward signals one stream has on their way to its parent at once: more than one
hides a round trip, and what comes meanwhile goes in the next. With 8, a busy
machine's backlog of forward signals (each a workflow task in the child and in the
parent) grew through a turn: a tree's watcher saw a child's text 0.4 to 2 s late at
p95, against 0.1 to 0.4 s with 2 (``bench/bench_stream.py``)."""
FORWARDS_IN_FLIGHT_BEFORE = 8
"""What runs recorded before ``FEWER_FORWARDS_PATCH`` sent at once (their replay)."""
FEWER_FORWARDS_PATCH = "stream-forwards-two-in-flight"
FORWARD_GAP_WHILE_DIRECT = timedelta(seconds=1)
"""While a turn sends its pieces to the parent directly, its forward (which brings the
parent copies it drops) goes at most this often: the parent's workflow tasks serve the
pieces, not their copies."""
THROTTLE_PATCH = "stream-forwards-spaced-while-direct"
COPIES_ONLY_PATCH = "stream-forwards-spaced-only-for-copies"
"""Runs recorded before it spaced a direct turn's forwards whatever they held; now an
item that is no live piece of the task's own (a status, a decision, a subagent's item)
goes at once, with the copies before it."""
MAX_EARLY_BATCHES = 16
"""A child's batches a stream keeps while one sent before them has not come."""

MAX_FORWARDING_CHILDREN = 512
"""Children whose items one stream takes (a signal anyone may send must stay bounded)."""


def ended(err: FailureError) -> str:
    """How an activity that did not complete ended, as ``watch`` says it."""
    cause = err.cause if isinstance(err, ActivityError) else err
    if isinstance(cause, CancelledError):
        return "cancelled"
    if isinstance(cause, TimeoutError):
        return "timed out"
    message = cause.message if isinstance(cause, FailureError) else err.message
    return f"failed: {message}" if message else "failed"


def _encode(payload: Payload) -> str:
    return base64.b64encode(payload.SerializeToString()).decode("ascii")


def _decode(data: str) -> Payload:
    payload = Payload()
    payload.ParseFromString(base64.b64decode(data))
    return payload


class _Log(WorkflowStream):
    """The Workflow Stream, with the reads this module needs of its log.

    ``WorkflowStream`` keeps its log as ``_log`` from ``_base_offset``; these reads are
    the only place that knows it (a temporalio upgrade that changes it fails the
    stream's tests, not a task). Its poll Update also counts who is watching.
    """

    polls = 0
    """Poll Updates waiting now."""
    last_poll: datetime | None = None
    """When a poll last came or returned."""
    on_poll: Callable[[], None] | None = None
    recent: tuple[tuple[datetime, int], ...] = ()
    """The latest polls' times and offsets: where watchers are."""

    async def _on_poll(self, payload: PollInput) -> PollResult:
        self.polls += 1
        self.last_poll = workflow.now()
        self.recent = (*self.recent[-(RECENT_POLLS - 1) :], (self.last_poll, payload.from_offset))
        if self.on_poll is not None:
            self.on_poll()
        try:
            result = await super()._on_poll(payload)
        finally:
            self.polls -= 1  # no workflow call here: an eviction unwinds through it
        self.last_poll = workflow.now()
        return result

    @property
    def base(self) -> int:
        return self._base_offset

    @property
    def end(self) -> int:
        return self._base_offset + len(self._log)

    def items(self, start: int) -> list[WorkflowStreamItem[Payload]]:
        return self._log[max(0, start - self._base_offset) :]

    def sequences(self) -> dict[str, int]:
        return {pid: state.sequence for pid, state in self._publishers.items()}

    def forget_publishers(self, idle: timedelta) -> None:
        """Drop the dedup state of publishers idle for ``idle`` (each turn is one)."""
        now = workflow.now()
        for pid in [p for p, s in self._publishers.items() if now - s.last_seen >= idle]:
            del self._publishers[pid]

    def restore_sequences(self, sequences: dict[str, int]) -> None:
        now = workflow.now()
        for pid, sequence in sequences.items():
            self._publishers[pid] = PublisherState(sequence=sequence, last_seen=now)


class TaskStream:
    """One task's stream (construct it in the workflow's ``__init__``).

    Args:
        carry: What the run before handed over (None: a new task).
    """

    def __init__(self, carry: StreamCarry | None) -> None:
        self.log = _Log(None)
        self.forwarded: dict[str, int] = {}
        self.cursor = 0
        self._closing = False
        self._forwarder: asyncio.Task[None] | None = None
        self._parent_gone = False
        self._early: dict[str, dict[int, StreamForward]] = {}
        """A child's batches that came before the one they follow, by where that ended."""
        self._memo_watched: bool | None = None
        """What the memo says of watchers (None: not read yet)."""
        self._unwatched: asyncio.Task[None] | None = None
        """Clears the memo once nobody has polled for ``WATCH_GRACE``."""
        self.direct_from: int | None = None
        """While a turn that sends its pieces to the parent directly runs: where it began."""
        self._direct = DirectPieces(self.log)
        """Children's live pieces that came straight from their turns."""
        self.log.on_poll = self._polled
        if carry is not None:
            self.log._base_offset = carry.base
            for item in carry.items:
                self.log._publish_to_topic(item.topic, _decode(item.data))
            self.log.restore_sequences(carry.publishers)
            self.forwarded = dict(carry.forwarded)
            for batch in carry.early:
                self._early.setdefault(batch.task_id, {})[batch.after or 0] = batch
            self.cursor = carry.cursor
        workflow.set_query_handler(STREAM_BOUNDS_QUERY, self.bounds)

    def _polled(self) -> None:
        if not self._memo_says():
            self._set_memo(True)
        if self._unwatched is None and workflow.patched(UNWATCHED_PATCH):
            self._unwatched = asyncio.create_task(self._clear_when_unwatched())

    async def _clear_when_unwatched(self) -> None:
        """Clear the memo ``WATCH_GRACE`` after the last watcher's last poll.

        So a task that runs no turn for long (it waits for its subagents, or for a
        decision) does not keep its and its subagents' turns publishing live for nobody.
        One timer a ``WATCH_GRACE`` while watched, started only between polls.
        """
        while self._memo_says() and not self._closing:
            await workflow.wait_condition(lambda: self.log.polls == 0 or self._closing)
            last = self.log.last_poll
            if self._closing or last is None:
                break
            left = WATCH_GRACE - (workflow.now() - last)
            if left > timedelta(0):
                await workflow.sleep(left, summary="nobody watches?")
            self.watched()  # clears the memo when nobody polled within the grace
        self._unwatched = None

    def _memo_says(self) -> bool:
        if self._memo_watched is None:
            self._memo_watched = bool(workflow.memo_value(WATCHED_MEMO, False))
        return self._memo_watched

    def _set_memo(self, watched: bool) -> None:
        self._memo_watched = watched
        workflow.upsert_memo({WATCHED_MEMO: watched})

    def watched(self) -> bool:
        """Whether someone watches the stream now (the memo says so while it lasts)."""
        last = self.log.last_poll
        watched = self.log.polls > 0 or (last is not None and workflow.now() - last < WATCH_GRACE)
        if not watched and self._memo_says():
            self._set_memo(False)
        return watched

    def slowest_reader(self) -> int | None:
        """The lowest offset a watcher asked for within ``WATCH_GRACE`` (None: nobody)."""
        now = workflow.now()
        wanted = [offset for at, offset in self.log.recent if now - at < WATCH_GRACE]
        return min(wanted) if wanted else None

    def bounds(self) -> list[int]:
        """The offsets retained: ``[first, end)``."""
        return [self.log.base, self.log.end]

    # ------------------------------------------------------------------ publishing

    def publish(self, kind: str, **fields: Any) -> None:
        """Append one of the task's own events (stamped with the workflow's time)."""
        event = StreamEvent(kind=kind, time=workflow.now().astimezone(UTC).replace(tzinfo=None))
        event = event.model_copy(update=fields)
        self.log.topic("").publish(event.item())

    def _takes_from(self, child: object) -> bool:
        """Whether this stream takes items of ``child`` (a signal anyone may send)."""
        if not isinstance(child, str) or not TASK_ID.fullmatch(child):
            workflow.logger.warning("stream items dropped: %.80r is no task id", child)
            return False
        if child not in self.forwarded and len(self.forwarded) >= MAX_FORWARDING_CHILDREN:
            workflow.logger.warning("stream items of %s dropped: too many children", child)
            return False
        return True

    def take_forward(self, batch: StreamForward) -> None:
        """Keep a child's new items under its topic; a repeat or a bad batch is dropped."""
        child = batch.task_id
        if not self._takes_from(child):
            return
        expected = self.forwarded.get(child, 0)
        if batch.after is not None and batch.after > expected:
            waiting = self._early.setdefault(child, {})
            if len(waiting) < MAX_EARLY_BATCHES:
                waiting[batch.after] = batch  # an earlier batch is still on its way
                return
            # it never came: go on without it, in order
            workflow.logger.warning("stream items of %s lost before offset %d", child, batch.after)
            for after in sorted(waiting):
                self._apply(child, waiting.pop(after))
        self._apply(child, batch)
        early = self._early.get(child)
        while early:
            following = early.pop(self.forwarded[child], None)
            if following is None:
                break
            self._apply(child, following)

    def _apply(self, child: str, batch: StreamForward) -> None:
        expected = self.forwarded.get(child, 0)
        for item in batch.items:
            if item.offset < expected or item.topic.count("/") >= MAX_DEPTH:
                continue
            try:
                payload = _decode(item.data)
            except ValueError:
                continue
            expected = item.offset + 1
            if not item.topic and not self._direct.first_copy(child, payload):
                continue  # its turn sent it here directly, and it is here
            self.log._publish_to_topic(child_topic(child, item.topic), payload)
        self.forwarded[child] = expected
        self._direct.release(child, expected)

    def take_direct(self, batch: StreamDirect) -> None:
        """Keep a child's live pieces, sent by its turn (see ``DirectPieces``)."""
        if self._takes_from(batch.task_id):
            self._direct.take(batch, self.forwarded.get(batch.task_id, 0))

    # ------------------------------------------------------------------ forwarding

    def forward_to(self, parent_id: str) -> None:
        """Send this stream's items to the parent's, in the background, until ``settle``."""
        if self._forwarder is None and workflow.patched(FORWARD_PATCH):
            self._forwarder = asyncio.create_task(self._forward(parent_id))

    async def _forward(self, parent_id: str) -> None:
        """Send new items as they come, not waiting for the batch before to land.

        At most ``MAX_FORWARDS_IN_FLIGHT`` are on their way; each says where the one
        before it ended, so the parent applies them in order whatever order they land in.
        """
        parent = workflow.get_external_workflow_handle(parent_id)
        task_id = workflow.info().workflow_id
        sending: list[asyncio.Task[None]] = []
        in_flight = (
            MAX_FORWARDS_IN_FLIGHT
            if workflow.patched(FEWER_FORWARDS_PATCH)
            else FORWARDS_IN_FLIGHT_BEFORE
        )

        spaced = workflow.patched(THROTTLE_PATCH)
        copies_only = spaced and workflow.patched(COPIES_ONLY_PATCH)
        last_sent: datetime | None = None

        def urgent() -> bool:
            """Whether an item waiting to go is more than a copy the parent has."""
            return copies_only and not self._only_own_pieces(self.cursor)

        def ready() -> bool:
            sending[:] = [s for s in sending if not s.done()]
            if self._parent_gone or self._closing:
                return True
            return self.log.end > self.cursor and len(sending) < in_flight

        def held_back() -> timedelta | None:
            """How long the next forward waits: a direct turn's copies go once a second."""
            if not spaced or self.direct_from is None or last_sent is None or self._closing:
                return None
            if self.cursor < self.direct_from or urgent():
                return None  # what came before the turn (the parent waits for it), or news
            left = FORWARD_GAP_WHILE_DIRECT - (workflow.now() - last_sent)
            return left if left > timedelta(0) else None

        while True:
            await workflow.wait_condition(ready)
            if self._parent_gone or self.log.end <= self.cursor:
                if self._parent_gone or self._closing:
                    break
                continue
            hold = held_back()
            if hold is not None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await workflow.wait_condition(
                        lambda: (
                            self.direct_from is None
                            or self._closing
                            or self._parent_gone
                            or urgent()
                        ),
                        timeout=hold,
                        timeout_summary="forward the stream",
                    )
                continue
            start = max(self.cursor, self.log.base)
            items: list[ForwardedItem] = []
            size = 0
            for offset, item in enumerate(self.log.items(start), start):
                data = _encode(item.data)
                if items and size + len(data) > MAX_FORWARD_BYTES:
                    break
                items.append(ForwardedItem(offset=offset, topic=item.topic, data=data))
                size += len(data)
            batch = StreamForward(task_id=task_id, items=items, after=self.cursor)
            self.cursor = items[-1].offset + 1
            last_sent = workflow.now()
            sending.append(asyncio.create_task(self._send(parent, batch)))
        if sending:
            await asyncio.gather(*sending)
        if self._parent_gone:
            self.cursor = self.log.end

    def _only_own_pieces(self, start: int) -> bool:
        """Whether the items from ``start`` are all live pieces of this task's own turn."""
        return all(not item.topic and may_be_piece(item.data) for item in self.log.items(start))

    async def _send(self, parent: ExternalWorkflowHandle[Any], batch: StreamForward) -> None:
        try:
            await parent.signal(FORWARD_SIGNAL, batch)
        except FailureError as err:
            # The parent closed: its stream takes nothing more (this one still has it).
            if not self._parent_gone:
                workflow.logger.info("stream not forwarded to %s: %s", parent.id, err)
            self._parent_gone = True

    async def settle(self) -> None:
        """Forward what is left, stop forwarding, and release the watchers' polls.

        Called before the run closes or continues as new.
        """
        self._closing = True
        forwarder = self._forwarder
        if forwarder is not None:
            # Waited for, never awaited: a cancel of the run must not reach the forward
            # signals on their way (a signal cancelled as it fails breaks the replay).
            try:
                await workflow.wait_condition(forwarder.done)
            except asyncio.CancelledError:
                await workflow.wait_condition(forwarder.done)
                raise
            self._forwarder = None
        self.log.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    # ------------------------------------------------------------------ bounds

    def trim(self) -> None:
        """Truncate the oldest items beyond ``RETAIN_BYTES`` or ``RETAIN_ITEMS``.

        Never an item not yet forwarded to the parent while the forwarder runs.
        """
        items = self.log.items(self.log.base)
        keep_from = max(0, len(items) - RETAIN_ITEMS)
        size = 0
        for index in range(len(items) - 1, keep_from - 1, -1):
            size += items[index].data.ByteSize()
            if size > RETAIN_BYTES:
                keep_from = index + 1
                break
        self.log.forget_publishers(PUBLISHER_TTL)
        cut = self.log.base + keep_from
        reader = self.slowest_reader()
        if reader is not None and reader < cut:
            cut = max(reader, self._from_end(READER_BYTES))
        if self._forwarder is not None and not self._forwarder.done():
            cut = min(cut, self.cursor)
        if cut > self.log.base:
            self.log.truncate(cut)

    def _from_end(self, budget: int) -> int:
        """The lowest offset whose items up to the end fit in ``budget`` bytes."""
        items = self.log.items(self.log.base)
        size = 0
        for index in range(len(items) - 1, -1, -1):
            size += items[index].data.ByteSize()
            if size > budget:
                return self.log.base + index + 1
        return self.log.base

    def carry(self) -> StreamCarry:
        """What the next run takes over: the latest items, and the stream's state.

        The latest ``CARRY_BYTES`` of items, or up to ``READER_BYTES`` from where a
        watcher that is behind asked last.
        """
        items = self.log.items(self.log.base)
        kept: list[ForwardedItem] = []
        size = 0
        reader = self.slowest_reader()
        budget = CARRY_BYTES
        if reader is not None and reader < self._from_end(CARRY_BYTES):
            budget = READER_BYTES
        for offset in range(self.log.end - 1, self.log.base - 1, -1):
            data = _encode(items[offset - self.log.base].data)
            if size + len(data) > budget or (
                budget == READER_BYTES and reader is not None and offset < reader
            ):
                break
            size += len(data)
            kept.append(
                ForwardedItem(offset=offset, topic=items[offset - self.log.base].topic, data=data)
            )
        kept.reverse()
        return StreamCarry(
            base=kept[0].offset if kept else self.log.end,
            items=kept,
            publishers=self.log.sequences(),
            forwarded=self.forwarded,
            early=[b for waiting in self._early.values() for b in waiting.values()],
            cursor=max(self.cursor, kept[0].offset if kept else self.log.end),
        )


class TaskEvents:
    """The task's own events, as the workflow sees them happen (see ``TaskEvent``).

    Args:
        stream: Where they go.
    """

    def __init__(self, stream: TaskStream) -> None:
        self._stream = stream
        self._status: tuple[TaskStatus, str | None] | None = None

    def status(
        self, status: TaskStatus, pause_id: str | None, pending: list[PendingApproval]
    ) -> None:
        """A status, when it (or the pause) changed; a pause names the calls it waits for."""
        if self._status == (status, pause_id):
            return
        self._status = (status, pause_id)
        summary = None
        if status == TaskStatus.PAUSED and pause_id is not None:
            calls = ", ".join(p.arguments_preview[:120] for p in pending[:5])
            more = f" and {len(pending) - 5} more" if len(pending) > 5 else ""
            summary = f"pause {pause_id}: {calls}{more}"
        self._stream.publish("status", status=status, summary=summary)

    def turn(self, number: int, turn: ModelTurnResult) -> None:
        """A recorded turn: the rest of its text not streamed yet, the turn, its reads."""
        streamed = turn.stream_from or 0
        if turn.text_ref is None and len(turn.text) > streamed:
            restarted = turn.stream_restarted and streamed == 0
            self._stream.publish(
                "text",
                turn=number,
                text=turn.text[streamed:],
                summary="restarted" if restarted else None,
            )
        summary = f"turn {number} · {model_label(turn.model)}" if turn.model else f"turn {number}"
        self._stream.publish("turn", turn=number, summary=summary, usage=turn.usage)
        for call in turn.tool_calls:
            ran = turn.read_results.get(call.id)
            if ran is not None:
                self.tool_started(call)
                self.tool_finished(call, ran)

    def turn_failed(self, number: int, error: str) -> None:
        self._stream.publish("turn", turn=number, summary=f"turn {number}", error=error)

    def tool_started(self, call: ToolCall) -> None:
        summary = arguments_preview(call.name, call.arguments)
        self._stream.publish("tool_started", tool=call.name, summary=summary)

    def tool_finished(
        self, call: ToolCall, result: ToolCallResult | None, error: str | None = None
    ) -> None:
        """A call ended: its result's first ``RESULT_PREVIEW`` characters, or why it failed."""
        summary = arguments_preview(call.name, call.arguments)
        preview = None
        if result is not None:
            preview = " ".join(result.content[: RESULT_PREVIEW * 2].split())[:RESULT_PREVIEW]
            if result.is_error and error is None:
                error = preview or "error"
        self._stream.publish(
            "tool_finished", tool=call.name, summary=summary, result=preview, error=error
        )

    def event(self, kind: str, summary: str) -> None:
        """An input, a decision, an ignored decision or a compaction, in a line."""
        self._stream.publish(kind, summary=summary)

    def closed(self, status: TaskStatus, error: str | None = None) -> None:
        self._stream.publish("closed", status=status, error=error)


RESULT_PREVIEW = 200
"""Characters of a tool call's result its ``tool_finished`` event shows."""
