"""A local server that speaks OpenAI's Chat Completions wire protocol.

Tests (yours too) point the real ``openai`` SDK at it: it plays queued replies,
streams them as Server-Sent Events in small fragments, injects HTTP errors, random
5xx failures and stream faults (reset, truncated, hanging), and records every
request, when it came and what it got, and every client disconnect. Usage reports
reasoning tokens as the API does (``completion_tokens_details.reasoning_tokens``, part
of ``completion_tokens``), by the request's ``reasoning_effort``.

Example:
    >>> async with FakeOpenAIServer() as srv:  # doctest: +SKIP
    ...     srv.add_reply(text="hi", usage=(12, 3))
    ...     client = AsyncOpenAI(base_url=srv.base_url, api_key="test")
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Self

from aiohttp import web

from ._prompt_cache import OpenAICache, tokens
from ._wire_images import openai_problem

__all__ = [
    "FAULTS",
    "REASONING_EFFORTS",
    "REASONING_TOKENS",
    "FakeModelServer",
    "FakeOpenAIServer",
    "FakeReply",
    "Fault",
]

Fault = Literal["reset", "truncate", "hang"]
"""A stream fault: ``reset`` aborts the TCP connection (RST), ``truncate`` ends the
response cleanly but early (no finish reason / ``message_stop``), ``hang`` stalls
without closing until the client gives up."""

FAULTS: tuple[Fault, ...] = ("reset", "truncate", "hang")

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
"""The ``reasoning_effort`` values the fake OpenAI server takes (others get the API's 400)."""
REASONING_TOKENS = {"none": 0, "minimal": 16, "low": 64, "medium": 256, "high": 1024, "xhigh": 4096}
"""Reasoning tokens a reply reports for each effort, unless it sets its own."""


@dataclass
class FakeReply:
    r"""One queued answer (or HTTP error, or stream fault) of a fake model server.

    Every string (text, call ids, names, arguments, error bodies) is sent as JSON with
    non-ASCII characters escaped, so a lone surrogate (``"\ud800"`` in Python) goes
    out as the escape ``\ud800``, as a real server may send it.
    """

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """``{"name": str, "arguments": dict | str, "id": str (optional)}`` per call.

    String arguments are sent verbatim, so a test can send invalid JSON.
    """
    usage: tuple[int, int] | None = None
    """``(input_tokens, output_tokens)`` to report; None: counted from the request and
    the reply, with the prompt cache applied (see ``_prompt_cache``)."""
    reasoning_tokens: int | None = None
    """Tokens the model reasoned for, on top of the output (OpenAI reports them within
    ``completion_tokens``); None: ``REASONING_TOKENS`` of the request's
    ``reasoning_effort`` (0 without one)."""
    deltas: list[str] | None = None
    """The text streamed in exactly these pieces (default: word by word), e.g. a
    surrogate pair cut in two; ``text`` is then their concatenation."""
    thinking: list[str | None] | None = None
    """Anthropic: the thinking blocks before the answer when the request asks for
    thinking, a string per ``thinking`` block and None per ``redacted_thinking`` block
    (``[]``: none); None: the server's ``default_thinking``. Never sent to a request
    that does not ask for thinking."""
    stop_reason: str | None = None
    """Overrides the natural finish/stop reason."""
    chunk_delay: float | None = None
    """Seconds between streamed chunks (None: the server's default)."""
    hang: bool = False
    """Send the first chunk, then stall until the client disconnects."""
    status: int = 200
    body: Any = None
    """Error body (a dict is sent as JSON, a string as is)."""
    headers: dict[str, str] = field(default_factory=dict)
    fault: Fault | None = None
    """Break the stream after ``after_chunks`` frames (see ``Fault``)."""
    after_chunks: int = 1
    """Frames sent before the fault; 0: before the status line and headers."""
    replay_next: bool = False
    """Stream the next queued reply's content (without consuming it) up to the fault."""
    reported: dict[str, Any] = field(default_factory=dict)
    """The usage object the server sends for it (set when the request is answered)."""


def arguments_text(arguments: Any) -> str:
    """Tool-call arguments as sent: a string is sent as is (even invalid JSON)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def fragments(text: str, size: int = 7) -> list[str]:
    """Cut ``text`` into pieces of ``size`` characters (streamed deltas)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def text_deltas(reply: FakeReply) -> list[str]:
    """The reply's text as streamed: its ``deltas``, or word by word."""
    if reply.deltas is not None:
        return reply.deltas
    if not reply.text:
        return []
    words = reply.text.split(" ")
    return [w if i == len(words) - 1 else w + " " for i, w in enumerate(words)]


class FakeModelServer:
    """Shared machinery of the fake servers: queue, recording, streaming, faults.

    Each request takes the reply ``responder`` returns for it, else the next queued
    entry (``add_reply``, ``add_error``, ``add_fault``), else a reply with
    ``default_text``. A request longer than ``context_window`` gets the API's own
    context-length error instead (and the queue is left as it was). Usage is counted
    from the request and the reply, with each API's prompt caching applied (see
    ``_prompt_cache``), unless a reply names its own.

    Args:
        chunk_delay: Default seconds between streamed chunks.
        default_text: Reply text used when no reply is queued.
        host: Interface to listen on (an ephemeral port is chosen).
        fail_rate: Fraction of requests (0-1) answered with a random status from
            ``fail_statuses`` before the queue is looked at, so the failed request's
            retry gets the reply it would have got (load tests, chaos).
        fail_statuses: The statuses ``fail_rate`` picks from.
        seed: Seed of the ``fail_rate`` draws (same seed, same failures).
        context_window: The model's context window in tokens (None: no limit).
        responder: Called with each request's body; the reply it returns answers it
            (None: the queue does).
        cache_ttl: Seconds a prompt cache entry lives after its last use.
    """

    route: ClassVar[str] = "/"

    def __init__(
        self,
        *,
        chunk_delay: float = 0.0,
        default_text: str = "Hello from the fake model server.",
        host: str = "127.0.0.1",
        fail_rate: float = 0.0,
        fail_statuses: Sequence[int] = (500, 503),
        seed: int | None = None,
        context_window: int | None = None,
        responder: Callable[[dict[str, Any]], FakeReply | None] | None = None,
        cache_ttl: float = 300.0,
    ) -> None:
        if not 0.0 <= fail_rate <= 1.0:
            raise ValueError(f"fail_rate must be within 0-1, not {fail_rate}")
        self.chunk_delay = chunk_delay
        self.default_text = default_text
        self.host = host
        self.port = 0
        self.fail_rate = fail_rate
        self.fail_statuses = tuple(fail_statuses)
        self._rng = random.Random(seed)
        self.requests: list[dict[str, Any]] = []
        """Every request body, parsed."""
        self.request_headers: list[dict[str, str]] = []
        """Every request's headers (lower-case names)."""
        self.request_times: list[float] = []
        """When each request arrived (``time.monotonic()``)."""
        self.sent: list[tuple[float, bytes]] = []
        """Every streamed frame and when it was written (``time.monotonic()``)."""
        self.outcomes: list[str] = []
        """What each request got: ``"200"``, ``"429"``... or a fault name."""
        self.disconnects = 0
        """Streamed responses the client closed before the end."""
        self.completed_streams = 0
        self.disconnected = asyncio.Event()
        """Set at the first client disconnect during a stream."""
        self.hanging = asyncio.Event()
        """Set when a ``hang`` reply or fault starts to stall."""
        self.context_window = context_window
        self.responder = responder
        self.cache_ttl = cache_ttl
        self.usages: list[dict[str, Any]] = []
        """The usage object sent with each request answered whole, in order."""
        self._replies: deque[FakeReply] = deque()
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._ids = itertools.count(1)

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL to give the SDK client."""
        return self.url

    def add_reply(
        self,
        text: str = "",
        tool_calls: list[dict[str, Any]] | None = None,
        usage: tuple[int, int] | None = None,
        *,
        deltas: list[str] | None = None,
        stop_reason: str | None = None,
        chunk_delay: float | None = None,
        hang: bool = False,
        reasoning_tokens: int | None = None,
        thinking: list[str | None] | None = None,
    ) -> None:
        """Queue a successful reply; replies are played in order, one per request.

        ``text=""`` without tool calls is an empty answer (a finish reason, no content).
        ``deltas`` streams the text in exactly those pieces (``text`` is their join).
        ``reasoning_tokens`` is what the usage reports as spent reasoning, ``thinking``
        the thinking blocks the Anthropic server sends (see ``FakeReply``).
        """
        self._replies.append(
            FakeReply(
                text="".join(deltas) if deltas is not None else text,
                tool_calls=list(tool_calls or []),
                usage=usage,
                deltas=None if deltas is None else list(deltas),
                stop_reason=stop_reason,
                chunk_delay=chunk_delay,
                hang=hang,
                reasoning_tokens=reasoning_tokens,
                thinking=None if thinking is None else list(thinking),
            )
        )

    def add_error(
        self, status: int, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        """Queue an HTTP error; ``body`` defaults to the API's own error shape."""
        self._replies.append(FakeReply(status=status, body=body, headers=dict(headers or {})))

    def add_fault(self, fault: Fault, *, after_chunks: int = 1) -> None:
        """Queue a broken stream: ``after_chunks`` frames of the next reply, then ``fault``.

        The frames are those of the next queued reply (or of the default reply), which
        stays queued for the retry. ``after_chunks=0`` breaks before the headers.

        Example:
            >>> srv.add_fault("reset", after_chunks=2)  # doctest: +SKIP
            >>> srv.add_reply(text="the full answer")  # the retry gets it whole
        """
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; use one of {', '.join(FAULTS)}")
        if after_chunks < 0:
            raise ValueError("after_chunks must be >= 0")
        self._replies.append(FakeReply(fault=fault, after_chunks=after_chunks, replay_next=True))

    async def start(self) -> None:
        """Listen on an ephemeral port."""
        app = web.Application()
        app.router.add_post(self.route, self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def close(self) -> None:
        """Stop the server (hanging streams are released first)."""
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def next_id(self, prefix: str) -> str:
        """A fresh response/call id."""
        return f"{prefix}{next(self._ids)}"

    def error_body(self, status: int) -> Any:
        """The default error body for ``status`` (overridden per API)."""
        return {"error": {"message": f"fake error {status}"}}

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """Every input token of a request, as this server counts them (per API)."""
        raise NotImplementedError

    def too_long(self, body: dict[str, Any], tokens: int) -> tuple[int, Any] | None:
        """The API's error for a request over ``context_window``: status and body."""
        raise NotImplementedError

    def check(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """An error the API would answer ``body`` with before any reply (per API)."""
        if self.context_window is None:
            return None
        tokens = self.prompt_tokens(body)
        return self.too_long(body, tokens) if tokens > self.context_window else None

    def usage(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """The usage object of a reply to ``body`` (per API; the cache is updated)."""
        raise NotImplementedError

    @staticmethod
    def output_tokens(reply: FakeReply) -> int:
        """The reply's output tokens as counted: its text and calls, 4 characters a token."""
        calls = "".join(
            c["name"] + arguments_text(c.get("arguments", {})) for c in reply.tool_calls
        )
        return max(1, -(-len(reply.text + calls) // 4))

    def render(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """The non-streamed JSON answer (overridden per API)."""
        raise NotImplementedError

    def events(self, reply: FakeReply, body: dict[str, Any]) -> Iterator[bytes]:
        """The streamed SSE frames (overridden per API)."""
        raise NotImplementedError

    def _next_reply(self) -> FakeReply:
        if self.fail_rate and self._rng.random() < self.fail_rate:
            return FakeReply(status=self._rng.choice(self.fail_statuses))
        reply = self._replies.popleft() if self._replies else FakeReply(text=self.default_text)
        if reply.replay_next:
            content = next(
                (r for r in self._replies if r.status == 200 and not r.replay_next),
                FakeReply(text=self.default_text),
            )
            reply = replace(content, fault=reply.fault, after_chunks=reply.after_chunks, hang=False)
        elif reply.hang:
            reply = replace(reply, fault="hang", after_chunks=1)
        return reply

    def refusal(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """The API's error for a request it would refuse as malformed (overridden per API)."""
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.request_headers.append({k.lower(): v for k, v in request.headers.items()})
        self.request_times.append(time.monotonic())
        refused = self.refusal(body) or self.check(body)
        if refused is not None:
            self.outcomes.append(str(refused[0]))
            return web.json_response(refused[1], status=refused[0])
        answer = self.responder(body) if self.responder is not None else None
        if answer is not None and answer.hang:
            answer = replace(answer, fault="hang", after_chunks=1)
        reply = answer or self._next_reply()
        self.outcomes.append(reply.fault or str(reply.status))
        if reply.status == 200:
            reply = replace(reply, reported=self.usage(reply, body))
            if reply.fault is None:
                self.usages.append(reply.reported)
        if reply.status != 200:
            payload = reply.body if reply.body is not None else self.error_body(reply.status)
            if isinstance(payload, str):
                return web.Response(status=reply.status, text=payload, headers=reply.headers)
            return web.json_response(payload, status=reply.status, headers=reply.headers)
        if not body.get("stream"):
            return web.json_response(self.render(reply, body))
        return await self._stream(request, reply, body)

    async def _stream(
        self, request: web.Request, reply: FakeReply, body: dict[str, Any]
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        delay = self.chunk_delay if reply.chunk_delay is None else reply.chunk_delay
        try:
            if reply.fault and reply.after_chunks == 0:
                await self._fault(request, reply.fault)
                return response
            await response.prepare(request)
            for index, frame in enumerate(self.events(reply, body)):
                if index and delay:
                    await asyncio.sleep(delay)
                await response.write(frame)
                self.sent.append((time.monotonic(), frame))
                if reply.fault and index + 1 >= reply.after_chunks:
                    await self._fault(request, reply.fault)
                    if reply.fault == "truncate":
                        await response.write_eof()
                    return response
            await response.write_eof()
            self.completed_streams += 1
        except ConnectionError:
            self._disconnect()
        except asyncio.CancelledError:
            self._disconnect()
            raise
        return response

    async def _fault(self, request: web.Request, fault: Fault) -> None:
        if fault == "hang":
            self.hanging.set()
            await self._until_disconnect(request)
            self._disconnect()
        elif fault == "reset":
            await asyncio.sleep(0.05)  # let the client read what was sent
            transport = request.transport
            if transport is not None:
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    # SO_LINGER 0: close() sends a TCP RST instead of a FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                transport.abort()

    async def _until_disconnect(self, request: web.Request) -> None:
        while not self._closing.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                return
            await asyncio.sleep(0.01)

    def _disconnect(self) -> None:
        if self._closing.is_set():
            return
        self.disconnects += 1
        self.disconnected.set()


def _sse(data: Any) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


class FakeOpenAIServer(FakeModelServer):
    """Speaks ``POST /v1/chat/completions``, streamed (SSE) and not.

    ``base_url`` ends in ``/v1``, as ``AsyncOpenAI(base_url=...)`` expects. Text is
    streamed word by word and tool-call arguments in 7-character fragments; the usage
    chunk is sent when the request asks for it with ``stream_options.include_usage``.
    Prompts are cached automatically, as OpenAI does (see ``_prompt_cache``).
    """

    route = "/v1/chat/completions"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._cache = OpenAICache(self.cache_ttl)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"{self.url}/v1"

    def error_body(self, status: int) -> Any:
        """OpenAI's error shape."""
        kind = {401: "invalid_request_error", 429: "rate_limit_exceeded"}.get(status, "error")
        return {
            "error": {"message": f"fake error {status}", "type": kind, "param": None, "code": None}
        }

    def _finish(self, reply: FakeReply) -> str:
        return reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")

    def _calls(self, reply: FakeReply) -> list[tuple[str, str, str]]:
        return [
            (
                c.get("id") or self.next_id("call_fake_"),
                c["name"],
                arguments_text(c.get("arguments", {})),
            )
            for c in reply.tool_calls
        ]

    def refusal(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """A 400 with the API's message for a ``reasoning_effort`` it does not know.

        Or for messages it would refuse: a tool message with other than text parts, an
        image it does not take, a call's result missing after its call (``_wire_images``).
        """
        problem = openai_problem(body.get("messages") or [])
        if problem is not None:
            error = {"message": problem, "type": "invalid_request_error", "param": "messages"}
            return 400, {"error": {**error, "code": None}}
        effort = body.get("reasoning_effort")
        if effort is None or effort in REASONING_EFFORTS:
            return None
        supported = ", ".join(f"'{e}'" for e in REASONING_EFFORTS)
        message = (
            f"Invalid value: '{effort}'. Supported values are: {supported}."
            if isinstance(effort, str)
            else f"Invalid type for 'reasoning_effort': expected a string, but got {effort!r}."
        )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "reasoning_effort",
            "code": "invalid_value" if isinstance(effort, str) else "invalid_type",
        }
        return 400, {"error": error}

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """Every prompt token of a request: its tools and messages."""
        text, _ = OpenAICache.render(body)
        return tokens(text)

    def too_long(self, body: dict[str, Any], tokens: int) -> tuple[int, Any]:
        """OpenAI's ``context_length_exceeded`` error."""
        _, tool_tokens = OpenAICache.render(body)
        message = (
            f"This model's maximum context length is {self.context_window} tokens. "
            f"However, your messages resulted in {tokens} tokens"
        )
        if tool_tokens:
            message += (
                f" ({tokens - tool_tokens} in the messages, {tool_tokens} in the functions). "
                "Please reduce the length of the messages or functions."
            )
        else:
            message += ". Please reduce the length of the messages."
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        return 400, {"error": error}

    def usage(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """Chat Completions usage: ``prompt_tokens`` includes the cached tokens."""
        if reply.usage is not None:
            prompt, completion, cached = *reply.usage, 0
        else:
            prompt, cached = self._cache.use(body)
            completion = self.output_tokens(reply)
        reasoning = reply.reasoning_tokens
        if reasoning is None:
            reasoning = REASONING_TOKENS.get(str(body.get("reasoning_effort")), 0)
        completion += reasoning
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def render(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """A ``chat.completion`` object."""
        calls = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in self._calls(reply)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": self.next_id("chatcmpl-fake-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish(reply)}],
            "usage": reply.reported,
        }

    def events(self, reply: FakeReply, body: dict[str, Any]) -> Iterator[bytes]:
        """``chat.completion.chunk`` frames, then ``[DONE]``."""
        base = {
            "id": self.next_id("chatcmpl-fake-"),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return _sse({**base, "choices": [choice]})

        yield chunk({"role": "assistant", "content": ""})
        for piece in text_deltas(reply):
            yield chunk({"content": piece})
        for index, (cid, name, args) in enumerate(self._calls(reply)):
            head = {"id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
            yield chunk({"tool_calls": [{"index": index, **head}]})
            for piece in fragments(args):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, self._finish(reply))
        if (body.get("stream_options") or {}).get("include_usage"):
            yield _sse({**base, "choices": [], "usage": reply.reported})
        yield b"data: [DONE]\n\n"
