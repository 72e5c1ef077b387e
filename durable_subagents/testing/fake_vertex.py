"""A local server that speaks Google Vertex AI's API for Anthropic's Claude models.

``POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/{model}:rawPredict``
answers a Messages API body (its model is in the path) with a Messages API message;
``:streamRawPredict`` streams the Messages API's server-sent events. Every request must
carry ``Authorization: Bearer <the server's token>``, for the server's project and
region. Vertex's own errors come in Google's shape (``{"error": {"code", "message",
"status"}}``: 401 ``UNAUTHENTICATED``, 403 ``PERMISSION_DENIED``, 404 ``NOT_FOUND``,
429 ``RESOURCE_EXHAUSTED``); the Messages API's refusals (a thinking block changed, a
prompt too long) come in Anthropic's, as Vertex passes them on.

Everything else is ``FakeAnthropicServer``'s.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .fake_anthropic import FakeAnthropicServer

__all__ = ["GOOGLE_STATUS", "FakeVertexServer"]

GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
"""Google's status name for each HTTP status."""


def google_error(status: int, message: str) -> dict[str, Any]:
    """An error body in Google APIs' shape."""
    return {
        "error": {
            "code": status,
            "message": message,
            "status": GOOGLE_STATUS.get(status, "UNKNOWN"),
        }
    }


class FakeVertexServer(FakeAnthropicServer):
    """Vertex AI's ``rawPredict`` and ``streamRawPredict`` for Claude.

    Args:
        project: The project requests must name.
        region: The region requests must name.
        token: The OAuth access token requests must carry.
        models: The models this region serves (None: any); others get ``NOT_FOUND``.
        options: As ``FakeAnthropicServer``'s.
    """

    route = "/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{call}"

    def __init__(
        self,
        *,
        project: str = "fake-project",
        region: str = "us-east5",
        token: str = "ya29.fake-vertex-token",
        models: list[str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.project = project
        self.region = region
        self.token = token
        self.models = None if models is None else set(models)
        self.paths: list[str] = []
        """The path of each authorized request."""

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1`` (``ANTHROPIC_VERTEX_BASE_URL``)."""
        return f"{self.url}/v1"

    def environment(self) -> dict[str, str]:
        """What a worker's environment needs to call this server with its token."""
        return {
            "CLOUD_ML_REGION": self.region,
            "ANTHROPIC_VERTEX_PROJECT_ID": self.project,
            "GOOGLE_OAUTH_ACCESS_TOKEN": self.token,
            "ANTHROPIC_VERTEX_BASE_URL": self.base_url,
        }

    def error_body(self, status: int) -> Any:
        """Google's shape for Vertex's own errors; Anthropic's for an overloaded model."""
        if status == 529:
            return super().error_body(status)
        if status == 429:
            return google_error(429, "Resource exhausted. Please try again later.")
        return google_error(status, f"fake error {status}")

    def gate(self, request: web.Request) -> tuple[int, Any] | None:
        """Vertex's 401 without the token; 403 for another project or region."""
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            message = (
                "Request had invalid authentication credentials. Expected OAuth 2 access "
                "token, login cookie or other valid authentication credential."
            )
            return 401, google_error(401, message)
        project, region = request.match_info["project"], request.match_info["region"]
        if project != self.project or region != self.region:
            resource = f"projects/{project}/locations/{region}"
            message = (
                f"Permission 'aiplatform.endpoints.predict' denied on resource "
                f"'//aiplatform.googleapis.com/{resource}/publishers/anthropic/models/"
                f"{request.match_info['call'].rpartition(':')[0]}' (or it may not exist)."
            )
            return 403, google_error(403, message)
        return None

    async def read_body(self, request: web.Request) -> dict[str, Any]:
        """The body with the path's model, as the Messages API reads it."""
        body: dict[str, Any] = json.loads(await request.read())
        model, _, method = request.match_info["call"].rpartition(":")
        body["model"] = model
        body["_method"] = method
        self.paths.append(request.raw_path)
        return body

    def refusal(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """Vertex's refusals, then the Messages API's own.

        An unknown method or model, a body without ``anthropic_version``.
        """
        method = body.pop("_method", "")
        if method not in ("rawPredict", "streamRawPredict"):
            return 400, google_error(400, f"Unknown method {method!r}.")
        if method == "streamRawPredict" and not body.get("stream"):
            return 400, google_error(400, "streamRawPredict requires stream: true.")
        model = body["model"]
        if self.models is not None and model not in self.models:
            place = f"projects/{self.project}/locations/{self.region}"
            name = f"{place}/publishers/anthropic/models/{model}"
            return 404, google_error(404, f"Publisher Model `{name}` not found.")
        if "anthropic_version" not in body:
            return 400, google_error(400, "anthropic_version: field required")
        return super().refusal(body)
