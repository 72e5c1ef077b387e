r"""Model text every payload can carry: lone surrogates become U+FFFD where they arrive.

JSON lets a server send ``"\ud800"``, a UTF-16 half with no partner, and Python
decodes it to a lone surrogate: the one kind of ``str`` that UTF-8 cannot encode.
Left in a turn's text, a tool call's id, name or arguments, a stop reason or a
server's error message, it fails everything downstream that serializes it: the
transcript blob, the turn's result, a heartbeat carrying live text, the failure
Temporal records. The activity would then fail the same way on every attempt, and
Temporal would retry the turn forever. Every other code point is valid UTF-8 and
travels as it is (NUL included: JSON escapes it).

Each surrogate becomes one U+FFFD, so the replacement keeps lengths: the streamed
deltas, each replaced on its own, still add up to the replaced text of the whole turn.
A valid pair sent as two escapes in one JSON string is one character after decoding
and stays; a pair split across two stream events is two replacement characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from durable_subagents.types import ModelResponse

__all__ = ["REPLACEMENT", "encodable", "encodable_response", "encodable_sink", "encodable_value"]

REPLACEMENT = "\ufffd"
"""What a lone surrogate becomes."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same object if none)."""
    if text.isascii():
        return text
    try:
        text.encode()  # faster than searching with a regex (a quarter to a half of it)
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text


def encodable_value(value: Any) -> Any:
    """JSON-like data with every string (dictionary keys too) made ``encodable``.

    Iterative: tool arguments nest as deeply as the JSON decoder allows, deeper than
    Python's recursion limit. Two keys that differ only in their surrogates become
    one, the later value kept.
    """
    if isinstance(value, str):
        return encodable(value)
    if not isinstance(value, dict | list):
        return value
    root = [value]
    slots: list[tuple[list[Any] | dict[Any, Any], Any]] = [(root, 0)]
    while slots:
        parent, key = slots.pop()
        item = parent[key]
        if isinstance(item, str):
            parent[key] = encodable(item)
        elif isinstance(item, dict):
            new = {encodable(k) if isinstance(k, str) else k: v for k, v in item.items()}
            parent[key] = new
            slots.extend((new, k) for k in new)
        elif isinstance(item, list):
            copy = list(item)
            parent[key] = copy
            slots.extend((copy, i) for i in range(len(copy)))
    return root[0]


def encodable_response(response: ModelResponse) -> ModelResponse:
    """A provider's answer with its text, calls, thinking, stop reason and model encodable."""
    calls = [
        call.model_copy(
            update={
                "id": encodable(call.id),
                "name": encodable(call.name),
                "arguments": encodable_value(call.arguments),
            }
        )
        for call in response.tool_calls
    ]
    stop = response.stop_reason
    reasoning = [
        block.model_copy(
            update={
                "thinking": encodable(block.thinking),
                "signature": encodable(block.signature),
                "data": encodable(block.data),
            }
        )
        for block in response.reasoning
    ]
    return response.model_copy(
        update={
            "text": encodable(response.text),
            "tool_calls": calls,
            "stop_reason": None if stop is None else encodable(stop),
            "model": encodable(response.model),
            "reasoning": reasoning,
        }
    )


def encodable_sink(on_text: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """``on_text`` fed encodable deltas (live text travels in heartbeats)."""
    if on_text is None:
        return None
    sink = on_text

    def add(delta: str) -> None:
        sink(encodable(delta))

    return add
