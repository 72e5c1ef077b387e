"""Live text: a streaming model turn's answer so far, carried by the turn's heartbeats.

The model-turn activity heartbeats once a second anyway (that is how a cancel reaches
it). Each heartbeat also carries the text streamed so far, so a watcher reads it from
the task's pending activity (``describe()``) while the turn runs:

- nothing is added to the workflow history: Temporal keeps only the latest heartbeat
  details, in the pending activity, and drops them when the attempt ends;
- it works from any host that can reach Temporal, with no store or port of its own, and
  goes through the client's data converter (and its payload codec) like everything else;
- a watcher that arrives late gets the turn's text so far, not only what follows.

Only the last ``LIVE_TEXT_LIMIT`` characters travel; ``start`` says where they begin
in the turn's text. When the turn ends, the watcher completes the text from the turn's
recorded result, so the deltas it yields add up to the turn's exact text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LIVE_TEXT_LIMIT", "LiveSnapshot", "LiveText", "parse_live"]

LIVE_TEXT_LIMIT = 32 * 1024
"""Characters of the turn's latest text a heartbeat carries."""

_KEY = "live_text"


@dataclass(frozen=True)
class LiveSnapshot:
    """What a heartbeat says about the turn's text."""

    turn: int
    attempt: int
    start: int
    """Where ``text`` begins in the turn's text (0 unless it outgrew the limit)."""
    text: str

    @property
    def end(self) -> int:
        """The length of the turn's text so far."""
        return self.start + len(self.text)


class LiveText:
    """Collects a streaming turn's text; gives the heartbeat details that carry it."""

    def __init__(self, turn: int, attempt: int) -> None:
        self.turn = turn
        self.attempt = attempt
        self._parts: list[str] = []
        self._length = 0
        self._sent = 0

    def add(self, delta: str) -> None:
        """Take one piece of the answer's text (a provider's ``on_text``)."""
        if delta:
            self._parts.append(delta)
            self._length += len(delta)

    @property
    def changed(self) -> bool:
        """Whether text arrived since the last ``details()``."""
        return self._length != self._sent

    def details(self) -> dict[str, Any]:
        """The heartbeat details: the latest ``LIVE_TEXT_LIMIT`` characters and where."""
        text = "".join(self._parts)
        self._parts = [text]
        self._sent = len(text)
        start = max(0, len(text) - LIVE_TEXT_LIMIT)
        return {
            _KEY: {"turn": self.turn, "attempt": self.attempt, "start": start, "text": text[start:]}
        }


def parse_live(details: Any) -> LiveSnapshot | None:
    """Read ``LiveText.details()`` back; None for anything else (older workers send none)."""
    value = details.get(_KEY) if isinstance(details, dict) else None
    if not isinstance(value, dict):
        return None
    turn, attempt, start, text = (value.get(k) for k in ("turn", "attempt", "start", "text"))
    if not (
        isinstance(turn, int)
        and isinstance(attempt, int)
        and isinstance(start, int)
        and start >= 0
        and isinstance(text, str)
    ):
        return None
    return LiveSnapshot(turn=turn, attempt=attempt, start=start, text=text)
