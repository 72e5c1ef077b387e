"""Reading a model's streamed answer safely: stall detection and completeness checks.

A stream is only a full turn when the API said it finished (OpenAI's
``finish_reason``, Anthropic's ``message_stop``) and it said something (text or tool
calls). Anything less is a retryable ``ModelUnavailable``: Temporal retries the turn
instead of the task taking half an answer for a whole one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anthropic
import httpx2
import openai

from durable_subagents.types import ModelResponse

from ._errors import empty_response_error, stalled_error, to_application_error, truncated_error

__all__ = ["StreamReader", "within"]

T = TypeVar("T")

_STREAM_ERRORS = (openai.OpenAIError, anthropic.AnthropicError, httpx2.HTTPError)
"""What reading a stream may raise: the SDKs wrap some transport errors, not all."""


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


class StreamReader:
    """Opens a streamed response and feeds its events on, with an idle watchdog.

    Args:
        provider: Provider name for messages.
        key_env: The variable holding the provider's key (named in 401/403 advice).
        secrets: Strings (API keys) that must never appear in a message.
        idle_timeout: Seconds without a byte of response headers or a stream event
            after which the attempt is abandoned (None: no limit).
    """

    def __init__(
        self,
        *,
        provider: str,
        key_env: str,
        secrets: list[str],
        idle_timeout: float | None,
    ) -> None:
        self.provider = provider
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
        except _STREAM_ERRORS as exc:
            raise to_application_error(
                exc,
                provider=self.provider,
                key_env=self.key_env,
                secrets=self.secrets,
                streaming=opened,
            ) from None

    async def _within(self, awaitable: Awaitable[Any]) -> Any:
        return await within(
            awaitable,
            self.idle_timeout,
            lambda: stalled_error(self.provider, self.idle_timeout or 0.0, self.events),
        )

    def check(self, response: ModelResponse, *, finished: bool, what: str) -> ModelResponse:
        """Refuse a truncated or empty answer (``what`` names the missing end marker)."""
        if not finished:
            raise truncated_error(self.provider, what, self.events)
        if not response.text.strip() and not response.tool_calls:
            raise empty_response_error(self.provider, response.stop_reason)
        return response
