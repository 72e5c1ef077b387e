"""Lone surrogates a model sends become U+FFFD, checked on the text function alone."""

from __future__ import annotations

from typing import Any

from durable_subagents.providers._text import encodable, encodable_value

LONE = "\ud800"
R = "\ufffd"
PAIR = "\U0001f600"  # one code point; JSON sends it as two escapes, \ud83d\ude00


# ------------------------------------------------------------------ the replacement


def test_each_lone_surrogate_becomes_one_replacement_character() -> None:
    assert encodable(f"a{LONE}b\udfff") == f"a{R}b{R}"
    assert encodable(f"{PAIR} é") == f"{PAIR} é"  # valid text is the same object
    text = f"x{PAIR}"
    assert encodable(text) is text
    # a pair cut into two pieces: each piece alone, or joined, gives the same text
    halves = ["\ud83d", "\ude00"]
    assert "".join(encodable(h) for h in halves) == encodable("".join(halves)) == R + R
    deep: Any = f"v{LONE}"
    for _ in range(5000):  # deeper than the recursion limit
        deep = [{f"k{LONE}": deep}]
    inner = encodable_value(deep)
    for _ in range(5000):
        inner = inner[0][f"k{R}"]
    assert inner == f"v{R}"
