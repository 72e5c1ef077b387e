"""Map model SDK exceptions to Temporal ``ApplicationError``.

Temporal owns retries: the SDK clients are built with ``max_retries=0`` and every
failure becomes an ``ApplicationError`` whose ``non_retryable`` flag and
``next_retry_delay`` tell Temporal's retry policy what to do.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from ._text import encodable

if TYPE_CHECKING:
    import anthropic
    import openai

__all__ = [
    "CONTEXT_LENGTH_ERROR",
    "RETRYABLE_STATUS",
    "Advice",
    "context_length",
    "empty_response_error",
    "loaded_classes",
    "missing_key_error",
    "model_request_error",
    "model_unavailable",
    "retry_after",
    "stalled_error",
    "to_application_error",
    "truncated_error",
]

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""4xx statuses worth retrying; every 5xx is retried too."""

_MAX_RETRY_AFTER = timedelta(hours=1)
_SECRET_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")

_REFUSALS = {"content_filter", "refusal"}
_OUT_OF_TOKENS = {"length", "max_tokens"}


def loaded_classes(*names: str) -> tuple[type[Any], ...]:
    """The classes named ``module.Class`` whose modules this process has imported.

    An exception of a module never imported cannot have been raised, so testing an
    exception against these alone answers as testing it against all of them would,
    without importing the SDKs: importing both took seconds, and a worker runs one
    provider's SDK only once it first runs that provider.
    """
    found: list[type[Any]] = []
    for name in names:
        module, _, attr = name.rpartition(".")
        cls = getattr(sys.modules.get(module), attr, None)
        if cls is not None:
            found.append(cls)
    return tuple(found)


def missing_key_error(provider: str, env_var: str) -> ApplicationError:
    """The error for a provider whose API key is not configured on the worker.

    Args:
        provider: Provider name (``openai``, ``anthropic``).
        env_var: The environment variable that holds the key.

    Returns:
        A non-retryable ``ModelRequestError``: retrying cannot make a key appear.
    """
    return model_request_error(
        f"{provider}: {env_var} is not set on the worker; set it in the environment of "
        f"the worker process (`subagents worker`/`subagents dev`) and restart it"
    )


def model_request_error(message: str) -> ApplicationError:
    """A non-retryable ``ModelRequestError`` with ``message``.

    It is ``BENIGN``: a request the provider refuses (a key, a model, a malformed
    request) is the deployment's or the spawner's to fix, and the message says how; the
    model-turn activity logs it in one line, and the SDK's traceback would say nothing
    more.
    """
    return ApplicationError(
        message,
        type="ModelRequestError",
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    )


def model_unavailable(message: str, next_retry_delay: timedelta | None = None) -> ApplicationError:
    """A retryable ``ModelUnavailable`` with ``message``: Temporal retries the turn.

    It is ``BENIGN``: expected weather, so the SDK does not log it with a traceback as
    a failure (the model-turn activity logs one line instead).
    """
    return ApplicationError(
        message,
        type="ModelUnavailable",
        non_retryable=False,
        next_retry_delay=next_retry_delay,
        category=ApplicationErrorCategory.BENIGN,
    )


def stalled_error(provider: str, seconds: float, events: int) -> ApplicationError:
    """No data came from the model for ``seconds`` (the idle watchdog gave up)."""
    where = f"after {events} stream event(s)" if events else "before the response started"
    return model_unavailable(
        f"{provider}: no data from the model for {seconds:g}s {where}; closed the "
        "connection (SUBAGENTS_MODEL_IDLE_TIMEOUT) (will retry)"
    )


def truncated_error(provider: str, missing: str, events: int) -> ApplicationError:
    """The stream ended without its end marker: a partial answer, never a full turn."""
    return model_unavailable(
        f"{provider}: the response stream ended after {events} event(s) without {missing}; "
        "the answer is incomplete (will retry)"
    )


def empty_response_error(provider: str, stop_reason: str | None) -> ApplicationError:
    """The model finished without text or tool calls.

    Retryable, unless the stop reason says a retry would end the same way.
    """
    reason = f" (stop reason {stop_reason!r})" if stop_reason else ""
    if stop_reason in _OUT_OF_TOKENS:
        return model_request_error(
            f"{provider}: the model returned an empty response{reason}: it ran out of "
            "output tokens before answering; raise max_tokens or shorten the task"
        )
    if stop_reason in _REFUSALS:
        return model_request_error(
            f"{provider}: the model returned an empty response{reason}: it declined to "
            "answer; rephrase the task"
        )
    return model_unavailable(
        f"{provider}: the model returned an empty response{reason} (will retry)"
    )


def retry_after(headers: Mapping[str, str] | None) -> timedelta | None:
    """The delay a server asked for in ``retry-after-ms`` or ``Retry-After``.

    Args:
        headers: Response headers (case-insensitive mapping, as httpx gives).

    Returns:
        The delay (capped at one hour), or None when the server named none.
    """
    if not headers:
        return None
    delay: float | None = None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            delay = float(raw_ms) / 1000.0
        except ValueError:
            delay = None
    raw = headers.get("retry-after")
    if delay is None and raw:
        try:
            delay = float(raw)
        except ValueError:
            try:
                when = parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                when = None
            if when is not None:
                if when.tzinfo is None:
                    when = when.replace(tzinfo=UTC)
                delay = (when - datetime.now(UTC)).total_seconds()
    if delay is None or delay < 0:
        return None
    return min(timedelta(seconds=delay), _MAX_RETRY_AFTER)


def _redact(text: str, secrets: Iterable[str | None]) -> str:
    # A server's message can hold a lone surrogate, which no recorded failure can carry.
    text = encodable(text)
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    return _SECRET_LIKE.sub("<redacted>", text)


def _describe(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _server_message(body: object, fallback: str) -> str:
    if isinstance(body, Mapping):
        inner: Any = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if isinstance(body.get("message"), str):
            return str(body["message"])
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return fallback


CONTEXT_LENGTH_ERROR = "ContextLengthExceeded"
"""The ``ApplicationError`` type of a request the provider refused as longer than the
model's context window; its details are ``{"tokens": N or None, "maximum": M}``."""

_OPENAI_MAXIMUM = re.compile(r"maximum context length is (\d+) tokens", re.IGNORECASE)
_OPENAI_REQUESTED = re.compile(r"(?:resulted in|requested) (\d+) tokens", re.IGNORECASE)
_ANTHROPIC_TOO_LONG = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
_ANTHROPIC_LIMIT = re.compile(r"exceed context limit: (\d+) \+ \d+ > (\d+)")
_BEDROCK_TOO_LONG = "input is too long for requested model"


def context_length(body: object, message: str) -> dict[str, int | None] | None:
    """The sizes a context-length refusal names, or None for any other error.

    OpenAI: ``code`` ``context_length_exceeded``, "This model's maximum context length
    is M tokens. However, your messages resulted in N tokens...". Anthropic:
    ``invalid_request_error`` "prompt is too long: N tokens > M maximum" (and "input
    length and `max_tokens` exceed context limit: N + K > M"), which Bedrock and Vertex
    pass on; Bedrock's "Input is too long for requested model." names no sizes.
    """
    inner = body.get("error", body) if isinstance(body, Mapping) else None
    code = inner.get("code") if isinstance(inner, Mapping) else None
    for pattern in (_ANTHROPIC_TOO_LONG, _ANTHROPIC_LIMIT):
        found = pattern.search(message)
        if found:
            return {"tokens": int(found.group(1)), "maximum": int(found.group(2))}
    if _BEDROCK_TOO_LONG in message.lower():
        return {"tokens": None, "maximum": 0}
    maximum = _OPENAI_MAXIMUM.search(message)
    if maximum is None:
        return None if code != "context_length_exceeded" else {"tokens": None, "maximum": 0}
    requested = _OPENAI_REQUESTED.search(message)
    return {
        "tokens": int(requested.group(1)) if requested else None,
        "maximum": int(maximum.group(1)),
    }


def _advice(provider: str, status: int, key_env: str) -> str:
    if status == 401:
        return f"authentication failed: check {key_env} on the worker"
    if status == 403:
        return f"the key in {key_env} on the worker may not have access to this model"
    if status == 404:
        return "check the model name (and the base URL, if a custom one is set)"
    if status == 413:
        return "the request is too large for the model; shorten the transcript"
    return f"the {provider} API rejected the request; retrying it will not help"


Advice = Callable[[int, str], "str | None"]
"""A provider's own advice for a refused request: its status and message in, None for
the default advice."""


def to_application_error(
    exc: Exception,
    *,
    provider: str,
    key_env: str,
    secrets: Iterable[str | None] = (),
    streaming: bool = False,
    advice: Advice | None = None,
) -> ApplicationError:
    """Translate an ``openai``/``anthropic``/``httpx2`` exception for Temporal.

    408, 409, 429, 5xx, errors sent inside a stream, connection errors (a reset
    mid-stream too) and timeouts are retryable ``ModelUnavailable``, with
    ``next_retry_delay`` from the server's ``Retry-After``; other 4xx are
    non-retryable ``ModelRequestError`` with advice on what to fix.

    Args:
        exc: The exception the SDK (or its HTTP client) raised.
        provider: Provider name for the message.
        key_env: Environment variable holding the key, named in 401/403 advice.
        secrets: Strings (API keys) that must never appear in the message.
        streaming: The response had started (a connection error means it was cut).
        advice: The provider's advice for a non-retryable status (a cloud names its
            own settings); None, or None from it: the default advice.

    Returns:
        The ``ApplicationError`` to raise. Raise it ``from None``: Temporal records an
        exception's cause in history, and the SDK's own message may echo the key.
    """
    secrets = list(secrets)
    status_errors: tuple[type[openai.APIStatusError | anthropic.APIStatusError], ...] = (
        loaded_classes("openai.APIStatusError", "anthropic.APIStatusError")
    )
    connection_errors = loaded_classes("openai.APIConnectionError", "anthropic.APIConnectionError")
    if isinstance(exc, status_errors):
        status = exc.status_code
        headers = exc.response.headers if exc.response is not None else None
        detail = _redact(_server_message(exc.body, str(exc)), secrets)
        if status < 400:  # an error event inside a streamed 200 response
            return model_unavailable(
                f"{provider} API error during the response: {detail} (will retry)"
            )
        if status in RETRYABLE_STATUS or status >= 500:
            return model_unavailable(
                f"{provider} API returned HTTP {status}: {detail} (will retry)",
                retry_after(headers),
            )
        sizes = context_length(exc.body, detail) if status in (400, 413) else None
        if sizes is not None:
            return ApplicationError(
                f"{provider} API returned HTTP {status}: {detail}; the conversation is "
                "longer than the model's context window",
                sizes,
                type=CONTEXT_LENGTH_ERROR,
                non_retryable=True,
            )
        said = (advice(status, detail) if advice else None) or _advice(provider, status, key_env)
        return model_request_error(f"{provider} API returned HTTP {status}: {detail}; {said}")
    if isinstance(exc, (*connection_errors, *loaded_classes("httpx2.TransportError"))):
        # the SDKs say "Connection error."; the transport error under it says what broke,
        # and under that aiohttp's own (its httpx adapter calls a refused connection
        # a connect timeout)
        cause = exc.__cause__ if isinstance(exc, connection_errors) else exc
        cause = cause if isinstance(cause, Exception) else exc
        timeout_errors = loaded_classes(
            "openai.APITimeoutError", "anthropic.APITimeoutError", "httpx2.TimeoutException"
        )
        timed_out = isinstance(exc, timeout_errors) or isinstance(cause, timeout_errors)
        if isinstance(cause.__cause__, loaded_classes("aiohttp.ClientError")):
            cause = cause.__cause__
            timed_out = isinstance(
                cause, (*loaded_classes("aiohttp.ServerTimeoutError"), TimeoutError)
            )
        if timed_out:
            kind = "timed out"
        elif streaming:
            kind = "connection lost during the response"
        else:
            kind = "connection failed"
        detail = _redact(_describe(cause), secrets)
        return model_unavailable(f"{provider} API {kind}: {detail} (will retry)")
    if isinstance(exc, loaded_classes("openai.APIError", "anthropic.APIError")):
        body = getattr(exc, "body", None)
        detail = _redact(_server_message(body, str(exc)), secrets)
        sizes = context_length(body, detail)
        if sizes is not None:  # the Responses API may refuse a long input inside the stream
            return ApplicationError(
                f"{provider} API error during the response: {detail}; the conversation is "
                "longer than the model's context window",
                sizes,
                type=CONTEXT_LENGTH_ERROR,
                non_retryable=True,
            )
        return model_unavailable(f"{provider} API error during the response: {detail} (will retry)")
    return model_unavailable(
        f"{provider} request failed: {type(exc).__name__}: {_redact(str(exc), secrets)}"
    )
