"""Anthropic extended thinking: signed thinking blocks kept whole and sent back as the API
requires, across a killed worker, follow-up runs and compaction; shown apart from the
answer.

A real worker (in process, or a ``subagents worker`` process that is SIGKILLed) on the
real Temporal server; the real ``anthropic`` SDK against ``FakeAnthropicServer``, which
signs every thinking block it sends and answers a block that comes back changed, out of
order or missing with the API's 400.
"""

from __future__ import annotations

from typing import Any

from anthropic import AsyncAnthropic, BadRequestError

from durable_subagents.testing import FakeAnthropicServer
from durable_subagents.testing.fake_anthropic import REDACTED

INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"


# ---------------------------------------------------------------- the wire


async def test_the_fake_api_holds_thinking_blocks_to_the_real_apis_rules() -> None:
    """Through the SDK's own stream parser: the blocks it assembles pass; any change to
    them, a block dropped or moved, and thinking with a temperature, a forced tool or a
    budget out of bounds get the API's 400."""
    tools = [{"name": "ls", "description": "List.", "input_schema": {"type": "object"}}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    async with FakeAnthropicServer() as srv:
        api = AsyncAnthropic(base_url=srv.base_url, api_key="k", max_retries=0)
        srv.add_reply(tool_calls=[{"name": "ls", "arguments": {}}], thinking=["a", REDACTED, "b"])
        async with api.messages.stream(
            model="claude-haiku-4-5", max_tokens=4096, thinking=thinking, tools=tools,
            messages=[{"role": "user", "content": "go"}],
        ) as stream:  # fmt: skip
            message = await stream.get_final_message()
        blocks = [b.model_dump(exclude_none=True) for b in message.content]
        assert [b["type"] for b in blocks] == [
            "thinking",
            "redacted_thinking",
            "thinking",
            "tool_use",
        ]
        assert blocks[0]["signature"] and blocks[0]["thinking"] == "a"
        assert message.usage.output_tokens_details is not None
        result = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": blocks[3]["id"], "content": "x"}],
        }

        async def send(content: list[dict[str, Any]], **options: Any) -> str:
            request = {
                "model": "claude-haiku-4-5", "max_tokens": 4096, "tools": tools,
                "thinking": thinking,
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": content},
                    result,
                ],
                **options,
            }  # fmt: skip
            try:
                await api.messages.create(**request)
            except BadRequestError as err:
                return str(err)
            return "ok"

        a, redacted, b, use = blocks
        assert await send(blocks) == "ok"
        changed = {**a, "thinking": "a!"}
        assert "messages.1.content.0: Invalid `signature` in `thinking` block" in await send(
            [changed, redacted, b, use]
        )
        assert "Invalid `signature`" in await send(
            [{**a, "signature": "x" + a["signature"]}, redacted, b, use]
        )
        assert "messages.1.content.0: Invalid `signature`" in await send([b, redacted, a, use])
        assert "Invalid `data` in `redacted_thinking`" in await send(
            [a, {**redacted, "data": redacted["data"][:-8] + "AAAAAAA="}, b, use]
        )
        dropped = await send([use])
        expected = "Expected `thinking` or `redacted_thinking`, but found `tool_use`"
        assert f"messages.1.content.0.type: {expected}" in dropped
        assert "`temperature` may only be set to 1" in await send(
            blocks, extra_body={"temperature": 0.5}
        )
        assert await send(blocks, extra_body={"temperature": 1}) == "ok"
        assert "tool_choice forces tool use" in await send(blocks, tool_choice={"type": "any"})
        assert "greater than or equal to 1024" in await send(
            blocks, thinking={"type": "enabled", "budget_tokens": 1000}
        )
        over = {"type": "enabled", "budget_tokens": 4096}
        assert "`max_tokens` must be greater than `thinking.budget_tokens`" in await send(
            blocks, thinking=over
        )
        assert (
            await send(blocks, thinking=over, extra_headers={"anthropic-beta": INTERLEAVED_BETA})
            == "ok"
        )
        assert "When thinking is disabled" in await send(blocks, thinking={"type": "disabled"})
        assert await send([use], thinking={"type": "disabled"}) == "ok"
        await api.close()
