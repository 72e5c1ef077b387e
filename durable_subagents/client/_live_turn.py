"""A watcher's live text: the open model turn's text and thinking, read from its heartbeats.

``history_events`` tells ``LiveTurn`` when a turn opens and ends; between the two it
polls the task's pending model-turn activity (``_live_text`` says what its heartbeats carry)
and turns what is new into ``thinking`` and ``text`` events. When the turn ends, its
recorded result completes the text, and the transcript (when the blob store is
readable here) completes the thinking, so the deltas a watcher sees add up to the
turn's exact text and thinking, even when the turn was too quick for any heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from durable_subagents.context._live_text import LiveSnapshot, parse_live, parse_live_thinking
from durable_subagents.types import Message, TaskEvent
from durable_subagents.wire._payloads import MODEL_TURN_ACTIVITY

__all__ = ["LIVE_POLL", "RESTARTED", "LiveTurn", "TextResolver", "ticking"]

LIVE_POLL = 0.5
"""Seconds between looks at an open turn's text (its heartbeats come once a second)."""

RESTARTED = "restarted"
"""A ``text`` event's summary when the turn's text starts over (the call was retried)."""

T = TypeVar("T")

TextResolver = Callable[[str], Awaitable[str | None]]
"""Reads a blob of the task (a long turn text the result holds by reference, a
transcript node) as text (None: not readable here)."""

_Kind = Literal["text", "thinking"]


class _Shown:
    """What was yielded of one of the open turn's streams (its text, or its thinking)."""

    def __init__(self, kind: _Kind) -> None:
        self.kind = kind
        self.reset()

    def reset(self) -> None:
        self.attempt = 0
        self.tail = ""
        self.tail_start = 0
        """The text (this attempt) yielded, from ``tail_start`` (0 unless a gap was
        skipped); it ends at ``end``."""

    @property
    def end(self) -> int:
        """Characters of the stream (this attempt) that were yielded."""
        return self.tail_start + len(self.tail)

    def new(self, snapshot: LiveSnapshot) -> tuple[str, bool] | None:
        """What a heartbeat adds, and whether it starts over; None if nothing."""
        restarted = False
        if snapshot.attempt != self.attempt:
            restarted = self.end > 0
            self.attempt, self.tail, self.tail_start = snapshot.attempt, "", 0
        if snapshot.end <= self.end:
            return None
        if snapshot.start > self.end:  # more arrived than a heartbeat carries
            self.tail, self.tail_start = snapshot.text, snapshot.start
            return "…" + snapshot.text, restarted
        new = snapshot.text[self.end - snapshot.start :]
        self.tail += new
        return new, restarted

    def rest(self, text: str) -> tuple[str, bool] | None:
        """The recorded whole's part not yet yielded (or all of it, starting over)."""
        end = self.end
        if end == 0:
            return (text, False) if text else None
        if text[self.tail_start : end] == self.tail and len(text) >= end:
            rest = text[end:]
            return (rest, False) if rest else None
        return text, True  # what was recorded is not what streamed


class LiveTurn:
    """The text and thinking shown so far of one task's open model turn."""

    def __init__(self, client: Client, task_id: str, resolve: TextResolver | None = None) -> None:
        self._client = client
        self._task_id = task_id
        self._resolve = resolve
        self.run_id: str | None = None
        self.open: int | None = None
        """The scheduled event id of the open turn, or None."""
        self.turn: int | None = None
        self._text = _Shown("text")
        self._thinking = _Shown("thinking")

    def start(self, scheduled_id: int, turn: int | None) -> None:
        """A model turn was scheduled."""
        self.open, self.turn = scheduled_id, turn
        self._text.reset()
        self._thinking.reset()

    async def poll(self) -> list[TaskEvent]:
        """New thinking and text of the open turn since the last look (none if unknown)."""
        if self.open is None:
            return []
        details = await self._details()
        events = []
        for shown, parse in ((self._thinking, parse_live_thinking), (self._text, parse_live)):
            snapshot = parse(details)
            if snapshot is None or (self.turn is not None and snapshot.turn != self.turn):
                continue
            new = shown.new(snapshot)
            if new is not None:
                events.append(self._event(shown.kind, *new))
        return events

    async def finish(
        self, result: dict[str, Any] | None, time: datetime | None = None
    ) -> list[TaskEvent]:
        """The turn ended: the rest of its thinking and text (None: it failed).

        Args:
            result: The turn's recorded result.
            time: When the turn ended, as its history records it: the time of the rest,
                so a finished task's replayed thinking and text keep their place among
                its events.
        """
        self.open = None
        if result is None:
            return []
        events = []
        thinking = await self._recorded_thinking(result)
        if thinking:
            rest = self._thinking.rest(thinking)
            if rest is not None:
                events.append(self._event("thinking", *rest, time))
        text = result.get("text")
        ref = result.get("text_ref")
        if isinstance(ref, str) and ref:
            text = await self._resolve(ref) if self._resolve is not None else None
        if isinstance(text, str) and text:
            rest = self._text.rest(text)
            if rest is not None:
                events.append(self._event("text", *rest, time))
        return events

    async def _recorded_thinking(self, result: dict[str, Any]) -> str | None:
        """The answer's thinking, from the transcript node the turn appended."""
        head = result.get("head")
        if not result.get("thinking") or not isinstance(head, str) or self._resolve is None:
            return None
        try:
            node = json.loads(await self._resolve(head) or "null")
            answer = Message.model_validate(node["messages"][-1])
        except Exception:  # a watcher shows less rather than stopping
            return None
        return answer.thinking

    def _event(
        self, kind: _Kind, text: str, restarted: bool, time: datetime | None = None
    ) -> TaskEvent:
        return TaskEvent(
            kind=kind,
            task_id=self._task_id,
            # live text is stamped as it is seen, in UTC as the history's times
            time=time or datetime.now(UTC),
            turn=self.turn,
            text=text,
            summary=RESTARTED if restarted else None,
        )

    async def _details(self) -> Any:
        """The open turn's latest heartbeat details, decoded (None if there are none)."""
        handle = self._client.get_workflow_handle(self._task_id, run_id=self.run_id)
        try:
            desc = await handle.describe()
        except Exception:  # a watcher shows less rather than stopping
            return None
        for pending in desc.raw_description.pending_activities:
            if pending.activity_type.name != MODEL_TURN_ACTIVITY:
                continue
            payloads: list[Payload] = list(pending.heartbeat_details.payloads)
            if not payloads:
                return None
            try:
                values = await self._client.data_converter.decode(payloads[:1])
            except Exception:
                return None
            return values[0] if values else None
        return None


async def ticking(
    source: AsyncIterator[T], every: float, when: Callable[[], bool]
) -> AsyncIterator[T | None]:
    """``source``'s items, with a ``None`` each ``every`` seconds it is quiet while ``when()``."""
    iterator = source.__aiter__()
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            if when():
                done, _ = await asyncio.wait({pending}, timeout=every)
                if not done:
                    yield None
                    continue
            try:
                item = await pending
            except StopAsyncIteration:
                pending = None
                return
            pending = None
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
