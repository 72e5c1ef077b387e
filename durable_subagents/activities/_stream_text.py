"""A model turn's text and thinking, published to the task's stream as the model writes.

Only while someone watches the task's stream, or a stream above it (the workflow says so
in the turn's input, and the tasks' ``watched`` memo once a watcher comes mid-turn): a
turn nobody watches publishes nothing live, and the workflow publishes its text from
the turn's result. Each publish is one signal to the task (Workflow Streams' publish
signal: deduplicated by publisher and sequence, so a retried signal lands once), which
is four history events with the workflow task it wakes. So pieces are batched, never
sent one by one:

- the first publish waits ``GAP`` after the first piece: a turn that answers within it
  (a fast model, a short answer) publishes nothing, and the workflow publishes the
  text from the turn's result instead, at no cost in history;
- then at most one publish per ``GAP`` for the first ``FAST_PUBLISHES``, one per
  ``SLOW_GAP`` after, and none past ``MAX_PUBLISHES`` until the turn ends.

So a turn adds at most ``MAX_PUBLISHES + 1`` signals (4 history events each) and
``STREAM_TEXT_LIMIT`` characters of text and of thinking to its task's history, however
many tokens it streams, and a watcher sees each piece within
``GAP`` plus a round trip while the turn is young. When the turn ends, what is left is
published before the activity returns, so the turn's pieces always reach the stream
before its ``turn`` event. A publish that fails (the task closed) stops the stream; it
never fails the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.converter import decode_typed_search_attributes

from durable_subagents.wire._search_attributes import PARENT
from durable_subagents.wire._stream_items import (
    DIRECT_SIGNAL,
    MAX_DEPTH,
    StreamDirect,
    StreamEvent,
)

__all__ = ["GAP", "MAX_PUBLISHES", "TurnStream"]

WATCHED_MEMO = "watched"
"""The memo key a task's workflow sets while someone watches its stream."""
FIRST_WATCH_CHECK = 0.2
"""Seconds after the first ask whether anyone watches before the second: a watcher who
came as the turn started is seen soon; the gap doubles up to ``WATCH_CHECK``."""
WATCH_CHECK = 1.0
"""Seconds between asking whether anyone watches, while nobody does."""
GAP = 0.08
"""Seconds a piece may wait to be published while the turn is young."""
SLOW_GAP = 1.0
"""Seconds between publishes once a turn made ``FAST_PUBLISHES``."""
FAST_PUBLISHES = 150
MAX_PUBLISHES = 300
"""Publishes one turn attempt makes while it streams (one more when it ends)."""
OWN_GAP_WHILE_DIRECT = 1.0
"""Seconds between a turn's publishes to its own stream while its pieces go to the
parent directly and nobody watches the task itself: the tree's watcher reads them from
the parent's stream, so the task's own (which forwards its copies once a second then)
takes them in batches, and the worker serves one workflow task a publish, not two."""
OWN_FLUSH_TIMEOUT = 5.0
"""Seconds a turn that failed or was cancelled waits to publish what its own stream
lacks (a worker shutting down must not wait long)."""
STREAM_TEXT_LIMIT = 64 * 1024
"""Characters of text (and of thinking) one turn attempt streams: a longer answer's rest
is in the transcript, and the stream says how much was cut."""


class TurnStream:
    """Publishes one model-turn attempt's text and thinking (``on_text``, ``on_thinking``).

    Args:
        turn: The turn's number.
        attempt: The activity's attempt: a retry's first piece says ``restarted``.
        watched: Someone watched the task's stream when the turn was scheduled.
        watch_ids: The tasks whose ``watched`` memo says whether anyone watches now
            (and, above the last, each one's recorded parent, up to ``MAX_DEPTH``):
            until one does, nothing is published live (the workflow publishes the text
            from the turn's result), and they are asked at most every ``WATCH_CHECK``
            (sooner in the turn's first second).
        parent: The parent task whose stream takes this one's (None: none).
        after: The task's stream end when the turn was scheduled.
    """

    def __init__(
        self,
        turn: int,
        attempt: int,
        watched: bool = True,
        watch_ids: list[str] | None = None,
        parent: str | None = None,
        after: int = 0,
    ) -> None:
        self.turn = turn
        self._attempt = attempt
        self._parent = parent
        """The task whose stream takes this one's items: each publish goes there directly
        too, a hop sooner than the task's forward (``StreamDirect``)."""
        self._after = after
        self._live = watched
        self._own_live = watched
        """Someone watches this task's own stream (not only one above it)."""
        self._own_held: list[dict[str, Any]] = []
        """Pieces sent to the parent directly and not yet to the task's own stream."""
        self._own_sent = self._own_checked = time.monotonic()
        """When the last publish to the task's own stream went, and when its memo was
        last read (monotonic)."""
        self._watch_ids = list(watch_ids or [])
        self._checked_at: float | None = None
        self._check_gap = FIRST_WATCH_CHECK
        self.memo_reads = 0
        """Tasks' ``watched`` memos read so far (what a turn nobody watches pays)."""
        self._restart = {"thinking": attempt > 1, "text": attempt > 1}
        """Whether the next piece of each starts it over (a retry's first piece)."""
        self._pending: dict[str, list[str]] = {"thinking": [], "text": []}
        self._since: float | None = None
        """When the oldest piece not yet published arrived (monotonic)."""
        self._first_at: datetime | None = None
        self._last_publish: float | None = None
        self.publishes = 0
        self.text_published = 0
        """Characters of the text published so far."""
        self._taken = {"thinking": 0, "text": 0}
        self._cut = {"thinking": 0, "text": 0}
        """Characters of each past ``STREAM_TEXT_LIMIT``, left out of the stream."""
        self._wake = asyncio.Event()
        self._client: WorkflowStreamClient | None = None
        self._broken = False
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def add_text(self, delta: str) -> None:
        self._add("text", delta)

    def add_thinking(self, delta: str) -> None:
        self._add("thinking", delta)

    def _add(self, kind: str, delta: str) -> None:
        if not delta or self._broken:
            return
        room = STREAM_TEXT_LIMIT - self._taken[kind]
        if len(delta) > room:
            self._cut[kind] += len(delta) - max(room, 0)
            delta = delta[: max(room, 0)]
            if not delta:
                return
        self._taken[kind] += len(delta)
        self._pending[kind].append(delta)
        if self._since is None:
            self._since = time.monotonic()
            self._first_at = datetime.now(UTC).replace(tzinfo=None)
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        self._wake.set()

    async def _watched(self) -> bool:
        """Whether a watcher came (asked of the memos).

        At once, then after a gap that starts at ``FIRST_WATCH_CHECK`` and doubles up to
        ``WATCH_CHECK``. The first time, the task's own memo is left out: its workflow
        looked at its own stream when it scheduled the turn (``watched``).
        """
        now = time.monotonic()
        first = self._checked_at is None
        if self._checked_at is not None:
            if now - self._checked_at < self._check_gap:
                return False
            self._check_gap = min(self._check_gap * 2, WATCH_CHECK)
        self._checked_at = now
        client = activity.client()
        own = activity.info().workflow_id
        ids = self._watch_ids
        for task_id in ids:
            if first and task_id == own:
                continue
            self.memo_reads += 1
            try:
                watched, parent = await _memo_and_parent(client, task_id)
            except Exception:  # a task gone or unreadable: nobody there to show it to
                continue
            if watched:
                self._live = True
                self._own_live = self._own_live or task_id == own
                return True
            # A task registered under a registered task knows only its parent: the
            # streams above come from each one's recorded parent.
            if parent and parent not in ids and len(ids) <= MAX_DEPTH:
                ids.append(parent)
        return False

    def _gap(self) -> float | None:
        if self.publishes >= MAX_PUBLISHES:
            return None
        return GAP if self.publishes < FAST_PUBLISHES else SLOW_GAP

    async def _run(self) -> None:
        while True:
            await self._next()
            self._wake.clear()
            gap = self._gap()
            if gap is None or self._since is None:
                continue
            if not self._live and not await self._watched():
                continue
            last = self._last_publish
            due = self._since + gap if last is None else max(self._since, last + gap)
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await self._publish()

    async def _next(self) -> None:
        """Until a piece comes; held pieces go to the task's own stream when due."""
        while self._own_held:
            left = self._own_sent + OWN_GAP_WHILE_DIRECT - time.monotonic()
            if left > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                    return
                except TimeoutError:
                    pass
            async with self._lock:
                await self._send_own()
        await self._wake.wait()

    def _cut_event(self, kind: str) -> dict[str, Any]:
        cut = self._cut[kind]
        summary = f"cut: {cut} more characters are in the transcript"
        return StreamEvent(kind=kind, turn=self.turn, text="", summary=summary).item()

    async def _publish(self, *, thinking_only: bool = False, final: bool = False) -> None:
        async with self._lock:
            kinds = ("thinking",) if thinking_only else ("thinking", "text")
            events = []
            for kind in kinds:
                pieces = self._pending[kind]
                if not pieces:
                    continue
                text = "".join(pieces)
                pieces.clear()
                events.append(
                    StreamEvent(
                        kind=kind,
                        time=self._first_at,
                        turn=self.turn,
                        text=text,
                        summary="restarted" if self._restart[kind] else None,
                        piece=f"{self.turn}.{self._attempt}.{self.publishes}.{kind}",
                    ).item()
                )
                self._restart[kind] = False
                if kind == "text":
                    self.text_published += len(text)
            if final:
                for kind in kinds:
                    if self._cut[kind]:
                        events.append(self._cut_event(kind))
            if not any(self._pending.values()):
                self._since = None
            if not events or self._broken:
                return
            self._last_publish = time.monotonic()
            self.publishes += 1
            await self._send(events)

    async def _send(self, events: list[dict[str, Any]]) -> None:
        """The events to the parent's stream at once, and to the task's own.

        To its own at once too, unless spaced (``OWN_GAP_WHILE_DIRECT``): then they go
        with a later publish, or when due.
        """
        self._own_held.extend(events)
        await asyncio.gather(self._send_parent(events), self._to_own())

    async def _to_own(self) -> None:
        if not await self._own_spaced():
            await self._send_own()

    async def _own_spaced(self) -> bool:
        """Whether this publish may wait to reach the task's own stream.

        While the pieces go to the parent directly and nobody watches the task itself
        (asked of its memo at most every ``WATCH_CHECK``).
        """
        now = time.monotonic()
        if self._parent is None or self._own_live or now - self._own_sent >= OWN_GAP_WHILE_DIRECT:
            return False
        if now - self._own_checked >= WATCH_CHECK:
            self._own_checked = now
            self.memo_reads += 1
            with contextlib.suppress(Exception):
                own = activity.info().workflow_id or ""
                self._own_live, _ = await _memo_and_parent(activity.client(), own)
        return not self._own_live

    async def _send_own(self) -> None:
        """The pieces held for the task's own stream, in one publish."""
        events, self._own_held = self._own_held, []
        self._own_sent = time.monotonic()
        if not events or self._broken:
            return
        try:
            if self._client is None:
                self._client = WorkflowStreamClient.from_within_activity()
            topic = self._client.topic("")
            for event in events:
                topic.publish(event)
            await self._client.flush()
        except Exception as err:  # the stream is for watchers: it never fails the turn
            self._broken = True
            activity.logger.info("turn %d: live text not published: %s", self.turn, err)

    async def _send_parent(self, events: list[dict[str, Any]]) -> None:
        """The pieces to the parent's stream, straight (its forwarded copy is dropped)."""
        pieces = [e for e in events if e.get("piece")]
        if self._parent is None or not pieces:
            return
        batch = StreamDirect(task_id=activity.info().workflow_id, after=self._after, events=pieces)
        try:
            await activity.client().get_workflow_handle(self._parent).signal(DIRECT_SIGNAL, batch)
        except Exception as err:  # the forward brings them all the same
            self._parent = None
            activity.logger.info("turn %d: live text not sent to the parent: %s", self.turn, err)

    @property
    def text_restarts(self) -> bool:
        """Whether the text the workflow publishes from the result starts the turn over."""
        return self._restart["text"]

    async def finish(self, *, whole: bool) -> int:
        """The turn ended: publish what is left; the characters of text published.

        Args:
            whole: Publish all of the text now (the result will not carry it inline).
                Otherwise, when nothing was published yet, the text is left for the
                workflow to publish from the turn's result (only thinking goes now).
        """
        await self._halt()
        await self._publish(thinking_only=not whole and self.publishes == 0, final=True)
        await self._send_own()
        return self.text_published

    async def stop(self) -> None:
        """Stop publishing (the turn failed or was cancelled: what is left is void).

        A publish on its way is finished first: its pieces have left the pending ones
        and count as published, so a cancel in the middle of it would lose them. What
        the parent has and the task's own stream does not yet (``OWN_GAP_WHILE_DIRECT``)
        goes there too, within ``OWN_FLUSH_TIMEOUT``.
        """
        await self._halt()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._send_own(), OWN_FLUSH_TIMEOUT)

    async def _halt(self) -> None:
        if self._task is not None:
            async with self._lock:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


async def _memo_and_parent(client: Client, task_id: str) -> tuple[bool, str | None]:
    """A task's ``watched`` memo and recorded parent, from one describe.

    The service's answer read for these two fields only: the SDK's ``describe`` builds
    the whole description, about half again as much CPU for a read a turn nobody
    watches makes every second.
    """
    response = await client.workflow_service.describe_workflow_execution(
        DescribeWorkflowExecutionRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=task_id)
        )
    )
    info = response.workflow_execution_info
    payload = info.memo.fields.get(WATCHED_MEMO)
    watched = False
    if payload is not None:
        [value] = await client.data_converter.decode([payload])
        watched = bool(value)
    parent = decode_typed_search_attributes(info.search_attributes).get(PARENT)
    return watched, parent
