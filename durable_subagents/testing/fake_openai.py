"""A local server that speaks OpenAI's Chat Completions wire protocol.

Tests (yours too) point the real ``openai`` SDK at it: it plays queued replies,
streams them as Server-Sent Events in small fragments, injects HTTP errors and slow
or hanging streams, and records every request and every client disconnect.

Example:
    >>> async with FakeOpenAIServer() as srv:  # doctest: +SKIP
    ...     srv.add_reply(text="hi", usage=(12, 3))
    ...     client = AsyncOpenAI(base_url=srv.base_url, api_key="test")
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from aiohttp import web

__all__ = ["FakeModelServer", "FakeOpenAIServer", "FakeReply"]


@dataclass
class FakeReply:
    """One queued answer (or HTTP error) of a fake model server."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """``{"name": str, "arguments": dict | str, "id": str (optional)}`` per call.

    String arguments are sent verbatim, so a test can send invalid JSON.
    """
    usage: tuple[int, int] = (10, 5)
    """``(input_tokens, output_tokens)``."""
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


def arguments_text(arguments: Any) -> str:
    """Tool-call arguments as sent: a string is sent as is (even invalid JSON)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def fragments(text: str, size: int = 7) -> list[str]:
    """Cut ``text`` into pieces of ``size`` characters (streamed deltas)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class FakeModelServer:
    """Shared machinery of the fake servers: queue, recording, streaming, faults.

    Args:
        chunk_delay: Default seconds between streamed chunks.
        default_text: Reply text used when no reply is queued.
        host: Interface to listen on (an ephemeral port is chosen).
    """

    route: ClassVar[str] = "/"

    def __init__(
        self,
        *,
        chunk_delay: float = 0.0,
        default_text: str = "Hello from the fake model server.",
        host: str = "127.0.0.1",
    ) -> None:
        self.chunk_delay = chunk_delay
        self.default_text = default_text
        self.host = host
        self.port = 0
        self.requests: list[dict[str, Any]] = []
        """Every request body, parsed."""
        self.request_headers: list[dict[str, str]] = []
        """Every request's headers (lower-case names)."""
        self.disconnects = 0
        """Streamed responses the client closed before the end."""
        self.completed_streams = 0
        self.disconnected = asyncio.Event()
        """Set at the first client disconnect during a stream."""
        self.hanging = asyncio.Event()
        """Set when a ``hang`` reply has sent its first chunk and stalls."""
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
        usage: tuple[int, int] = (10, 5),
        *,
        stop_reason: str | None = None,
        chunk_delay: float | None = None,
        hang: bool = False,
    ) -> None:
        """Queue a successful reply; replies are played in order, one per request."""
        self._replies.append(
            FakeReply(
                text=text,
                tool_calls=list(tool_calls or []),
                usage=usage,
                stop_reason=stop_reason,
                chunk_delay=chunk_delay,
                hang=hang,
            )
        )

    def add_error(
        self, status: int, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        """Queue an HTTP error; ``body`` defaults to the API's own error shape."""
        self._replies.append(FakeReply(status=status, body=body, headers=dict(headers or {})))

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

    def render(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """The non-streamed JSON answer (overridden per API)."""
        raise NotImplementedError

    def events(self, reply: FakeReply, body: dict[str, Any]) -> Iterator[bytes]:
        """The streamed SSE frames (overridden per API)."""
        raise NotImplementedError

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.request_headers.append({k.lower(): v for k, v in request.headers.items()})
        reply = self._replies.popleft() if self._replies else FakeReply(text=self.default_text)
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
        await response.prepare(request)
        delay = self.chunk_delay if reply.chunk_delay is None else reply.chunk_delay
        try:
            for index, frame in enumerate(self.events(reply, body)):
                if index and delay:
                    await asyncio.sleep(delay)
                await response.write(frame)
                if reply.hang:
                    self.hanging.set()
                    await self._until_disconnect(request)
                    self._disconnect()
                    return response
            await response.write_eof()
            self.completed_streams += 1
        except ConnectionError:
            self._disconnect()
        except asyncio.CancelledError:
            self._disconnect()
            raise
        return response

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
    """

    route = "/v1/chat/completions"

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

    def _usage(self, reply: FakeReply) -> dict[str, int]:
        prompt, completion = reply.usage
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
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
            "usage": self._usage(reply),
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
        words = reply.text.split(" ")
        for i, word in enumerate(words if reply.text else []):
            yield chunk({"content": word if i == len(words) - 1 else word + " "})
        for index, (cid, name, args) in enumerate(self._calls(reply)):
            head = {"id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
            yield chunk({"tool_calls": [{"index": index, **head}]})
            for piece in fragments(args):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, self._finish(reply))
        if (body.get("stream_options") or {}).get("include_usage"):
            yield _sse({**base, "choices": [], "usage": self._usage(reply)})
        yield b"data: [DONE]\n\n"
