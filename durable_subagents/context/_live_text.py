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

A model that thinks aloud (Anthropic's extended thinking) streams its thinking first;
it travels the same way under a key of its own, so it is never mixed into the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LIVE_TEXT_LIMIT", "LiveSnapshot", "LiveText", "parse_live", "parse_live_thinking"]

LIVE_TEXT_LIMIT = 32 * 1024
"""Characters of the turn's latest text a heartbeat carries."""

_KEY = "live_text"
_THINKING_KEY = "live_thinking"


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


class _Channel:
    """One stream of a turn's pieces (its text, or its thinking)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.sent = 0

    def add(self, delta: str) -> None:
        if delta:
            self.parts.append(delta)
            self.length += len(delta)

    def tail(self) -> tuple[int, str]:
        """Where the latest ``LIVE_TEXT_LIMIT`` characters start, and they."""
        text = "".join(self.parts)
        self.parts = [text]
        self.sent = len(text)
        start = max(0, len(text) - LIVE_TEXT_LIMIT)
        return start, text[start:]


class LiveText:
    """Collects a streaming turn's text and thinking; gives the heartbeat details."""

    def __init__(self, turn: int, attempt: int) -> None:
        self.turn = turn
        self.attempt = attempt
        self._text = _Channel()
        self._thinking = _Channel()

    def add(self, delta: str) -> None:
        """Take one piece of the answer's text (a provider's ``on_text``)."""
        self._text.add(delta)

    def add_thinking(self, delta: str) -> None:
        """Take one piece of the model's thinking (a provider's ``on_thinking``)."""
        self._thinking.add(delta)

    @property
    def changed(self) -> bool:
        """Whether text or thinking arrived since the last ``details()``."""
        return any(c.length != c.sent for c in (self._text, self._thinking))

    def details(self) -> dict[str, Any]:
        """The heartbeat details: the latest ``LIVE_TEXT_LIMIT`` characters of each, and where."""
        out = {_KEY: self._snapshot(self._text)}
        if self._thinking.length:
            out[_THINKING_KEY] = self._snapshot(self._thinking)
        return out

    def _snapshot(self, channel: _Channel) -> dict[str, Any]:
        start, text = channel.tail()
        return {"turn": self.turn, "attempt": self.attempt, "start": start, "text": text}


def parse_live(details: Any, key: str = _KEY) -> LiveSnapshot | None:
    """Read ``LiveText.details()`` back; None for anything else (older workers send none)."""
    value = details.get(key) if isinstance(details, dict) else None
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


def parse_live_thinking(details: Any) -> LiveSnapshot | None:
    """The thinking ``LiveText.details()`` carries, if any."""
    return parse_live(details, _THINKING_KEY)
