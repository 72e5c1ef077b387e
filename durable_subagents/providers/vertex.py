"""Claude on Google Vertex AI: the Anthropic provider through ``AsyncAnthropicVertex``.

The request and the streamed answer are the Messages API's (``:streamRawPredict``
answers in server-sent events), so thinking, caching, tools and structured answers
behave as on Anthropic's wire. The SDK sends a bearer token: ``GOOGLE_OAUTH_ACCESS_TOKEN``
as given, or one it mints and refreshes from application default credentials
(``google-auth``: a service account key, ``gcloud auth application-default login``, the
metadata server). No token or credential ever enters a task's input, history or spans.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from temporalio.exceptions import ApplicationError

from ._cloud import google_credentials
from ._errors import loaded_classes, model_request_error, model_unavailable
from ._names import claude_model
from ._stream import PerLoop, SSEEvents, use_aiohttp
from .anthropic import AnthropicProvider

__all__ = ["VertexProvider", "import_sdk"]

_SET_CREDENTIALS = (
    "run `gcloud auth application-default login`, set GOOGLE_APPLICATION_CREDENTIALS to a "
    "service account key, or set GOOGLE_OAUTH_ACCESS_TOKEN, and restart the worker"
)


_NO_PROJECT = (
    "vertex: no Google Cloud project on the worker; set ANTHROPIC_VERTEX_PROJECT_ID "
    "(the project whose Vertex AI serves the model)"
)


def import_sdk() -> None:
    """Import the SDK's Vertex client and google-auth, as a worker's first turn would."""
    with contextlib.suppress(ImportError):
        from anthropic import AsyncAnthropicVertex  # noqa: F401
    with contextlib.suppress(ImportError):
        import google.auth.transport.requests  # noqa: F401


class VertexProvider(AnthropicProvider):
    """Claude on Google Vertex AI (``vertex:<model>``), streamed.

    Args:
        region: ``CLOUD_ML_REGION`` (``us-east5``, ``europe-west1``, ``global``...).
        project: ``ANTHROPIC_VERTEX_PROJECT_ID``; None: the credentials' project.
        access_token: ``GOOGLE_OAUTH_ACCESS_TOKEN``; None: application default
            credentials, loaded at the first turn.
        base_url: ``ANTHROPIC_VERTEX_BASE_URL``; None: the region's endpoint.
        idle_timeout: As ``AnthropicProvider``'s.
    """

    name = "vertex"
    key_env = "the worker's Google credentials"

    def __init__(
        self,
        *,
        region: str,
        project: str | None = None,
        access_token: str | None = None,
        base_url: str | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        from anthropic import APIError, AsyncAnthropicVertex, DefaultAioHttpClient

        self.region = region
        self.project = project
        self._token = access_token
        self._credentials: Any = None
        self._secrets = [access_token] if access_token else []
        self._api_error = APIError
        self._clients = PerLoop(
            lambda: AsyncAnthropicVertex(
                region=region,
                project_id=self.project or "",
                access_token=self._token,
                credentials=self._credentials,
                base_url=base_url,
                max_retries=0,
                http_client=DefaultAioHttpClient() if use_aiohttp() else None,
            )
        )
        self.idle_timeout = idle_timeout

    def claude_model(self, model: str) -> str:
        """``claude-sonnet-4-5@20250929`` is ``claude-sonnet-4-5``."""
        return claude_model("vertex", model)

    def advice(self, status: int, message: str) -> str | None:
        """Vertex's refusals name the worker's Google credentials, the model, the region."""
        if status == 401:
            return (
                "authentication failed: check the worker's Google credentials (an access "
                "token in GOOGLE_OAUTH_ACCESS_TOKEN expires after an hour)"
            )
        if status == 403:
            return (
                f"the worker's Google credentials may not call this model in project "
                f"{self.project}: grant them roles/aiplatform.user there and enable the "
                "model in Vertex AI's Model Garden"
            )
        if status == 404:
            return (
                f"check the model name (Vertex's, e.g. claude-sonnet-4-5@20250929) and that "
                f"{self.region} (CLOUD_ML_REGION) serves it"
            )
        return None

    async def open_stream(self, params: dict[str, Any]) -> Any:
        """Send the request with a bearer token; the events of its SSE answer."""
        if (self._token is None and self._credentials is None) or not self.project:
            await self._load_credentials()
        client = self._clients.get()
        try:
            return await SSEEvents(
                client.messages.with_streaming_response.create(**params),
                provider=self.name,
                error=self._api_error,
            ).open()
        except Exception as exc:
            problem = credentials_error(exc)
            if problem is None:
                raise
            raise problem from None

    async def _load_credentials(self) -> None:
        """Application default credentials, and the project where none was given."""
        try:
            credentials, project = await asyncio.to_thread(google_credentials)
        except Exception as exc:
            if self._token is not None:  # only the project was looked for
                raise model_request_error(_NO_PROJECT) from None
            problem = credentials_error(exc)
            if problem is None:
                raise
            raise problem from None
        if self._token is None:
            self._credentials = credentials
        self.project = self.project or project
        if not self.project:
            raise model_request_error(_NO_PROJECT)


def credentials_error(exc: Exception) -> ApplicationError | None:
    """The task's error for credentials the SDK could not get a token from; None else.

    Missing credentials, and a refresh the server refused for good, need a person (not
    retried); a token server that did not answer is retried.
    """
    if isinstance(exc, ImportError) or type(exc).__name__ == "MissingDependencyError":
        return model_request_error(
            "vertex: google-auth is not installed on the worker; "
            "pip install 'durable-subagents[vertex]' and restart it"
        )
    if isinstance(exc, loaded_classes("google.auth.exceptions.DefaultCredentialsError")):
        return model_request_error(
            f"vertex: no Google credentials found on the worker; {_SET_CREDENTIALS}"
        )
    if isinstance(exc, loaded_classes("google.auth.exceptions.RefreshError")):
        if getattr(exc, "retryable", False):
            return model_unavailable(
                f"vertex: the Google token could not be refreshed: {exc} (will retry)"
            )
        return model_request_error(
            f"vertex: the worker's Google credentials were refused ({exc}); {_SET_CREDENTIALS}"
        )
    if isinstance(exc, loaded_classes("google.auth.exceptions.GoogleAuthError")):
        return model_unavailable(
            f"vertex: no Google token ({type(exc).__name__}: {exc}) (will retry)"
        )
    if isinstance(exc, ValueError):  # the SDK refused to build the request (a model id)
        return model_request_error(f"vertex: the request could not be made: {exc}")
    return None


def vertex_settings() -> dict[str, str | None]:
    """The Vertex client's settings from the worker's environment (the SDK's variables)."""
    return {
        "region": os.environ.get("CLOUD_ML_REGION"),
        "project": os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID") or None,
        "access_token": os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN") or None,
        "base_url": os.environ.get("ANTHROPIC_VERTEX_BASE_URL") or None,
    }
