"""Anthropic extended thinking: each model's effort setting, and a stream that mixes
thinking into text leaks none of it into the answer.
"""

from __future__ import annotations

from typing import Any

from durable_subagents.providers._thinking import (
    INTERLEAVED_BETA,
    thinking_mode,
    thinking_params,
)
from durable_subagents.providers.anthropic import _Accumulator

# ---------------------------------------------------------------- the wire


def test_each_claude_model_takes_the_effort_its_own_way() -> None:
    assert [
        thinking_mode(m)
        for m in (
            "claude-3-5-haiku-20241022",
            "claude-3-7-sonnet-latest",
            "claude-sonnet-4-20250514",
            "claude-opus-4-1-20250805",
            "claude-haiku-4-5",
            "claude-opus-4-6",
            "claude-sonnet-4-6",
            "claude-opus-4-7",
            "claude-fable-5",
            "claude-mythos-preview",
            "glm-4.6",  # another model behind a compatible server
        )
    ] == ["none", "manual", "manual", "manual", "manual"] + ["adaptive"] * 5 + ["manual"]
    loop = [{"role": "user", "content": "go"}]
    assert thinking_params("claude-3-7-sonnet-latest", "low", 1000, loop) == {
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "max_tokens": 3048,  # no beta: 3.7 does not interleave
    }
    assert thinking_params("claude-haiku-4-5", "high", 8192, loop)["extra_headers"] == {
        "anthropic-beta": INTERLEAVED_BETA
    }
    assert thinking_params("claude-opus-4-7", "low", 8192, loop) == {
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "low"},
        "max_tokens": 8192 + 2048,
    }
    assert thinking_params("claude-3-5-haiku-20241022", "high", 8192, loop) == {}
    assert thinking_params("claude-opus-4-6", None, 8192, loop) == {}


def test_a_stream_that_mixes_thinking_into_text_blocks_leaks_none_into_the_answer() -> None:
    """A hostile or broken stream sends thinking deltas to a text block and text deltas
    to a thinking block: neither crosses over, into the answer or its live pieces."""
    shown: list[str] = []
    thoughts: list[str] = []
    acc = _Accumulator(model="m", on_text=shown.append, on_thinking=thoughts.append)

    def delta(index: int, kind: str, **value: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **value}}

    def start(index: int, kind: str) -> dict[str, Any]:
        return {"type": "content_block_start", "index": index, "content_block": {"type": kind}}

    for event in [
        start(0, "text"),
        delta(0, "text_delta", text="Hi."),
        delta(0, "thinking_delta", thinking="SECRET"),
        delta(0, "signature_delta", signature="s"),
        start(1, "thinking"),
        delta(1, "text_delta", text="LEAK"),
        delta(1, "thinking_delta", thinking="real"),
        delta(1, "signature_delta", signature="sig"),
        delta(2, "thinking_delta", thinking="orphan"),
        {"type": "message_stop"},
    ]:
        acc.add(event)
    response = acc.response()
    assert response.text == "Hi." and shown == ["Hi."]
    assert [(b.type, b.thinking, b.signature) for b in response.reasoning] == [
        ("thinking", "real", "sig")
    ]
    assert thoughts == ["real"]
