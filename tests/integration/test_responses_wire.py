"""``openai-responses:`` through the real ``openai`` SDK against ``FakeOpenAIResponsesServer``.

One model turn at a time, no Temporal: the request's wire shape (stateless, reasoning
items sent back as they came), streaming, usage, and each way the API fails mapped as
the other wires map it. The fake's own refusals are checked with the bare SDK.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError
from temporalio.exceptions import ApplicationError

from durable_subagents.providers import (
    ModelProvider,
    OpenAIResponsesProvider,
    clear_provider_cache,
    resolve_provider,
)
from durable_subagents.providers._errors import CONTEXT_LENGTH_ERROR
from durable_subagents.testing import FakeOpenAIResponsesServer
from durable_subagents.types import Message, ModelRequest, ToolImage, ToolSpec

KEY = "sk-test-responses-secret-0123456789"
GREP = ToolSpec(
    name="grep",
    description="Search files.",
    parameters={"type": "object", "properties": {"pattern": {"type": "string"}}},
)


def user(text: str) -> Message:
    return Message(role="user", content=text)


@pytest.fixture(params=["aiohttp", "httpx"])
async def srv(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[FakeOpenAIResponsesServer]:
    async with FakeOpenAIResponsesServer() as server:
        monkeypatch.setenv("SUBAGENTS_MODEL_HTTP", request.param)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        clear_provider_cache()
        yield server
        clear_provider_cache()


@pytest.fixture
async def provider(srv: FakeOpenAIResponsesServer) -> AsyncIterator[ModelProvider]:
    provider, full, name = resolve_provider("openai-responses:gpt-5-mini")
    assert (provider.name, full, name) == (
        "openai-responses",
        "openai-responses:gpt-5-mini",
        "gpt-5-mini",
    )
    assert isinstance(provider, OpenAIResponsesProvider)
    yield provider
    await provider.aclose()


async def failure(provider: ModelProvider, request: ModelRequest | None = None) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await provider.complete(request or ModelRequest(model="gpt-5-mini", messages=[user("hi")]))
    return info.value


async def test_a_streamed_answer_with_usage_and_a_stateless_request(
    provider: ModelProvider, srv: FakeOpenAIResponsesServer
) -> None:
    srv.add_reply(text="Hello there, world.", usage=(12, 3))
    pieces: list[str] = []
    response = await provider.complete(
        ModelRequest(
            model="gpt-5-mini",
            system="Be brief.",
            messages=[user("hi")],
            max_tokens=99,
            temperature=0.5,
        ),
        on_text=pieces.append,
    )
    assert response.text == "Hello there, world." == "".join(pieces)
    assert len(pieces) == 3  # streamed word by word, not handed over whole
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    assert (response.stop_reason, response.model, response.reasoning) == ("stop", "gpt-5-mini", [])
    [body] = srv.requests
    assert body["stream"] is True and body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["instructions"] == "Be brief."
    assert body["input"] == [{"type": "message", "role": "user", "content": "hi"}]
    assert body["max_output_tokens"] == 99 and body["temperature"] == 0.5
    assert "messages" not in body and "reasoning" not in body and "tools" not in body
    assert "text" not in body  # no schema, no format
    assert srv.request_headers[0]["authorization"] == f"Bearer {KEY}"
    assert (srv.completed_streams, srv.disconnects) == (1, 0)


async def test_a_tool_loop_sends_reasoning_back_as_it_came(
    provider: ModelProvider, srv: FakeOpenAIResponsesServer
) -> None:
    srv.add_reply(
        text="Searching.",
        tool_calls=[{"name": "grep", "arguments": {"pattern": "def "}, "id": "call_1"}],
        thinking=["**Plan** grep first.", "Then read."],
    )
    srv.add_reply(text="Found f.", thinking=["Done."])
    thinking: list[str] = []
    request = ModelRequest(
        model="gpt-5-mini", messages=[user("find")], tools=[GREP], reasoning_effort="high"
    )
    first = await provider.complete(request, on_thinking=thinking.append)
    assert [c.id for c in first.tool_calls] == ["call_1"]
    assert first.tool_calls[0].arguments == {"pattern": "def "}
    assert first.stop_reason == "tool_calls" and first.text == "Searching."
    assert "".join(thinking) == "**Plan** grep first.\n\nThen read."
    assert [(b.type, b.thinking) for b in first.reasoning] == [
        ("reasoning", "**Plan** grep first."),
        ("reasoning", "Then read."),
    ]
    assert first.usage.reasoning_tokens == 1024  # the fake's count for "high"
    assert first.usage.output_tokens > first.usage.reasoning_tokens
    answer = Message(
        role="assistant",
        content=first.text,
        tool_calls=first.tool_calls,
        reasoning=first.reasoning,
    )
    result = Message(role="tool", content="f.py:1: def f()", tool_call_id="call_1")
    second = await provider.complete(
        request.model_copy(update={"messages": [user("find"), answer, result]})
    )
    assert second.text == "Found f." and srv.outcomes == ["200", "200"]
    body = srv.requests[1]
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    assert body["tools"] == [
        {
            "type": "function",
            "name": "grep",
            "description": "Search files.",
            "parameters": GREP.parameters,
            "strict": False,
        }
    ]
    items = body["input"]
    assert [i["type"] for i in items] == [
        "message",
        "reasoning",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    # the reasoning items went back exactly as the server sent them, in their order
    assert items[1:3] == [srv.issued_reasoning[i["id"]] for i in items[1:3]]
    assert list(srv.issued_reasoning) == [i["id"] for i in items[1:3]] + [
        i["id"] for i in srv.issued_reasoning.values() if i["summary"][0]["text"] == "Done."
    ]
    assert all(i["encrypted_content"].startswith("gAAAAAB") for i in items[1:3])
    assert items[4] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "grep",
        "arguments": '{"pattern": "def "}',
    }
    assert items[5] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "f.py:1: def f()",
    }


async def test_altered_or_dropped_reasoning_is_refused_and_not_retried(
    provider: ModelProvider, srv: FakeOpenAIResponsesServer
) -> None:
    srv.add_reply(tool_calls=[{"name": "grep", "arguments": {}, "id": "call_1"}])
    request = ModelRequest(
        model="gpt-5-mini", messages=[user("find")], tools=[GREP], reasoning_effort="low"
    )
    first = await provider.complete(request)
    [block] = first.reasoning
    item = json.loads(block.data)
    content = item["encrypted_content"]
    item["encrypted_content"] = content[:-6] + ("AAAAAA" if content[-6:] != "AAAAAA" else "BBBBBB")
    altered = block.model_copy(update={"data": json.dumps(item)})
    result = Message(role="tool", content="none", tool_call_id="call_1")
    for reasoning, expected in (
        ([altered], "could not be verified"),
        ([], "was provided without its required 'reasoning' item"),
    ):
        answer = Message(role="assistant", tool_calls=first.tool_calls, reasoning=reasoning)
        error = await failure(
            provider, request.model_copy(update={"messages": [user("find"), answer, result]})
        )
        assert (error.type, error.non_retryable) == ("ModelRequestError", True)
        assert "openai-responses API returned HTTP 400" in error.message
        assert expected in error.message
    assert srv.outcomes == ["200", "400", "400"]


async def test_the_fake_api_refuses_what_the_real_one_refuses(
    srv: FakeOpenAIResponsesServer,
) -> None:
    """Through the bare SDK: OpenAI's messages for each malformed stateless input."""
    client = AsyncOpenAI(base_url=srv.base_url, api_key=KEY, max_retries=0)
    srv.add_reply(text="Looking.", tool_calls=[{"name": "grep", "arguments": {}, "id": "c1"}])
    first = await client.responses.create(
        model="gpt-5",
        input="find",
        store=False,
        include=["reasoning.encrypted_content"],
        reasoning={"effort": "low"},
    )
    reasoning, message, call = (item.model_dump(exclude_none=True) for item in first.output)
    assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"]
    output = {"type": "function_call_output", "call_id": "c1", "output": "none"}
    cases: list[tuple[list[Any], type[Exception], str]] = [
        (
            [{**reasoning, "encrypted_content": None}, message, call, output],
            NotFoundError,
            f"Item with id '{reasoning['id']}' not found. Items are not persisted when `store`",
        ),
        (
            [reasoning, output],
            BadRequestError,
            f"Item '{reasoning['id']}' of type 'reasoning' was provided without its required "
            "following item.",
        ),
        (
            [reasoning, message, call, {**output, "call_id": "c2"}],
            BadRequestError,
            "No tool call found for function call output with call_id c2.",
        ),
        ([reasoning, message, call], BadRequestError, "No tool output found for function call c1."),
    ]
    for items, kind, message_text in cases:
        with pytest.raises(kind) as info:
            await client.responses.create(model="gpt-5", input=items, store=False)
        assert message_text in str(info.value)
    with pytest.raises(BadRequestError, match="Encrypted content is not supported with this"):
        await client.responses.create(
            model="gpt-4.1", input="hi", store=False, include=["reasoning.encrypted_content"]
        )
    await client.close()


async def test_rate_limits_and_server_errors_are_retried_after_what_the_server_says(
    provider: ModelProvider, srv: FakeOpenAIResponsesServer
) -> None:
    srv.add_error(429, headers={"retry-after-ms": "1400"})
    srv.add_error(503)
    limited = await failure(provider)
    assert (limited.type, limited.non_retryable) == ("ModelUnavailable", False)
    assert limited.next_retry_delay == timedelta(seconds=1.4)
    assert "HTTP 429: Rate limit reached for fake-model" in limited.message
    unavailable = await failure(provider)
    assert (unavailable.type, unavailable.non_retryable) == ("ModelUnavailable", False)
    assert KEY not in limited.message + unavailable.message


async def test_a_prompt_over_the_window_is_a_context_length_error() -> None:
    async with FakeOpenAIResponsesServer(context_window=50) as server:
        provider = OpenAIResponsesProvider(api_key=KEY, base_url=server.base_url)
        error = await failure(provider, ModelRequest(model="gpt-5", messages=[user("long " * 100)]))
        await provider.aclose()
    assert error.type == CONTEXT_LENGTH_ERROR and error.non_retryable
    assert "Your input exceeds the context window of this model" in error.message
    assert server.outcomes == ["400"]


async def test_an_unfinished_or_empty_answer_is_never_a_turn(
    provider: ModelProvider, srv: FakeOpenAIResponsesServer
) -> None:
    srv.add_fault("truncate", after_chunks=4)
    srv.add_reply(text="the whole answer")
    cut = await failure(provider)
    assert (cut.type, cut.non_retryable) == ("ModelUnavailable", False)
    assert "without response.completed" in cut.message
    assert (await provider.complete(ModelRequest(model="m", messages=[user("hi")]))).text
    srv.add_reply(text="")
    empty = await failure(provider)
    assert (empty.type, empty.non_retryable) == ("ModelUnavailable", False)
    srv.add_reply(text="", stop_reason="max_output_tokens")
    exhausted = await failure(provider)
    assert (exhausted.type, exhausted.non_retryable) == ("ModelRequestError", True)
    assert "stop reason 'length'" in exhausted.message and "raise max_tokens" in exhausted.message


async def test_prompt_cache_key_and_cached_tokens(srv: FakeOpenAIResponsesServer) -> None:
    provider = OpenAIResponsesProvider(api_key=KEY, base_url=srv.base_url, prompt_cache_key=True)
    long_system = "You are careful. " * 400  # past the 1,024 tokens OpenAI caches from
    request = ModelRequest(
        model="gpt-5", system=long_system, messages=[user("hi")], cache_key="task-1"
    )
    first = await provider.complete(request)
    second = await provider.complete(request)
    await provider.aclose()
    assert [b["prompt_cache_key"] for b in srv.requests] == ["task-1", "task-1"]
    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens >= 1024
    assert second.usage.input_tokens == first.usage.input_tokens


async def test_a_model_that_does_not_reason_is_not_asked_for_reasoning(
    provider: ModelProvider, srv: FakeOpenAIResponsesServer
) -> None:
    """GPT-4.1 refuses ``include`` of encrypted reasoning; a model named as a reasoning
    one, or given an effort, is asked for it."""
    srv.add_reply(tool_calls=[{"name": "grep", "arguments": {}, "id": "call_1"}])
    srv.add_reply(text="Nothing found.")
    request = ModelRequest(model="gpt-4.1", messages=[user("find")], tools=[GREP])
    first = await provider.complete(request)
    assert first.reasoning == []
    answer = Message(role="assistant", tool_calls=first.tool_calls)
    result = Message(role="tool", content="none", tool_call_id="call_1")
    second = await provider.complete(
        request.model_copy(update={"messages": [user("find"), answer, result]})
    )
    assert second.text == "Nothing found." and srv.outcomes == ["200", "200"]
    assert not [b for b in srv.requests if "include" in b or "reasoning" in b]
    await provider.complete(ModelRequest(model="o4-mini", messages=[user("hi")]))
    await provider.complete(
        ModelRequest(model="my-model", messages=[user("hi")], reasoning_effort="low")
    )
    assert [b.get("include") for b in srv.requests[2:]] == [["reasoning.encrypted_content"]] * 2


async def test_an_unverified_organization_reasons_without_summaries() -> None:
    """The API refuses summaries to an organization it has not verified: the turn goes
    again without, later turns ask for none, and the reasoning still comes and goes."""
    async with FakeOpenAIResponsesServer(verified=False) as server:
        provider = OpenAIResponsesProvider(api_key=KEY, base_url=server.base_url)
        server.add_reply(tool_calls=[{"name": "grep", "arguments": {}, "id": "call_1"}])
        server.add_reply(text="None found.")
        thinking: list[str] = []
        request = ModelRequest(
            model="gpt-5", messages=[user("find")], tools=[GREP], reasoning_effort="low"
        )
        first = await provider.complete(request, on_thinking=thinking.append)
        answer = Message(role="assistant", tool_calls=first.tool_calls, reasoning=first.reasoning)
        result = Message(role="tool", content="none", tool_call_id="call_1")
        second = await provider.complete(
            request.model_copy(update={"messages": [user("find"), answer, result]})
        )
        await provider.aclose()
    assert second.text == "None found." and thinking == []
    assert server.outcomes == ["400", "200", "200"]
    summaries = [b["reasoning"].get("summary") for b in server.requests]
    assert summaries == ["auto", None, None]
    assert [i["type"] for i in server.requests[2]["input"]][:2] == ["message", "reasoning"]
    [block] = first.reasoning
    assert block.thinking == "" and json.loads(block.data)["encrypted_content"]


async def test_a_tool_results_images_go_in_its_output(
    provider: ModelProvider, srv: FakeOpenAIResponsesServer
) -> None:
    """A function call's output takes images beside its text; one that is no image
    the API takes is refused with its 400."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(24)).decode()
    srv.add_reply(tool_calls=[{"name": "shot", "arguments": {}, "id": "call_1"}])
    srv.add_reply(text="A blank page.")
    request = ModelRequest(model="gpt-4.1", messages=[user("look")], tools=[GREP])
    first = await provider.complete(request)
    answer = Message(role="assistant", tool_calls=first.tool_calls)

    def result(data: str) -> Message:
        image = ToolImage(media_type="image/png", ref="blob-1", size=32, data=data)
        return Message(role="tool", content="[image 1]", tool_call_id="call_1", images=[image])

    second = await provider.complete(
        request.model_copy(update={"messages": [user("look"), answer, result(png)]})
    )
    assert second.text == "A blank page."
    output = srv.requests[1]["input"][-1]["output"]
    assert output == [
        {"type": "input_text", "text": "[image 1]"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{png}", "detail": "auto"},
    ]
    not_an_image = base64.b64encode(b"hello").decode()
    error = await failure(
        provider,
        request.model_copy(update={"messages": [user("look"), answer, result(not_an_image)]}),
    )
    assert error.non_retryable and "unsupported image" in error.message
