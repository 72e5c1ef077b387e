"""A local server that speaks Amazon Bedrock's runtime API for Claude models.

``POST /model/{modelId}/invoke`` answers a Messages API body (its model is in the path)
with a Messages API message; ``/model/{modelId}/invoke-with-response-stream`` streams
the Messages API's events, each a ``chunk`` event of AWS's binary event-stream framing
(prelude with the lengths and their CRC32, typed headers, ``{"bytes": "<base64 of the
event's JSON>"}``, the message's CRC32). Every request must be signed with SigV4 for
service ``bedrock`` in the server's region by its access key: the signature is checked
against the request's method, path, signed headers and body, as AWS checks it, or
carry the server's Bedrock API key as ``Authorization: Bearer`` (what the SDK sends,
unsigned, when ``AWS_BEARER_TOKEN_BEDROCK`` is set); any other bearer token is refused.
Errors come as Bedrock sends them: ``{"message": ...}`` with the exception's name in
``x-amzn-ErrorType``.

Everything else (queued replies, thinking blocks signed by the server and checked when
they come back, prompt caching and its usage fields, faults) is ``FakeAnthropicServer``'s.

Example:
    >>> async with FakeBedrockServer() as srv:  # doctest: +SKIP
    ...     env = srv.environment()  # AWS_REGION, keys, ANTHROPIC_BEDROCK_BASE_URL
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from .fake_anthropic import FakeAnthropicServer
from .fake_openai import FakeReply

__all__ = ["BEDROCK_ERRORS", "FakeBedrockServer", "event_stream_message"]

BEDROCK_ERRORS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
"""The exception Bedrock's runtime names for each status."""
_MESSAGES = {
    403: "You don't have access to the model with the specified model ID.",
    404: "Could not resolve the foundation model from the provided model identifier.",
    429: "Too many requests, please wait before trying again.",
}
_SIGV4 = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/"
    r"(?P<service>[^/,\s]+)/aws4_request, ?SignedHeaders=(?P<signed>[a-z0-9;-]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})"
)


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        struct.pack("!B", len(raw_name))
        + raw_name
        + b"\x07"
        + struct.pack("!H", len(raw_value))
        + raw_value
    )


def event_stream_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One message of AWS's event-stream framing (string headers only)."""
    raw_headers = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack("!II", total, len(raw_headers))
    prelude += struct.pack("!I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + raw_headers + payload
    return message + struct.pack("!I", binascii.crc32(message) & 0xFFFFFFFF)


def _chunk(event: dict[str, Any]) -> bytes:
    data = base64.b64encode(json.dumps(event).encode()).decode()
    headers = {
        ":event-type": "chunk",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return event_stream_message(headers, json.dumps({"bytes": data}).encode())


def _error(kind: str, message: str) -> dict[str, Any]:
    """A Bedrock error body; ``__type`` goes to the ``x-amzn-ErrorType`` header."""
    return {"__type": kind, "message": message}


class FakeBedrockServer(FakeAnthropicServer):
    """Bedrock's ``InvokeModel`` and ``InvokeModelWithResponseStream`` for Claude.

    Args:
        region: The region requests must be signed for.
        access_key_id: The access key requests must be signed with.
        secret_access_key: Its secret (the server checks each signature with it).
        models: The model ids this region offers (None: any); others get
            ``ResourceNotFoundException``.
        api_key: A Bedrock API key accepted as ``Authorization: Bearer`` besides
            signatures (None: no key is); ``environment()`` then gives the key, not the
            access key.
        options: As ``FakeAnthropicServer``'s.
    """

    route = "/model/{model_id}/{action}"
    stream_content_type = "application/vnd.amazon.eventstream"

    def __init__(
        self,
        *,
        region: str = "us-east-1",
        access_key_id: str = "AKIAFAKEBEDROCK00001",
        secret_access_key: str = "fake-secret-access-key-for-tests-only",
        models: list[str] | None = None,
        api_key: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.region = region
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.models = None if models is None else set(models)
        self.api_key = api_key
        self.paths: list[str] = []
        """The path of each request that named the server's key and region."""

    def environment(self) -> dict[str, str]:
        """What a worker's environment needs to call this server with these keys.

        With an ``api_key``, its key as ``AWS_BEARER_TOKEN_BEDROCK`` and no access key,
        as a user of Bedrock API keys sets it.
        """
        if self.api_key is not None:
            return {
                "AWS_REGION": self.region,
                "AWS_BEARER_TOKEN_BEDROCK": self.api_key,
                "ANTHROPIC_BEDROCK_BASE_URL": self.base_url,
            }
        return {
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "ANTHROPIC_BEDROCK_BASE_URL": self.base_url,
        }

    def error_body(self, status: int) -> Any:
        """Bedrock's error shape."""
        return {"message": _MESSAGES.get(status, f"fake error {status}")}

    def error_response(self, status: int, payload: Any, headers: dict[str, str]) -> web.Response:
        """``{"message": ...}`` and the exception's name in ``x-amzn-ErrorType``.

        The Messages API's own refusals (a thinking block changed, a prompt too long)
        come as a ``ValidationException`` with the API's message, as Bedrock passes them.
        """
        if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
            payload = {"message": str(payload["error"].get("message"))}
        kind = BEDROCK_ERRORS.get(status, "InternalServerException")
        if isinstance(payload, dict) and "__type" in payload:
            payload = dict(payload)
            kind = payload.pop("__type")
        headers = {
            "x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            **headers,
        }
        return super().error_response(status, payload, headers)

    def gate(self, request: web.Request) -> tuple[int, Any] | None:
        """Bedrock's 403 for a request not signed as the server's key signs it."""
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            if self.api_key is not None and auth == f"Bearer {self.api_key}":
                return None
            # Bedrock's answer to an API key it does not know, as users report it.
            return 403, _error(
                "AccessDeniedException",
                "Authentication failed: Please make sure your API Key is valid.",
            )
        found = _SIGV4.fullmatch(auth)
        if found is None:
            return 403, _error(
                "MissingAuthenticationTokenException", "Missing Authentication Token"
            )
        if found["key"] != self.access_key_id:
            invalid = "The security token included in the request is invalid."
            return 403, _error("UnrecognizedClientException", invalid)
        if found["service"] != "bedrock" or found["region"] != self.region:
            scope = f"{found['region']}/{found['service']}"
            scoped = f"Credential should be scoped to {self.region}/bedrock, not {scope}."
            return 403, _error("InvalidSignatureException", scoped)
        return None

    async def read_body(self, request: web.Request) -> dict[str, Any]:
        """The body with the path's model and stream flag, as the Messages API reads it.

        A signature that does not match the request is refused with AWS's
        ``InvalidSignatureException`` text (the body is part of the signature).
        """
        raw = await request.read()
        body: dict[str, Any] = json.loads(raw)
        body["model"] = request.match_info["model_id"]
        body["stream"] = request.match_info["action"] == "invoke-with-response-stream"
        self.paths.append(request.raw_path)
        bearer = request.headers.get("Authorization", "").startswith("Bearer ")
        if not bearer and not self._signed(request, raw):
            body["_refused"] = "signature"
        return body

    def _signed(self, request: web.Request, raw: bytes) -> bool:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        found = _SIGV4.fullmatch(request.headers["Authorization"])
        assert found is not None
        names = found["signed"].split(";")
        headers = {n: request.headers.get(n, "") for n in names}
        url = f"{request.scheme}://{request.host}{request.raw_path}"
        signed = AWSRequest(method=request.method, url=url, headers=headers, data=raw)
        signed.context["timestamp"] = request.headers.get("X-Amz-Date", "")
        credentials = Credentials(self.access_key_id, self.secret_access_key)
        signer = SigV4Auth(credentials, "bedrock", self.region)
        canonical = signer.canonical_request(signed)
        expected = signer.signature(signer.string_to_sign(signed, canonical), signed)
        return bool(expected == found["signature"])

    def refusal(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """Bedrock's refusals, then the Messages API's own.

        A bad signature, a model the region lacks, a body without ``anthropic_version``.
        """
        if body.pop("_refused", None):
            message = (
                "The request signature we calculated does not match the signature you "
                "provided. Check your AWS Secret Access Key and signing method."
            )
            return 403, _error("InvalidSignatureException", message)
        if self.models is not None and body["model"] not in self.models:
            return 404, self.error_body(404)
        if "anthropic_version" not in body:
            missing = "Malformed input request: required key [anthropic_version] not found"
            return 400, _error("ValidationException", missing)
        return super().refusal(body)

    def events(self, reply: FakeReply, body: dict[str, Any]) -> Iterator[bytes]:
        """Each Messages API stream event as a ``chunk`` event-stream message."""
        for event in self.stream_events(reply, body):
            yield _chunk(event)
