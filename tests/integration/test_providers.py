"""Model providers through the real openai/anthropic SDKs against wire-level fake servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from aiohttp import web
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from temporalio.exceptions import ApplicationError

from durable_subagents.providers import (
    AnthropicProvider,
    ModelProvider,
    OpenAIProvider,
    clear_provider_cache,
    resolve_provider,
)
from durable_subagents.providers._stream import without_unsent_keys
from durable_subagents.testing import FakeAnthropicServer, FakeOpenAIServer
from durable_subagents.types import Message, ModelRequest, ToolCall, ToolSpec

from ..helpers import CEILING
from ..helpers.providers import recorded_failure

OPENAI_KEY = "sk-test-openai-secret-0123456789"
ANTHROPIC_KEY = "sk-ant-test-secret-0123456789"

GREP = ToolSpec(
    name="grep",
    description="Search files.",
    parameters={
        "type": "object",
        "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
        "required": ["pattern"],
    },
)


def user(text: str) -> Message:
    return Message(role="user", content=text)


def tool_transcript() -> list[Message]:
    """A turn with two parallel tool calls, their results, then steering input."""
    return [
        user("find the functions"),
        Message(
            role="assistant",
            content="Searching.",
            tool_calls=[
                ToolCall(id="call_a", name="grep", arguments={"pattern": "def "}),
                ToolCall(id="call_b", name="read_file", arguments={"path": "missing.py"}),
            ],
        ),
        Message(role="tool", content="a.py:1: def f()", tool_call_id="call_a", tool_name="grep"),
        Message(
            role="tool",
            content="error: no such file",
            tool_call_id="call_b",
            tool_name="read_file",
            is_error=True,
        ),
        user("also look at tests"),
    ]


@pytest.fixture(params=["aiohttp", "httpx"])
def clean_env(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """No provider variables; the SDKs' HTTP transport is each of the two choices."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SUBAGENTS_MODEL_HTTP", request.param)
    clear_provider_cache()


@pytest.fixture
async def openai_srv() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
async def anthropic_srv() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as srv:
        yield srv


@pytest.fixture
async def openai_provider(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, openai_srv: FakeOpenAIServer
) -> AsyncIterator[ModelProvider]:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_srv.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    provider, full, name = resolve_provider("openai:gpt-test")
    assert (provider.name, full, name) == ("openai", "openai:gpt-test", "gpt-test")
    yield provider
    assert isinstance(provider, OpenAIProvider)
    await provider.aclose()
    clear_provider_cache()


@pytest.fixture
async def anthropic_provider(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, anthropic_srv: FakeAnthropicServer
) -> AsyncIterator[ModelProvider]:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic_srv.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    provider, full, name = resolve_provider("anthropic:claude-test")
    assert (provider.name, full, name) == ("anthropic", "anthropic:claude-test", "claude-test")
    yield provider
    assert isinstance(provider, AnthropicProvider)
    await provider.aclose()
    clear_provider_cache()


async def failure(provider: ModelProvider, model: str) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        await provider.complete(ModelRequest(model=model, messages=[user("hi")]))
    return info.value


# ------------------------------------------------------------------------------ openai


async def test_openai_text_reply_with_usage(
    openai_provider: ModelProvider, openai_srv: FakeOpenAIServer
) -> None:
    openai_srv.add_reply(text="Hello there, world.", usage=(12, 3))
    response = await openai_provider.complete(
        ModelRequest(model="gpt-test", system="Be brief.", messages=[user("hi")], max_tokens=99)
    )
    assert response.text == "Hello there, world."
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    assert response.stop_reason == "stop"
    assert response.tool_calls == []
    assert response.model == "gpt-test"
    [body] = openai_srv.requests
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 99
    assert "tools" not in body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert openai_srv.request_headers[0]["authorization"] == f"Bearer {OPENAI_KEY}"
    assert (openai_srv.completed_streams, openai_srv.disconnects) == (1, 0)


async def test_openai_streamed_tool_calls_and_multi_turn_wire_shape(
    openai_provider: ModelProvider, openai_srv: FakeOpenAIServer
) -> None:
    arguments = {"pattern": "def ", "path": "src/some/long/directory"}
    openai_srv.add_reply(
        text="Let me look.",
        tool_calls=[
            {"name": "grep", "arguments": arguments},
            {"name": "read_file", "arguments": {"path": "a.py"}},
        ],
        chunk_delay=0.001,
    )
    openai_srv.add_reply(text="Done.")
    first = await openai_provider.complete(
        ModelRequest(model="gpt-test", messages=[user("go")], tools=[GREP])
    )
    assert first.text == "Let me look."
    assert first.stop_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("grep", arguments),
        ("read_file", {"path": "a.py"}),
    ]
    assert all(c.id.startswith("call_fake_") for c in first.tool_calls)
    assert openai_srv.requests[0]["tools"] == [
        {"type": "function", "function": GREP.model_dump()},
    ]

    second = await openai_provider.complete(
        ModelRequest(model="gpt-test", messages=tool_transcript(), tools=[GREP])
    )
    assert second.text == "Done."
    assert openai_srv.requests[1]["messages"] == [
        {"role": "user", "content": "find the functions"},
        {
            "role": "assistant",
            "content": "Searching.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "grep", "arguments": json.dumps({"pattern": "def "})},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "arguments": json.dumps({"path": "missing.py"}),
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "a.py:1: def f()"},
        {"role": "tool", "tool_call_id": "call_b", "content": "error: no such file"},
        {"role": "user", "content": "also look at tests"},
    ]


async def test_openai_invalid_tool_arguments_are_kept_raw(
    openai_provider: ModelProvider, openai_srv: FakeOpenAIServer
) -> None:
    openai_srv.add_reply(tool_calls=[{"name": "grep", "arguments": '{"pattern": "def'}])
    response = await openai_provider.complete(ModelRequest(model="gpt-test", messages=[user("x")]))
    assert response.tool_calls[0].arguments == {"_raw": '{"pattern": "def'}


@pytest.mark.parametrize(
    ("status", "headers", "delay"),
    [
        (429, {"Retry-After": "7"}, timedelta(seconds=7)),
        (503, {"retry-after-ms": "1500"}, timedelta(seconds=1.5)),
        (500, {}, None),
        (408, {}, None),
    ],
)
async def test_openai_transient_errors_are_retryable(
    openai_provider: ModelProvider,
    openai_srv: FakeOpenAIServer,
    status: int,
    headers: dict[str, str],
    delay: timedelta | None,
) -> None:
    openai_srv.add_error(status, headers=headers)
    error = await failure(openai_provider, "gpt-test")
    assert error.non_retryable is False
    assert error.next_retry_delay == delay
    assert f"HTTP {status}" in error.message


@pytest.mark.parametrize(
    ("status", "advice"),
    [(401, "check OPENAI_API_KEY on the worker"), (400, "will not help"), (404, "model name")],
)
async def test_openai_client_errors_are_not_retryable_and_hide_the_key(
    openai_provider: ModelProvider, openai_srv: FakeOpenAIServer, status: int, advice: str
) -> None:
    server_message = f"Incorrect API key provided: {OPENAI_KEY}; model gpt-test is unknown"
    openai_srv.add_error(status, body={"error": {"message": server_message, "type": "x"}})
    error = await failure(openai_provider, "gpt-test")
    assert error.non_retryable is True
    assert error.type == "ModelRequestError"
    assert error.message.startswith(f"openai API returned HTTP {status}: Incorrect API key")
    assert advice in error.message
    assert OPENAI_KEY not in error.message
    assert "sk-test" not in error.message
    assert OPENAI_KEY not in recorded_failure(error)


async def test_openai_connection_refused_is_retryable(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    provider, _, _ = resolve_provider("openai:gpt-test")
    error = await failure(provider, "gpt-test")
    assert error.non_retryable is False
    assert "connection failed" in error.message


class RawSSEServer:
    """Answers every POST with one fixed SSE body; records each request's client port."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.ports: list[int] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> RawSSEServer:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.ports.append(peer[1] if peer else 0)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(self.body)
        await response.write_eof()
        return response


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"model": "gpt-raw", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def openai_over_raw_sse(
    monkeypatch: pytest.MonkeyPatch, body: bytes, requests: int = 1
) -> tuple[list[Any], RawSSEServer]:
    """``requests`` turns of the OpenAI provider against a server sending ``body``."""
    outcomes: list[Any] = []
    async with RawSSEServer(body) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
        provider, _, _ = resolve_provider("openai:gpt-raw")
        for _ in range(requests):
            try:
                outcomes.append(
                    await provider.complete(ModelRequest(model="gpt-raw", messages=[user("x")]))
                )
            except ApplicationError as err:
                outcomes.append(err)
        await provider.aclose()  # type: ignore[attr-defined]
    clear_provider_cache()
    return outcomes, srv


async def test_openai_reads_server_sent_events_as_the_format_allows(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CRLF lines, comments, ``event:`` and ``id:`` fields, ``data:`` with no space, one
    event's JSON split over two ``data:`` lines, and a last event with no blank line."""
    call = {"index": 0, "id": "call_1", "function": {"name": "grep", "arguments": '{"pat'}}
    more = {"index": 0, "function": {"arguments": 'tern": "x"}'}}
    counts = {"prompt_tokens": 7, "completion_tokens": 2}
    usage = {"model": "gpt-raw", "choices": [], "usage": counts}
    split = json.dumps(_chunk({"content": "Hel"})).replace(", ", ",\r\ndata: ", 1)
    body = (
        ": keep-alive\r\n\r\n"
        f"event: message\r\nid: 1\r\ndata: {split}\r\n\r\n"
        f"data:{json.dumps(_chunk({'content': 'lo'}))}\r\n\r\n"
        f"data: {json.dumps(_chunk({'tool_calls': [call]}))}\n\n"
        f"data: {json.dumps(_chunk({'tool_calls': [more]}, 'tool_calls'))}\n\n"
        f"data: {json.dumps(usage)}"
    ).encode()
    [response], _ = await openai_over_raw_sse(monkeypatch, body)
    assert response.text == "Hello"
    assert response.tool_calls == [ToolCall(id="call_1", name="grep", arguments={"pattern": "x"})]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 2)
    assert (response.stop_reason, response.model) == ("tool_calls", "gpt-raw")


async def test_openai_keeps_the_connection_after_done(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream is read to its end after ``[DONE]``, so the next turn reuses the
    connection instead of opening one per turn."""
    body = (f"data: {json.dumps(_chunk({'content': 'hi'}, 'stop'))}\n\ndata: [DONE]\n\n").encode()
    responses, srv = await openai_over_raw_sse(monkeypatch, body, requests=3)
    assert [r.text for r in responses] == ["hi", "hi", "hi"]
    assert len(srv.ports) == 3 and len(set(srv.ports)) == 1, srv.ports


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"error": {"message": "the server is overloaded", "type": "server_error"}},
            "openai API error during the response: the server is overloaded (will retry)",
        ),
        ("{not json", "openai stream sent an event that is not JSON: '{not json' (will retry)"),
    ],
)
async def test_openai_bad_events_inside_a_stream_are_retryable(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, event: Any, expected: str
) -> None:
    data = event if isinstance(event, str) else json.dumps(event)
    body = f"data: {json.dumps(_chunk({'content': 'partial'}))}\n\ndata: {data}\n\n".encode()
    [error], _ = await openai_over_raw_sse(monkeypatch, body)
    assert isinstance(error, ApplicationError)
    assert (error.type, error.non_retryable) == ("ModelUnavailable", False)
    assert error.message == expected


async def test_openai_cancel_closes_the_stream(
    openai_provider: ModelProvider, openai_srv: FakeOpenAIServer
) -> None:
    openai_srv.add_reply(text="this never finishes", hang=True)
    task = asyncio.create_task(
        openai_provider.complete(ModelRequest(model="gpt-test", messages=[user("x")]))
    )
    await asyncio.wait_for(openai_srv.hanging.wait(), CEILING)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(openai_srv.disconnected.wait(), CEILING)
    assert openai_srv.disconnects == 1
    assert openai_srv.completed_streams == 0


async def test_fake_openai_non_streamed_reply(openai_srv: FakeOpenAIServer) -> None:
    openai_srv.add_reply(text="plain", tool_calls=[{"name": "grep", "arguments": {"a": 1}}])
    client = AsyncOpenAI(base_url=openai_srv.base_url, api_key="k", max_retries=0)
    completion = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    await client.close()
    message = completion.choices[0].message
    assert message.content == "plain"
    assert message.tool_calls is not None
    assert json.loads(message.tool_calls[0].function.arguments) == {"a": 1}  # type: ignore[union-attr]
    # counted from the request (4 characters a token), as the server documents
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == openai_srv.prompt_tokens(openai_srv.requests[-1])
    assert completion.usage.model_dump(exclude_none=True) == openai_srv.usages[-1]


# --------------------------------------------------------------------------- anthropic


async def test_anthropic_text_reply_with_usage(
    anthropic_provider: ModelProvider, anthropic_srv: FakeAnthropicServer
) -> None:
    anthropic_srv.add_reply(text="Hello from Claude.", usage=(21, 4))
    response = await anthropic_provider.complete(
        ModelRequest(
            model="claude-test",
            system="Be brief.",
            messages=[user("hi")],
            max_tokens=77,
            prompt_cache=False,
        )
    )
    assert response.text == "Hello from Claude."
    assert (response.usage.input_tokens, response.usage.output_tokens) == (21, 4)
    assert response.stop_reason == "end_turn"
    assert response.model == "claude-test"
    [body] = anthropic_srv.requests
    assert body["stream"] is True
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 77
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    headers = anthropic_srv.request_headers[0]
    assert ANTHROPIC_KEY in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
    assert "anthropic-version" in headers


async def test_anthropic_streamed_tool_calls_and_multi_turn_wire_shape(
    anthropic_provider: ModelProvider, anthropic_srv: FakeAnthropicServer
) -> None:
    arguments = {"pattern": "def ", "path": "src/some/long/directory"}
    anthropic_srv.add_reply(
        text="Looking.",
        tool_calls=[{"name": "grep", "arguments": arguments}, {"name": "ls", "arguments": {}}],
    )
    first = await anthropic_provider.complete(
        ModelRequest(model="claude-test", messages=[user("go")], tools=[GREP], prompt_cache=False)
    )
    assert first.text == "Looking."
    assert first.stop_reason == "tool_use"
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("grep", arguments), ("ls", {})]
    assert anthropic_srv.requests[0]["tools"] == [
        {"name": "grep", "description": "Search files.", "input_schema": GREP.parameters}
    ]

    await anthropic_provider.complete(
        ModelRequest(model="claude-test", messages=tool_transcript(), prompt_cache=False)
    )
    assert anthropic_srv.requests[1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "find the functions"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Searching."},
                {"type": "tool_use", "id": "call_a", "name": "grep", "input": {"pattern": "def "}},
                {
                    "type": "tool_use",
                    "id": "call_b",
                    "name": "read_file",
                    "input": {"path": "missing.py"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_a",
                    "content": "a.py:1: def f()",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "call_b",
                    "content": "error: no such file",
                    "is_error": True,
                },
                {"type": "text", "text": "also look at tests"},
            ],
        },
    ]


async def test_anthropic_invalid_tool_arguments_are_kept_raw(
    anthropic_provider: ModelProvider, anthropic_srv: FakeAnthropicServer
) -> None:
    anthropic_srv.add_reply(tool_calls=[{"name": "grep", "arguments": '{"pattern": '}])
    response = await anthropic_provider.complete(
        ModelRequest(model="claude-test", messages=[user("x")])
    )
    assert response.tool_calls[0].arguments == {"_raw": '{"pattern": '}


async def test_anthropic_errors(
    anthropic_provider: ModelProvider, anthropic_srv: FakeAnthropicServer
) -> None:
    anthropic_srv.add_error(429, headers={"Retry-After": "3"})
    anthropic_srv.add_error(529)
    anthropic_srv.add_error(401)
    rate_limited = await failure(anthropic_provider, "claude-test")
    assert rate_limited.non_retryable is False
    assert rate_limited.next_retry_delay == timedelta(seconds=3)
    overloaded = await failure(anthropic_provider, "claude-test")
    assert overloaded.non_retryable is False
    unauthorized = await failure(anthropic_provider, "claude-test")
    assert unauthorized.non_retryable is True
    assert unauthorized.type == "ModelRequestError"
    assert "check ANTHROPIC_API_KEY on the worker" in unauthorized.message
    assert ANTHROPIC_KEY not in unauthorized.message
    assert ANTHROPIC_KEY not in recorded_failure(unauthorized)


async def test_anthropic_cancel_closes_the_stream(
    anthropic_provider: ModelProvider, anthropic_srv: FakeAnthropicServer
) -> None:
    anthropic_srv.add_reply(text="never ends", hang=True)
    task = asyncio.create_task(
        anthropic_provider.complete(ModelRequest(model="claude-test", messages=[user("x")]))
    )
    await asyncio.wait_for(anthropic_srv.hanging.wait(), CEILING)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(anthropic_srv.disconnected.wait(), CEILING)
    assert anthropic_srv.disconnects == 1


async def test_fake_anthropic_non_streamed_reply(anthropic_srv: FakeAnthropicServer) -> None:
    anthropic_srv.add_reply(text="plain", tool_calls=[{"name": "grep", "arguments": {"a": 1}}])
    client = AsyncAnthropic(base_url=anthropic_srv.base_url, api_key="k", max_retries=0)
    message = await client.messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    await client.close()
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == 5


# --------------------------------------------------------- what the SDKs make per request


async def test_neither_sdk_makes_an_idempotency_key_it_would_not_send(
    openai_provider: ModelProvider,
    openai_srv: FakeOpenAIServer,
    anthropic_provider: ModelProvider,
    anthropic_srv: FakeAnthropicServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Neither client names an idempotency header, so a key per request is CPU for nothing."""
    made: list[int] = []
    real = uuid.uuid4
    monkeypatch.setattr(uuid, "uuid4", lambda: made.append(1) or real())
    openai_srv.add_reply(text="one")
    anthropic_srv.add_reply(text="two")
    first = await openai_provider.complete(ModelRequest(model="gpt-test", messages=[user("a")]))
    second = await anthropic_provider.complete(
        ModelRequest(model="claude-test", messages=[user("b")])
    )
    assert (first.text, second.text, made) == ("one", "two", [])
    for headers in (*openai_srv.request_headers, *anthropic_srv.request_headers):
        assert not [name for name in headers if "idempotency" in name], headers


async def test_a_client_that_sends_idempotency_keys_keeps_them(
    openai_srv: FakeOpenAIServer,
) -> None:
    """An SDK that starts to send the header gets its keys back: nothing is sent empty."""

    class Keyed(AsyncOpenAI):
        _idempotency_header = "Idempotency-Key"

        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            self._idempotency_header = "Idempotency-Key"

    client = without_unsent_keys(Keyed(api_key="k", base_url=openai_srv.base_url, max_retries=0))
    openai_srv.add_reply(text="kept")
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    await client.close()
    assert openai_srv.request_headers[-1]["idempotency-key"].startswith("stainless-python-retry-")


# ------------------------------------------------------------------ faults, both APIs

IDLE = 0.5


@pytest.fixture(params=["openai", "anthropic"])
async def faulty(
    request: pytest.FixtureRequest, clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[ModelProvider, FakeOpenAIServer | FakeAnthropicServer, str]]:
    """A provider with a short idle timeout and its fake server, for each API."""
    kind = request.param
    server = FakeOpenAIServer() if kind == "openai" else FakeAnthropicServer()
    async with server as srv:
        prefix, model = ("OPENAI", "gpt-test") if kind == "openai" else ("ANTHROPIC", "claude")
        monkeypatch.setenv(f"{prefix}_BASE_URL", srv.base_url)
        monkeypatch.setenv(f"{prefix}_API_KEY", "sk-fault-test-0123456789")
        provider, _, name = resolve_provider(f"{kind}:{model}", idle_timeout=IDLE)
        yield provider, srv, name
        await provider.aclose()  # type: ignore[attr-defined]
        clear_provider_cache()


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("reset", "connection lost during the response"),
        ("truncate", "the answer is incomplete"),
    ],
)
async def test_broken_streams_are_retryable_never_a_turn(
    faulty: tuple[ModelProvider, FakeOpenAIServer | FakeAnthropicServer, str],
    fault: Any,
    expected: str,
) -> None:
    provider, srv, model = faulty
    srv.add_fault(fault, after_chunks=3)
    srv.add_reply(text="the whole answer in several words")
    error = await failure(provider, model)
    assert (error.type, error.non_retryable) == ("ModelUnavailable", False)
    assert expected in error.message
    # the queued reply was not used up by the broken attempt: the retry gets it whole
    response = await provider.complete(ModelRequest(model=model, messages=[user("hi")]))
    assert response.text == "the whole answer in several words"
    assert srv.outcomes == [fault, "200"]


async def test_a_truncated_stream_names_the_missing_end_marker(
    faulty: tuple[ModelProvider, FakeOpenAIServer | FakeAnthropicServer, str],
) -> None:
    provider, srv, model = faulty
    srv.add_fault("truncate", after_chunks=2)
    error = await failure(provider, model)
    missing = "without a finish_reason" if provider.name == "openai" else "without message_stop"
    assert f"ended after 2 event(s) {missing}" in error.message


@pytest.mark.parametrize("after_chunks", [0, 2])
async def test_a_stalled_stream_is_abandoned_after_the_idle_timeout(
    faulty: tuple[ModelProvider, FakeOpenAIServer | FakeAnthropicServer, str],
    after_chunks: int,
) -> None:
    provider, srv, model = faulty
    srv.add_fault("hang", after_chunks=after_chunks)
    started = asyncio.get_running_loop().time()
    error = await failure(provider, model)
    elapsed = asyncio.get_running_loop().time() - started
    # It waited out the idle timeout before giving up (the error names it as the cause;
    # how soon after is bench's to measure).
    assert elapsed >= IDLE
    assert (error.type, error.non_retryable) == ("ModelUnavailable", False)
    assert f"no data from the model for {IDLE:g}s" in error.message
    where = "before the response started" if after_chunks == 0 else "after 2 stream event(s)"
    assert where in error.message
    # the stalled connection was closed, not left open
    await asyncio.wait_for(srv.disconnected.wait(), 2)
    assert srv.disconnects == 1


async def test_a_slow_but_steady_stream_is_not_a_stall(
    faulty: tuple[ModelProvider, FakeOpenAIServer | FakeAnthropicServer, str],
) -> None:
    provider, srv, model = faulty
    srv.add_reply(text="one two three four five six", chunk_delay=IDLE / 3)
    response = await provider.complete(ModelRequest(model=model, messages=[user("hi")]))
    assert response.text == "one two three four five six"


async def test_an_empty_answer_is_retryable_unless_out_of_tokens(
    faulty: tuple[ModelProvider, FakeOpenAIServer | FakeAnthropicServer, str],
) -> None:
    provider, srv, model = faulty
    srv.add_reply(text="")
    empty = await failure(provider, model)
    assert (empty.type, empty.non_retryable) == ("ModelUnavailable", False)
    assert "the model returned an empty response" in empty.message
    out_of_tokens = "length" if provider.name == "openai" else "max_tokens"
    srv.add_reply(text="", stop_reason=out_of_tokens)
    exhausted = await failure(provider, model)
    assert (exhausted.type, exhausted.non_retryable) == ("ModelRequestError", True)
    assert "raise max_tokens" in exhausted.message


async def test_fail_rate_fails_requests_without_using_up_replies() -> None:
    async with FakeOpenAIServer(fail_rate=0.5, seed=3) as srv:
        for word in ("one", "two", "three", "four"):
            srv.add_reply(text=word)
        provider = OpenAIProvider(api_key="k", base_url=srv.base_url)
        answers: list[str] = []
        statuses: set[str] = set()
        while len(answers) < 4:
            try:
                response = await provider.complete(ModelRequest(model="m", messages=[user("x")]))
            except ApplicationError as err:
                assert err.non_retryable is False
                statuses.add(err.message.split("HTTP ")[1][:3])
                continue
            answers.append(response.text)
        await provider.aclose()
    assert answers == ["one", "two", "three", "four"]
    assert statuses == {"500", "503"}  # this seed draws both
    assert srv.outcomes.count("200") == 4
    assert len(srv.outcomes) == len(srv.requests) == len(srv.request_times) > 4
    assert srv.request_times == sorted(srv.request_times)
    async with FakeOpenAIServer(fail_rate=0.5, seed=3) as again:
        again_provider = OpenAIProvider(api_key="k", base_url=again.base_url)
        for _ in srv.outcomes:
            with contextlib.suppress(ApplicationError):
                await again_provider.complete(ModelRequest(model="m", messages=[user("x")]))
        await again_provider.aclose()
    assert again.outcomes == srv.outcomes  # the same seed fails the same requests
