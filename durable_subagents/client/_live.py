"""A watcher's live text: the open model turn's text, read from its heartbeats.

``history_events`` tells ``LiveTurn`` when a turn opens and ends; between the two it
polls the task's pending model-turn activity (``_live`` says what its heartbeats carry)
and turns what is new into ``text`` events. When the turn ends, its recorded result
completes the text, so the deltas a watcher sees add up to the turn's exact text, even
when the turn was too quick for any heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from durable_subagents._live import LiveSnapshot, parse_live
from durable_subagents._payloads import MODEL_TURN_ACTIVITY
from durable_subagents.types import TaskEvent

__all__ = ["LIVE_POLL", "RESTARTED", "LiveTurn", "TextResolver", "ticking"]

LIVE_POLL = 0.5
"""Seconds between looks at an open turn's text (its heartbeats come once a second)."""

RESTARTED = "restarted"
"""A ``text`` event's summary when the turn's text starts over (the call was retried)."""

T = TypeVar("T")

TextResolver = Callable[[str], Awaitable[str | None]]
"""Reads a long turn text the result holds by reference (None: not readable here)."""


class LiveTurn:
    """The text shown so far of one task's open model turn."""

    def __init__(self, client: Client, task_id: str, resolve: TextResolver | None = None) -> None:
        self._client = client
        self._task_id = task_id
        self._resolve = resolve
        self.run_id: str | None = None
        self.open: int | None = None
        """The scheduled event id of the open turn, or None."""
        self.turn: int | None = None
        self._attempt = 0
        self._tail = ""
        self._tail_start = 0
        """The text (this attempt) yielded, from ``_tail_start`` (0 unless a gap was
        skipped); it ends at ``_shown``."""

    @property
    def _shown(self) -> int:
        """Characters of the turn's text (this attempt) that were yielded."""
        return self._tail_start + len(self._tail)

    def start(self, scheduled_id: int, turn: int | None) -> None:
        """A model turn was scheduled."""
        self.open, self.turn = scheduled_id, turn
        self._attempt, self._tail, self._tail_start = 0, "", 0

    async def poll(self) -> list[TaskEvent]:
        """New text of the open turn since the last look (none if nothing is known)."""
        if self.open is None:
            return []
        snapshot = await self._snapshot()
        if snapshot is None or (self.turn is not None and snapshot.turn != self.turn):
            return []
        restarted = False
        if snapshot.attempt != self._attempt:
            restarted = self._shown > 0
            self._attempt, self._tail, self._tail_start = snapshot.attempt, "", 0
        if snapshot.end <= self._shown:
            return []
        if snapshot.start > self._shown:  # more arrived than a heartbeat carries
            new = "…" + snapshot.text
            self._tail, self._tail_start = snapshot.text, snapshot.start
        else:
            new = snapshot.text[self._shown - snapshot.start :]
            self._tail += new
        return [self._event(new, restarted)]

    async def finish(
        self, result: dict[str, Any] | None, time: datetime | None = None
    ) -> list[TaskEvent]:
        """The turn ended: the rest of its text from its result (None: it failed).

        Args:
            result: The turn's recorded result.
            time: When the turn ended, as its history records it: the text's time, so
                a finished task's replayed text keeps its place among its events.
        """
        self.open = None
        if result is None:
            return []
        text = result.get("text")
        ref = result.get("text_ref")
        if isinstance(ref, str) and ref:
            text = await self._resolve(ref) if self._resolve is not None else None
        if not isinstance(text, str) or not text:
            return []
        end = self._shown
        if end == 0:
            return [self._event(text, False, time)]
        if text[self._tail_start : end] == self._tail and len(text) >= end:
            rest = text[end:]
            return [self._event(rest, False, time)] if rest else []
        return [self._event(text, True, time)]  # the answer recorded is not the one streamed

    def _event(self, text: str, restarted: bool, time: datetime | None = None) -> TaskEvent:
        return TaskEvent(
            kind="text",
            task_id=self._task_id,
            # naive UTC, as history times; live text is stamped as it is seen
            time=time or datetime.now(UTC).replace(tzinfo=None),
            turn=self.turn,
            text=text,
            summary=RESTARTED if restarted else None,
        )

    async def _snapshot(self) -> LiveSnapshot | None:
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
            return parse_live(values[0] if values else None)
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
