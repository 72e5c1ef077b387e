"""Prompt caching, usage and context-length errors on both wires, through the real SDKs.

The fake servers answer as the APIs document: OpenAI caches prefixes of 1,024 tokens
and more on its own and counts the cached tokens in ``prompt_tokens``; Anthropic
caches only behind ``cache_control`` breakpoints (at most 4, with a 20-block look-back)
and leaves both cache counts out of ``input_tokens``. A request over the window gets
each API's own error body.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from temporalio.exceptions import ApplicationError

from durable_subagents.providers import (
    AnthropicProvider,
    OpenAIProvider,
)
from durable_subagents.providers._errors import CONTEXT_LENGTH_ERROR
from durable_subagents.testing import FakeAnthropicServer, FakeOpenAIServer
from durable_subagents.types import Message, ModelRequest, ToolCall, ToolSpec

BIG = "The quick brown fox jumps over the lazy dog. " * 120  # ~5,400 characters
"""A system prompt of about 1,350 tokens as the fakes count (4 characters a token)."""
GREP = ToolSpec(
    name="grep",
    description="Search files.",
    parameters={"type": "object", "properties": {"pattern": {"type": "string"}}},
)
READ = ToolSpec(
    name="read_file",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)
EPHEMERAL = {"type": "ephemeral"}


def conversation(turns: int) -> list[Message]:
    """A prompt, then ``turns`` turns of one read each."""
    messages = [Message(role="user", content="Read the files and report.")]
    for n in range(turns):
        call = ToolCall(id=f"call_{n}", name="read_file", arguments={"path": f"f{n}.txt"})
        messages.append(Message(role="assistant", content=f"Reading f{n}.", tool_calls=[call]))
        body = f"contents of f{n} " * 150
        messages.append(
            Message(role="tool", content=body, tool_call_id=call.id, tool_name="read_file")
        )
    return messages


def marked(body: dict[str, Any]) -> list[str]:
    """Where a Messages request carries ``cache_control``: ``tools[i]``, ``system``, ``m[i]``."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += ["system" for block in system if "cache_control" in block]
    for i, message in enumerate(body["messages"]):
        for j, block in enumerate(message["content"]):
            if "cache_control" in block:
                assert j == len(message["content"]) - 1, "only a message's last block is marked"
                found.append(f"m[{i}]")
    return found


@pytest.fixture
async def anthropic_srv() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as srv:
        yield srv


@pytest.fixture
async def openai_srv() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as srv:
        yield srv


# --------------------------------------------------------------------------- anthropic


async def test_anthropic_marks_tools_system_and_the_latest_two_prefixes(
    anthropic_srv: FakeAnthropicServer,
) -> None:
    provider = AnthropicProvider(api_key="k", base_url=anthropic_srv.base_url)
    try:
        for turns in (0, 1, 3, 40):
            anthropic_srv.add_reply(text="ok")
            await provider.complete(
                ModelRequest(
                    model="claude-sonnet-4-6",
                    system=BIG,
                    messages=conversation(turns),
                    tools=[GREP, READ],
                )
            )
    finally:
        await provider.aclose()
    first, one, three, forty = anthropic_srv.requests
    assert marked(first) == ["tools[1]", "system", "m[0]"]
    # the end of the request, and the end of the request before (the turn's start)
    assert marked(one) == ["tools[1]", "system", "m[0]", "m[2]"]
    assert marked(three) == ["tools[1]", "system", "m[4]", "m[6]"]
    assert marked(forty) == ["tools[1]", "system", "m[78]", "m[80]"]
    assert all(outcome == "200" for outcome in anthropic_srv.outcomes)
    # the request of turn n+1 reads what the request of turn n wrote
    assert anthropic_srv.usages[2]["cache_read_input_tokens"] > 0


async def test_anthropic_usage_counts_cache_reads_and_writes_in_input(
    anthropic_srv: FakeAnthropicServer,
) -> None:
    provider = AnthropicProvider(api_key="k", base_url=anthropic_srv.base_url)
    usages = []
    try:
        for turns in range(4):
            anthropic_srv.add_reply(text="ok")
            response = await provider.complete(
                ModelRequest(model="claude-sonnet-4-6", system=BIG, messages=conversation(turns))
            )
            usages.append(response.usage)
    finally:
        await provider.aclose()
    for usage, sent in zip(usages, anthropic_srv.usages, strict=True):
        read, write = sent["cache_read_input_tokens"], sent["cache_creation_input_tokens"]
        assert usage.cache_read_tokens == read and usage.cache_write_tokens == write
        assert usage.input_tokens == sent["input_tokens"] + read + write
        assert usage.output_tokens == sent["output_tokens"]
    assert usages[0].cache_read_tokens == 0 and usages[0].cache_write_tokens > 1024
    # from the second request on, the previous request is read back
    for before, usage in itertools.pairwise(usages):
        assert usage.cache_read_tokens == before.input_tokens


async def test_fake_anthropic_caches_only_behind_breakpoints_with_its_look_back(
    anthropic_srv: FakeAnthropicServer,
) -> None:
    client = AsyncAnthropic(base_url=anthropic_srv.base_url, api_key="k", max_retries=0)
    big = {"type": "text", "text": BIG}

    async def usage(
        blocks: list[dict[str, Any]], model: str = "claude-sonnet-4-6"
    ) -> anthropic.types.Usage:
        message = await client.messages.create(
            model=model, max_tokens=10, messages=[{"role": "user", "content": blocks}]
        )
        return message.usage

    small = [{"type": "text", "text": f"block {n}"} for n in range(30)]
    try:
        # no breakpoint: nothing cached, however often it is sent
        for _ in range(2):
            plain = await usage([big, *small[:2]])
            assert (plain.cache_creation_input_tokens, plain.cache_read_input_tokens) == (0, 0)
        # below the model's minimum (4,096 for Haiku 4.5): not cached, and no error
        haiku = await usage([{**big, "cache_control": EPHEMERAL}], "claude-haiku-4-5")
        assert haiku.cache_creation_input_tokens == 0
        # written once, then read: input_tokens leaves both out
        written = await usage([{**big, "cache_control": EPHEMERAL}])
        assert written.cache_creation_input_tokens > 1024 and written.input_tokens == 0
        read = await usage([{**big, "cache_control": EPHEMERAL}, *small[:3]])
        assert read.cache_read_input_tokens == written.cache_creation_input_tokens
        assert read.cache_creation_input_tokens == 0 and read.input_tokens > 0
        # a breakpoint finds the cached prefix within the 20 blocks before it...
        near = await usage([big, *small[:19], {**small[19], "cache_control": EPHEMERAL}])
        assert near.cache_read_input_tokens == written.cache_creation_input_tokens
        # ...and not further back: then it writes the whole prefix again
        other = [{"type": "text", "text": f"other {n}"} for n in range(21)]
        far = await usage([big, *other[:20], {**other[20], "cache_control": EPHEMERAL}])
        assert far.cache_read_input_tokens == 0
        assert far.cache_creation_input_tokens > written.cache_creation_input_tokens
        # a fifth breakpoint is refused with the API's error
        with pytest.raises(anthropic.BadRequestError) as refused:
            await usage([{**b, "cache_control": EPHEMERAL} for b in small[:5]])
        assert refused.value.body == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "A maximum of 4 blocks with cache_control may be provided. Found 5.",
            },
        }
    finally:
        await client.close()


# --------------------------------------------------------------------------- openai


async def test_fake_openai_caches_prefixes_from_1024_tokens_in_128_token_steps(
    openai_srv: FakeOpenAIServer,
) -> None:
    client = AsyncOpenAI(base_url=openai_srv.base_url, api_key="k", max_retries=0)

    async def usage(messages: list[dict[str, Any]], key: str | None = None) -> Any:
        extra = {"prompt_cache_key": key} if key else {}
        completion = await client.chat.completions.create(
            model="gpt-4.1-mini", messages=messages, extra_body=extra
        )
        return completion.usage

    system = {"role": "system", "content": BIG}
    try:
        short = [{"role": "user", "content": "hi"}]
        assert (await usage(short)).prompt_tokens_details.cached_tokens == 0
        assert (await usage(short)).prompt_tokens_details.cached_tokens == 0  # under 1,024
        first = await usage([system, {"role": "user", "content": "one"}])
        assert first.prompt_tokens_details.cached_tokens == 0
        second = await usage([system, {"role": "user", "content": "two"}])
        cached = second.prompt_tokens_details.cached_tokens
        # cached_tokens is part of prompt_tokens, a multiple of 128 from 1,024 on, and the
        # longest step within what the two prompts share
        assert 1024 <= cached < second.prompt_tokens and (cached - 1024) % 128 == 0
        assert cached + 128 > openai_srv.prompt_tokens({"messages": [system]})
        # another prompt_cache_key routes elsewhere: no hit there
        other = await usage([system, {"role": "user", "content": "three"}], key="other")
        assert other.prompt_tokens_details.cached_tokens == 0
    finally:
        await client.close()


async def test_openai_sends_the_task_as_prompt_cache_key_and_reads_cached_tokens(
    openai_srv: FakeOpenAIServer,
) -> None:
    keyed = OpenAIProvider(api_key="k", base_url=openai_srv.base_url, prompt_cache_key=True)
    plain = OpenAIProvider(api_key="k", base_url=openai_srv.base_url)
    request = ModelRequest(
        model="gpt-4.1-mini",
        system=BIG,
        messages=conversation(2),
        tools=[READ],
        cache_key="task-7",
    )
    try:
        first = await keyed.complete(request)
        second = await keyed.complete(request)
        await plain.complete(request)
        long_id = request.model_copy(update={"cache_key": "t" * 100})
        await keyed.complete(long_id)
        await keyed.complete(request.model_copy(update={"prompt_cache": False}))
    finally:
        await keyed.aclose()
        await plain.aclose()
    bodies = openai_srv.requests
    assert [b.get("prompt_cache_key") for b in bodies[:3]] == ["task-7", "task-7", None]
    assert len(bodies[3]["prompt_cache_key"]) == 64 and "t" * 65 not in str(bodies[3])
    assert "prompt_cache_key" not in bodies[4]
    assert first.usage.cache_read_tokens == 0
    sent = openai_srv.usages[1]
    assert second.usage.input_tokens == sent["prompt_tokens"]
    assert second.usage.cache_read_tokens == sent["prompt_tokens_details"]["cached_tokens"] > 0


# --------------------------------------------------------------------------- windows


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_a_request_over_the_window_gets_the_apis_error_with_both_sizes(wire: str) -> None:
    request = ModelRequest(model="m", messages=conversation(3))
    if wire == "openai":
        server: FakeOpenAIServer | FakeAnthropicServer = FakeOpenAIServer(context_window=500)
    else:
        server = FakeAnthropicServer(context_window=500)
    async with server as srv:
        srv.add_reply(text="never sent")
        provider: OpenAIProvider | AnthropicProvider
        if wire == "openai":
            provider = OpenAIProvider(api_key="k", base_url=srv.base_url)
        else:
            provider = AnthropicProvider(api_key="k", base_url=srv.base_url)
        try:
            with pytest.raises(ApplicationError) as refused:
                await provider.complete(request)
            raw: Any = AsyncOpenAI if wire == "openai" else AsyncAnthropic
            client = raw(base_url=srv.base_url, api_key="k", max_retries=0)
            error = (openai.BadRequestError, anthropic.BadRequestError)
            with pytest.raises(error) as sdk:
                if wire == "openai":
                    await client.chat.completions.create(
                        model="m", messages=srv.requests[0]["messages"]
                    )
                else:
                    await client.messages.create(
                        model="m", max_tokens=10, messages=srv.requests[0]["messages"]
                    )
            await client.close()
        finally:
            await provider.aclose()
        tokens = srv.prompt_tokens(srv.requests[0])
    assert tokens > 500
    err = refused.value
    assert err.type == CONTEXT_LENGTH_ERROR and err.non_retryable
    assert err.details == ({"tokens": tokens, "maximum": 500},)
    assert "HTTP 400" in err.message and "context window" in err.message
    if wire == "openai":
        assert sdk.value.body == {
            "message": "This model's maximum context length is 500 tokens. However, your "
            f"messages resulted in {tokens} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    else:
        assert sdk.value.body == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {tokens} tokens > 500 maximum",
            },
        }
    assert len(srv.outcomes) == 2 and set(srv.outcomes) == {"400"}  # the reply stays queued
