"""Reading Bedrock's streamed answer: AWS event-stream frames around Anthropic's events.

``InvokeModelWithResponseStream`` answers in AWS's binary event-stream framing (a
prelude with the lengths and its CRC32, typed headers, a payload, the message's CRC32),
which botocore's ``EventStreamBuffer`` parses and checks. A ``chunk`` event's payload is
``{"bytes": "<base64>"}``, one Messages API stream event; an ``exception`` message is
an error the service sent inside the stream (throttling, a model error, a validation).
Events come out as plain dicts, as ``SSEEvents`` gives Anthropic's own stream.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from ._errors import context_length, model_request_error, model_unavailable

__all__ = ["EventStreamEvents"]

_NOT_RETRIED = ("validationException",)
"""In-stream exceptions a retry would meet again (the request itself is refused)."""


class EventStreamEvents:
    """A Bedrock response stream's events, as decoded JSON objects.

    Args:
        manager: The SDK's streaming-response context manager for the request.
        provider: Provider name for messages.
        error: The SDK's ``APIError``, raised for an exception sent in the stream.
    """

    def __init__(self, manager: Any, *, provider: str, error: type[Any]) -> None:
        from botocore.eventstream import EventStreamBuffer

        self._manager = manager
        self._provider = provider
        self._error = error
        self._buffer = EventStreamBuffer()
        self._ready: deque[Any] = deque()
        self._response: Any = None
        self._chunks: AsyncIterator[bytes] | None = None

    async def open(self) -> EventStreamEvents:
        """Send the request; the SDK raises its errors (status, connection)."""
        self._response = await self._manager.__aenter__()
        self._chunks = self._response.iter_bytes()
        return self

    async def __aenter__(self) -> EventStreamEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._manager.__aexit__(*exc)

    async def __anext__(self) -> dict[str, Any]:
        from botocore.eventstream import ParserError

        assert self._chunks is not None, "open() first"
        while not self._ready:
            chunk = await self._chunks.__anext__()  # StopAsyncIteration: the stream ended
            self._buffer.add_data(chunk)
            try:
                self._ready.extend(self._buffer)
            except ParserError as exc:
                raise model_unavailable(
                    f"{self._provider} stream sent a frame that is not an event-stream "
                    f"message ({exc}) (will retry)"
                ) from None
        return self._event(self._ready.popleft())

    def _event(self, message: Any) -> dict[str, Any]:
        headers = message.headers
        kind = headers.get(":message-type")
        if kind in ("exception", "error"):
            self._raise(headers, message.payload)
        if kind != "event" or headers.get(":event-type") != "chunk":
            return {}
        try:
            raw = json.loads(message.payload)["bytes"]
            event = json.loads(base64.b64decode(raw, validate=True))
        except (ValueError, KeyError, TypeError, binascii.Error, RecursionError):
            raise model_unavailable(
                f"{self._provider} stream sent a chunk that is not a JSON event: "
                f"{bytes(message.payload[:200])!r} (will retry)"
            ) from None
        return event if isinstance(event, dict) else {}

    def _raise(self, headers: dict[str, Any], payload: bytes) -> None:
        """An exception the service sent in the stream, as the SDK's ``APIError``."""
        code = str(headers.get(":exception-type") or headers.get(":error-code") or "error")
        try:
            body = json.loads(payload)
        except ValueError:
            body = None
        said = body.get("message") if isinstance(body, dict) else None
        message = str(said or headers.get(":error-message") or "error in the stream")
        if code in _NOT_RETRIED and context_length(None, message) is None:
            raise model_request_error(
                f"{self._provider} API error during the response: {code}: {message}; "
                "retrying it will not help"
            )
        raise self._error(
            f"{code}: {message}",
            self._response.http_request,
            body={"type": code, "message": f"{code}: {message}"},
        )
