"""Claude on Bedrock and Vertex: model names, labels, windows, and the worker's start check."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from durable_subagents import InvalidRequest, Settings
from durable_subagents.providers._eventstream import EventStreamEvents
from durable_subagents.providers._names import claude_model, named_model, parse_model
from durable_subagents.providers._windows import known_window
from durable_subagents.testing.fake_bedrock import _chunk, event_stream_message
from durable_subagents.worker import worker_models

LEAKED = "AKIAEXFILTRATED0SECRET"


@pytest.mark.parametrize(
    ("model", "claude"),
    [
        ("bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929"),
        ("bedrock:anthropic.claude-3-5-haiku-20241022-v1:0", "claude-3-5-haiku-20241022"),
        ("bedrock:global.anthropic.claude-opus-4-6-v1", "claude-opus-4-6"),
        (
            "bedrock:arn:aws:bedrock:us-east-1:1:inference-profile/eu.anthropic.claude-haiku-4-5-v1:0",
            "claude-haiku-4-5",
        ),
        ("vertex:claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
    ],
)
def test_a_cloud_model_id_names_its_claude_model_and_window(model: str, claude: str) -> None:
    provider, full, name = parse_model(model)
    assert full == model and provider in ("bedrock", "vertex")
    assert claude_model(provider, name) == claude
    assert known_window(model) == 200_000


@pytest.mark.parametrize(
    ("model", "named"),
    [
        (
            "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        ),
        (f"bedrock:{LEAKED}", "bedrock:other"),
        (f"vertex:claude-{LEAKED}@1", "vertex:other"),
        ("vertex:", "vertex:other"),
    ],
)
def test_labels_name_only_configured_cloud_models(model: str, named: str) -> None:
    """A model name a model chose (carrying a secret it read) is never a label."""
    configured = ["bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0"]
    assert named_model(model, "vertex:claude-haiku-4-5@20251001", configured) == named


CLEAN = {
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
    "CLOUDSDK_CONFIG": "/nonexistent",
    "NO_GCE_CHECK": "True",
}
CLOUD = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "CLOUD_ML_REGION",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "SUBAGENTS_MODELS",
    "SUBAGENTS_MODEL",
    "SUBAGENTS_ALLOW_SCRIPTED",
)


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in CLOUD:
        monkeypatch.delenv(name, raising=False)
    for name, value in CLEAN.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


@pytest.mark.parametrize(
    ("settings", "env", "line"),
    [
        (
            {"model": "bedrock:us.anthropic.claude-haiku-4-5-v1:0"},
            {},
            "SUBAGENTS_MODEL=bedrock:us.anthropic.claude-haiku-4-5-v1:0, but no AWS region on "
            "the worker; set AWS_REGION (e.g. us-east-1), or a region in its AWS profile",
        ),
        (
            {"model": "bedrock:m"},
            {"AWS_REGION": "us-east-1"},
            "SUBAGENTS_MODEL=bedrock:m, but no AWS credentials found on the worker; give it "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an IAM role, or "
            "AWS_BEARER_TOKEN_BEDROCK",
        ),
        (
            {"model": "scripted", "allow_scripted": True, "models": "vertex:claude-*"},
            {},
            "SUBAGENTS_MODELS allows vertex:claude-*, but CLOUD_ML_REGION is not set on the "
            "worker; set it to the region that serves the model (e.g. us-east5, or global)",
        ),
        (
            {"model": "vertex:claude-haiku-4-5@20251001"},
            {"CLOUD_ML_REGION": "us-east5", "ANTHROPIC_VERTEX_PROJECT_ID": "p"},
            "SUBAGENTS_MODEL=vertex:claude-haiku-4-5@20251001, but no Google credentials found "
            "on the worker; run `gcloud auth application-default login`, set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service account key, or set "
            "GOOGLE_OAUTH_ACCESS_TOKEN",
        ),
        (
            {"model": "vertex:m"},
            {"CLOUD_ML_REGION": "us-east5", "GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.secret"},
            "SUBAGENTS_MODEL=vertex:m, but no Google Cloud project on the worker; set "
            "ANTHROPIC_VERTEX_PROJECT_ID (the project whose Vertex AI serves the model)",
        ),
    ],
)
def test_a_worker_whose_models_name_a_cloud_it_cannot_call_does_not_start(
    bare: pytest.MonkeyPatch, settings: dict[str, object], env: dict[str, str], line: str
) -> None:
    for name, value in env.items():
        bare.setenv(name, value)
    with pytest.raises(InvalidRequest) as refused:
        worker_models(Settings(**settings))  # type: ignore[arg-type]
    assert str(refused.value) == line
    assert "ya29.secret" not in str(refused.value)


def test_a_worker_with_its_clouds_settings_starts(bare: pytest.MonkeyPatch) -> None:
    bare.setenv("AWS_REGION", "eu-west-1")
    bare.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKE")
    bare.setenv("AWS_SECRET_ACCESS_KEY", "s")
    bare.setenv("CLOUD_ML_REGION", "global")
    bare.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.t")
    bare.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "p")
    allowed = worker_models(Settings(model="bedrock:m", models="bedrock:*,vertex:*,openai:*"))
    assert allowed.allows("vertex:claude-x@1") and allowed.allows("bedrock:m")
    # any model (*) names no cloud: nothing to check
    bare.delenv("CLOUD_ML_REGION")
    worker_models(Settings(model="bedrock:m", models="*"))


def test_a_missing_extra_says_what_to_install(bare: pytest.MonkeyPatch) -> None:
    bare.setitem(__import__("sys").modules, "boto3", None)
    bare.setenv("AWS_REGION", "us-east-1")
    with pytest.raises(InvalidRequest) as refused:
        worker_models(Settings(model="bedrock:m"))
    assert str(refused.value) == (
        "SUBAGENTS_MODEL=bedrock:m, but boto3 is not installed on the worker; "
        "pip install 'durable-subagents[bedrock]' and restart it"
    )


class _Response:
    """What the SDK's streaming response gives the reader: its bytes, its request."""

    http_request = None

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames

    async def iter_bytes(self) -> Any:
        for frame in self.frames:
            # cut each frame in two: a message may span reads
            yield frame[:7]
            yield frame[7:]


class _Manager:
    def __init__(self, frames: list[bytes]) -> None:
        self.response = _Response(frames)

    async def __aenter__(self) -> _Response:
        return self.response

    async def __aexit__(self, *exc: object) -> None:
        return None


def _exception(kind: str, message: str) -> bytes:
    headers = {":message-type": "exception", ":exception-type": kind}
    return event_stream_message(headers, json.dumps({"message": message}).encode())


async def _read(frames: list[bytes]) -> list[dict[str, Any]]:
    from anthropic import APIError

    events = await EventStreamEvents(_Manager(frames), provider="bedrock", error=APIError).open()
    out = []
    with contextlib.suppress(StopAsyncIteration):
        while True:
            out.append(await events.__anext__())
    return out


async def test_bedrock_stream_frames_decode_and_in_stream_exceptions_raise() -> None:
    from anthropic import APIError

    start = {"type": "message_start", "message": {"usage": {"input_tokens": 3}}}
    assert await _read([_chunk(start), _chunk({"type": "message_stop"})]) == [
        start,
        {"type": "message_stop"},
    ]
    with pytest.raises(APIError, match="throttlingException: slow down"):
        await _read([_chunk(start), _exception("throttlingException", "slow down")])
    with pytest.raises(ApplicationError) as refused:
        await _read([_exception("validationException", "bad request")])
    assert refused.value.non_retryable and "retrying it will not help" in refused.value.message
    too_long = "prompt is too long: 300 tokens > 200 maximum"
    with pytest.raises(APIError, match="prompt is too long"):  # compacts, as on Anthropic's
        await _read([_exception("validationException", too_long)])
    corrupt = bytearray(_chunk(start))
    corrupt[-1] ^= 0xFF
    with pytest.raises(ApplicationError, match="not an event-stream message") as broken:
        await _read([bytes(corrupt)])
    assert not broken.value.non_retryable
