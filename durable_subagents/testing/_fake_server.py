"""What the fake model servers share: replies queued or made, streaming, faults, records.

Each fake API (``fake_openai``, ``fake_anthropic``...) is a ``FakeModelServer`` that says
how its API renders a reply, streams it, counts usage and refuses a request.
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

__all__ = [
    "FAULTS",
    "FakeModelServer",
    "FakeReply",
    "Fault",
    "arguments_text",
    "fragments",
    "text_deltas",
]


Fault = Literal["reset", "truncate", "hang"]
"""A stream fault: ``reset`` aborts the TCP connection (RST), ``truncate`` ends the
response cleanly but early (no finish reason / ``message_stop``), ``hang`` stalls
without closing until the client gives up."""

FAULTS: tuple[Fault, ...] = ("reset", "truncate", "hang")


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
    """The path requests come to (aiohttp's syntax: it may hold ``{variables}``)."""
    stream_content_type: ClassVar[str] = "text/event-stream"

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

    def gate(self, request: web.Request) -> tuple[int, Any] | None:
        """The service's error for a request it refuses unread (its auth; per wire)."""
        return None

    async def read_body(self, request: web.Request) -> dict[str, Any]:
        """The request as the API's logic reads it (a wire may carry parts in its path)."""
        body: dict[str, Any] = await request.json()
        return body

    def error_response(self, status: int, payload: Any, headers: dict[str, str]) -> web.Response:
        """An error as the wire sends it (a string as is, else JSON)."""
        if isinstance(payload, str):
            return web.Response(status=status, text=payload, headers=headers)
        return web.json_response(payload, status=status, headers=headers)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        gated = self.gate(request)
        if gated is not None:
            self.outcomes.append(str(gated[0]))
            return self.error_response(gated[0], gated[1], {})
        body = await self.read_body(request)
        self.requests.append(body)
        self.request_headers.append({k.lower(): v for k, v in request.headers.items()})
        self.request_times.append(time.monotonic())
        refused = self.refusal(body) or self.check(body)
        if refused is not None:
            self.outcomes.append(str(refused[0]))
            return self.error_response(refused[0], refused[1], {})
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
            return self.error_response(reply.status, payload, reply.headers)
        if not body.get("stream"):
            return web.json_response(self.render(reply, body))
        return await self._stream(request, reply, body)

    async def _stream(
        self, request: web.Request, reply: FakeReply, body: dict[str, Any]
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": self.stream_content_type, "Cache-Control": "no-cache"}
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
