"""Reading a model's streamed answer safely: stall detection and completeness checks.

A stream is only a full turn when the API said it finished (OpenAI's
``finish_reason``, Anthropic's ``message_stop``) and it said something (text or tool
calls). Anything less is a retryable ``ModelUnavailable``: Temporal retries the turn
instead of the task taking half an answer for a whole one.
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from durable_subagents.types import ModelResponse

from ._errors import (
    Advice,
    empty_response_error,
    loaded_classes,
    model_unavailable,
    stalled_error,
    to_application_error,
    truncated_error,
)
from ._text import encodable_response

if TYPE_CHECKING:
    import anthropic
    import openai

__all__ = ["PerLoop", "SSEEvents", "StreamReader", "use_aiohttp", "within"]

T = TypeVar("T")
C = TypeVar("C")

_STREAM_ERRORS = (
    "openai.OpenAIError",
    "anthropic.AnthropicError",
    "httpx2.HTTPError",
    "aiohttp.ClientError",
)
"""What reading a stream may raise: the SDKs wrap some transport errors, not all, and
the aiohttp transport maps most of its own to httpx's (looked up among the modules
imported, see ``loaded_classes``)."""


async def within(
    awaitable: Awaitable[T], seconds: float | None, error: Callable[[], Exception]
) -> T:
    """Await ``awaitable`` for at most ``seconds``, else cancel it and raise ``error()``.

    Only this limit turns into ``error()``: a cancellation from outside (the
    activity's) stays a cancellation.
    """
    if seconds is None:
        return await awaitable
    try:
        async with asyncio.timeout(seconds) as limit:
            return await awaitable
    except TimeoutError:
        if limit.expired():
            raise error() from None
        raise


def use_aiohttp() -> bool:
    """Whether the model SDKs send over aiohttp (the default) or their own httpx pool.

    ``SUBAGENTS_MODEL_HTTP=httpx`` picks the SDKs' default transport. aiohttp took about
    half the CPU per streamed request with hundreds of requests in flight: httpx's pool
    probes every idle connection's socket on each request.
    """
    return os.environ.get("SUBAGENTS_MODEL_HTTP", "").strip().lower() != "httpx"


def without_unsent_keys(client: C) -> C:
    """``client`` with no idempotency key made for a request that would not send it.

    Both SDKs make a random key (``uuid4``) per request for their retries, and send it
    only where the client names an idempotency header, which neither the OpenAI nor
    the Anthropic client does: the key, a read of ``os.urandom`` and its formatting,
    was 1 % of a worker's CPU per turn. A client that names a header keeps its keys.
    """
    if getattr(client, "_idempotency_header", "unknown") is None:
        client._idempotency_key = str  # type: ignore[attr-defined]  # str() == ""
    return client


class PerLoop(Generic[C]):
    """One SDK client per running event loop.

    An HTTP session belongs to the loop it was made in, and a process may run more
    than one loop in turn.
    """

    def __init__(self, make: Callable[[], C]) -> None:
        self._make = make
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, C] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> C:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = without_unsent_keys(self._make())
        return client

    async def aclose(self) -> None:
        """Close the running loop's client, if it made one."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()  # type: ignore[attr-defined]


class SSEEvents:
    """A streamed response's server-sent events, as decoded JSON objects.

    The SDK sends the request (auth, headers, status errors) and hands over the raw
    response (``with_streaming_response``); this reads its events: ``data:`` lines up
    to a blank line make one event, ``data: [DONE]`` ends the stream, and an event
    carrying ``error`` is an error sent inside the response (raised as ``error``, the
    SDK's ``APIError``). Plain dicts cost a third of the SDK's event models, which
    dominated a busy worker's CPU.
    """

    def __init__(
        self, manager: Any, *, provider: str, error: type[openai.APIError | anthropic.APIError]
    ) -> None:
        self._manager = manager
        self._provider = provider
        self._error = error
        self._response: Any = None
        self._lines: AsyncIterator[str] | None = None

    async def open(self) -> SSEEvents:
        """Send the request; the SDK raises its errors (status, connection)."""
        self._response = await self._manager.__aenter__()
        self._lines = self._response.iter_lines()
        return self

    async def __aenter__(self) -> SSEEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._manager.__aexit__(*exc)

    async def __anext__(self) -> dict[str, Any]:
        assert self._lines is not None, "open() first"
        data: list[str] = []
        async for line in self._lines:
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith("data: ") else line[5:])
            elif not line and data:
                break
        if not data:
            raise StopAsyncIteration
        text = "\n".join(data)
        if text.startswith("[DONE]"):
            # read to the end: a response closed early also closes its connection
            async for _ in self._lines:
                pass
            raise StopAsyncIteration
        return self._event(text)

    def _event(self, data: str) -> dict[str, Any]:
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):
            raise model_unavailable(
                f"{self._provider} stream sent an event that is not JSON: {data[:200]!r} "
                "(will retry)"
            ) from None
        if not isinstance(event, dict):
            return {}
        error = event.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else None
            raise self._error(
                message if isinstance(message, str) and message else "error in the stream",
                self._response.http_request,
                body=error,
            )
        return event


class StreamReader:
    """Opens a streamed response and feeds its events on, with an idle watchdog.

    Args:
        provider: Provider name for messages.
        key_env: The variable holding the provider's key (named in 401/403 advice).
        secrets: Strings (API keys) that must never appear in a message.
        idle_timeout: Seconds without a byte of response headers or a stream event
            after which the attempt is abandoned (None: no limit).
        advice: The provider's advice for a refused request (see ``to_application_error``).
    """

    def __init__(
        self,
        *,
        provider: str,
        key_env: str,
        secrets: list[str],
        idle_timeout: float | None,
        advice: Advice | None = None,
    ) -> None:
        self.provider = provider
        self.advice = advice
        self.key_env = key_env
        self.secrets = secrets
        self.idle_timeout = idle_timeout
        self.events = 0
        """Events received so far."""

    async def read(
        self, open_stream: Callable[[], Awaitable[Any]], on_event: Callable[[Any], None]
    ) -> None:
        """Open the stream and pass every event to ``on_event`` until it ends.

        Raises:
            temporalio.exceptions.ApplicationError: The API failed, the connection was
                lost, or no data came for ``idle_timeout`` seconds (the connection is
                then closed).
        """
        opened = False
        try:
            stream = await self._within(open_stream())
            opened = True
            async with stream:
                while True:
                    try:
                        event = await self._within(stream.__anext__())
                    except StopAsyncIteration:
                        return
                    self.events += 1
                    on_event(event)
        except Exception as exc:
            if not isinstance(exc, loaded_classes(*_STREAM_ERRORS)):
                raise
            raise to_application_error(
                exc,
                provider=self.provider,
                key_env=self.key_env,
                secrets=self.secrets,
                streaming=opened,
                advice=self.advice,
            ) from None

    async def _within(self, awaitable: Awaitable[Any]) -> Any:
        return await within(
            awaitable,
            self.idle_timeout,
            lambda: stalled_error(self.provider, self.idle_timeout or 0.0, self.events),
        )

    def check(self, response: ModelResponse, *, finished: bool, what: str) -> ModelResponse:
        """Refuse a truncated or empty answer (``what`` names the missing end marker).

        Returns:
            The answer, with lone surrogates replaced (see ``_text``): the turn is
            carried, never retried for text no payload can hold.
        """
        response = encodable_response(response)
        if not finished:
            raise truncated_error(self.provider, what, self.events)
        if not response.text.strip() and not response.tool_calls:
            raise empty_response_error(self.provider, response.stop_reason)
        return response
