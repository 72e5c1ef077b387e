"""Claude on Amazon Bedrock: the Anthropic provider through ``AsyncAnthropicBedrock``.

The request and the answer are the Messages API's (thinking, caching, tools, structured
answers as on Anthropic's wire); the SDK signs each request with SigV4 from botocore's
credential chain (environment, profile, SSO, a role) or sends ``AWS_BEARER_TOKEN_BEDROCK``,
and the answer streams in AWS's event-stream framing (``_eventstream``). The worker
never reads a credential itself: it never passes through a task's input, history or
spans.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from temporalio.exceptions import ApplicationError

from ._errors import loaded_classes, model_request_error, model_unavailable
from ._eventstream import EventStreamEvents
from ._names import claude_model
from ._stream import PerLoop, use_aiohttp
from .anthropic import AnthropicProvider

__all__ = ["BedrockProvider", "import_sdk"]

_NO_CREDENTIALS = (
    "botocore.exceptions.NoCredentialsError",
    "botocore.exceptions.PartialCredentialsError",
    "botocore.exceptions.ProfileNotFound",
    "botocore.exceptions.TokenRetrievalError",
    "botocore.exceptions.SSOTokenLoadError",
    "botocore.exceptions.UnauthorizedSSOTokenError",
    "botocore.exceptions.InvalidConfigError",
)
"""botocore's errors for credentials that are missing or need a person (not retried)."""
_SET_CREDENTIALS = (
    "give the worker AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
    "AWS_PROFILE, an IAM role, or AWS_BEARER_TOKEN_BEDROCK) and restart it"
)


def import_sdk() -> None:
    """Import the SDK's Bedrock client and botocore, as a worker's first turn would.

    Without the ``bedrock`` extra nothing is imported: the worker's start check says
    what to install.
    """
    with contextlib.suppress(ImportError):
        import boto3  # noqa: F401
        import botocore.eventstream  # noqa: F401
        from anthropic import AsyncAnthropicBedrock  # noqa: F401


class BedrockProvider(AnthropicProvider):
    """Claude on Amazon Bedrock (``bedrock:<model id>``), streamed.

    Args:
        region: The AWS region (``AWS_REGION``, ``AWS_DEFAULT_REGION`` or the profile's).
        base_url: A custom endpoint (``ANTHROPIC_BEDROCK_BASE_URL``; default: the
            region's ``bedrock-runtime`` endpoint).
        idle_timeout: As ``AnthropicProvider``'s.
    """

    name = "bedrock"
    key_env = "the worker's AWS credentials"

    def __init__(
        self, *, region: str, base_url: str | None = None, idle_timeout: float | None = None
    ) -> None:
        from anthropic import APIError, AsyncAnthropicBedrock, DefaultAioHttpClient

        self.region = region
        self.bearer = bool(os.environ.get("AWS_BEARER_TOKEN_BEDROCK"))
        """Whether the SDK sends a Bedrock API key instead of signing (it reads the
        variable itself, and then never signs)."""
        # never shown in a message, should a server echo one
        self._secrets = [
            v
            for k in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK")
            if (v := os.environ.get(k))
        ]
        self._api_error = APIError
        self._clients = PerLoop(
            lambda: AsyncAnthropicBedrock(
                aws_region=region,
                base_url=base_url,
                max_retries=0,
                http_client=DefaultAioHttpClient() if use_aiohttp() else None,
            )
        )
        self.idle_timeout = idle_timeout

    def claude_model(self, model: str) -> str:
        """``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` is ``claude-sonnet-4-5-...``."""
        return claude_model("bedrock", model)

    def advice(self, status: int, message: str) -> str | None:
        """Bedrock's refusals name the worker's AWS credentials, the model id, the region."""
        if status in (401, 403) and self.bearer:
            return (
                "check the worker's AWS_BEARER_TOKEN_BEDROCK: a Bedrock API key, not "
                f"expired, of an identity that may invoke this model in {self.region} (the "
                "SDK sends it instead of signing with any other AWS credentials)"
            )
        if status in (401, 403):
            return (
                f"check the worker's AWS credentials and that they may invoke this model in "
                f"{self.region} (IAM bedrock:InvokeModelWithResponseStream; model access "
                "in the Bedrock console)"
            )
        lowered = message.lower()
        if status == 404 or "model identifier is invalid" in lowered or "on-demand" in lowered:
            return (
                f"check the model id (Bedrock's, e.g. us.anthropic.claude-sonnet-4-5-20250929-"
                f"v1:0, or an inference profile) and that {self.region} (AWS_REGION) offers it"
            )
        return None

    async def open_stream(self, params: dict[str, Any]) -> Any:
        """Send the request, signed; the events of its event-stream answer."""
        client = self._clients.get()
        events = EventStreamEvents(
            client.messages.with_streaming_response.create(**params),
            provider=self.name,
            error=self._api_error,
        )
        try:
            return await events.open()
        except Exception as exc:
            problem = credentials_error(exc)
            if problem is None:
                raise
            raise problem from None


def credentials_error(exc: Exception) -> ApplicationError | None:
    """The task's error for credentials the SDK could not sign with; None for others.

    Missing or unusable credentials need a person (not retried); a credential source
    that failed to answer (an STS or instance-metadata hiccup) is retried.
    """
    if isinstance(exc, RuntimeError) and "AWS credentials" in str(exc):
        return model_request_error(
            f"bedrock: no AWS credentials found on the worker; {_SET_CREDENTIALS}"
        )
    if isinstance(exc, loaded_classes(*_NO_CREDENTIALS)):
        return model_request_error(
            f"bedrock: the worker's AWS credentials cannot be used ({type(exc).__name__}: "
            f"{exc}); {_SET_CREDENTIALS}"
        )
    if isinstance(exc, loaded_classes("botocore.exceptions.BotoCoreError")):
        return model_unavailable(
            f"bedrock: the worker's AWS credentials could not be read ({type(exc).__name__}: "
            f"{exc}) (will retry)"
        )
    if isinstance(exc, ValueError):  # the SDK refused to build the request (a model id)
        return model_request_error(f"bedrock: the request could not be made: {exc}")
    return None
