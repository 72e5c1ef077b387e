"""Map model SDK exceptions to Temporal ``ApplicationError``.

Temporal owns retries: the SDK clients are built with ``max_retries=0`` and every
failure becomes an ``ApplicationError`` whose ``non_retryable`` flag and
``next_retry_delay`` tell Temporal's retry policy what to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import anthropic
import openai
from temporalio.exceptions import ApplicationError

__all__ = [
    "RETRYABLE_STATUS",
    "missing_key_error",
    "model_request_error",
    "retry_after",
    "to_application_error",
]

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""4xx statuses worth retrying; every 5xx is retried too."""

_MAX_RETRY_AFTER = timedelta(hours=1)
_SECRET_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")

_STATUS_ERRORS = (openai.APIStatusError, anthropic.APIStatusError)
_CONNECTION_ERRORS = (openai.APIConnectionError, anthropic.APIConnectionError)
_API_ERRORS = (openai.APIError, anthropic.APIError)


def missing_key_error(provider: str, env_var: str) -> ApplicationError:
    """The error for a provider whose API key is not configured on the worker.

    Args:
        provider: Provider name (``openai``, ``anthropic``).
        env_var: The environment variable that holds the key.

    Returns:
        A non-retryable ``ModelRequestError``: retrying cannot make a key appear.
    """
    return ApplicationError(
        f"{provider}: {env_var} is not set on the worker; set it in the environment of "
        f"the worker process (`subagents worker`/`subagents dev`) and restart it",
        type="ModelRequestError",
        non_retryable=True,
    )


def model_request_error(message: str) -> ApplicationError:
    """A non-retryable ``ModelRequestError`` with ``message``."""
    return ApplicationError(message, type="ModelRequestError", non_retryable=True)


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
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    return _SECRET_LIKE.sub("<redacted>", text)


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


def _advice(provider: str, status: int, key_env: str) -> str:
    if status == 401:
        return f"check {key_env} on the worker"
    if status == 403:
        return f"the key in {key_env} on the worker may not have access to this model"
    if status == 404:
        return "check the model name (and the base URL, if a custom one is set)"
    if status == 413:
        return "the request is too large for the model; shorten the transcript"
    return f"the {provider} API rejected the request; retrying it will not help"


def to_application_error(
    exc: Exception, *, provider: str, key_env: str, secrets: Iterable[str | None] = ()
) -> ApplicationError:
    """Translate an ``openai``/``anthropic`` SDK exception for Temporal.

    408, 409, 429, 5xx, connection errors and timeouts are retryable, with
    ``next_retry_delay`` from the server's ``Retry-After``; other 4xx are
    non-retryable ``ModelRequestError`` with advice on what to fix.

    Args:
        exc: The exception the SDK raised.
        provider: Provider name for the message.
        key_env: Environment variable holding the key, named in 401/403 advice.
        secrets: Strings (API keys) that must never appear in the message.

    Returns:
        The ``ApplicationError`` to raise. Raise it ``from None``: Temporal records an
        exception's cause in history, and the SDK's own message may echo the key.
    """
    secrets = list(secrets)
    if isinstance(exc, _STATUS_ERRORS):
        status = exc.status_code
        headers = exc.response.headers if exc.response is not None else None
        detail = _redact(_server_message(exc.body, str(exc)), secrets)
        if status in RETRYABLE_STATUS or status >= 500 or status < 400:
            return ApplicationError(
                f"{provider} API returned HTTP {status}: {detail} (will retry)",
                type="ModelUnavailable",
                non_retryable=False,
                next_retry_delay=retry_after(headers),
            )
        return ApplicationError(
            f"{provider} API returned HTTP {status}: {detail}; "
            f"{_advice(provider, status, key_env)}",
            type="ModelRequestError",
            non_retryable=True,
        )
    if isinstance(exc, _CONNECTION_ERRORS):
        timed_out = isinstance(exc, openai.APITimeoutError | anthropic.APITimeoutError)
        kind = "timed out" if timed_out else "connection failed"
        return ApplicationError(
            f"{provider} API {kind}: {_redact(str(exc), secrets)} (will retry)",
            type="ModelUnavailable",
            non_retryable=False,
        )
    if isinstance(exc, _API_ERRORS):
        detail = _redact(_server_message(getattr(exc, "body", None), str(exc)), secrets)
        return ApplicationError(
            f"{provider} API error during the response: {detail} (will retry)",
            type="ModelUnavailable",
            non_retryable=False,
        )
    return ApplicationError(
        f"{provider} request failed: {type(exc).__name__}: {_redact(str(exc), secrets)}",
        type="ModelUnavailable",
        non_retryable=False,
    )
