"""Claude on Amazon Bedrock and Google Vertex AI, through the real SDK clients.

``AsyncAnthropicBedrock`` signs with SigV4 against ``FakeBedrockServer``, which checks
each signature with its secret and streams AWS's event-stream framing;
``AsyncAnthropicVertex`` sends a bearer token to ``FakeVertexServer``. Both servers play
the Messages API's replies, sign their thinking blocks and refuse any that come back
changed. Turns go through ``resolve_provider`` as a worker's do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from durable_subagents.providers import clear_provider_cache, close_providers, resolve_provider
from durable_subagents.providers._cloud import credentials_problem
from durable_subagents.providers._errors import CONTEXT_LENGTH_ERROR
from durable_subagents.testing import FakeBedrockServer
from durable_subagents.testing.fake_anthropic import REDACTED
from durable_subagents.types import Message, ModelRequest, ToolSpec

from ..helpers.providers import (
    BEDROCK,
    CLOUD_MODELS,
    CLOUD_VARIABLES,
    VERTEX,
    WIRES,
    cloud,
)

TOOLS = [ToolSpec(name="read_file", description="Read a file.", parameters={"type": "object"})]


def request(model: str, messages: list[Message], **options: Any) -> ModelRequest:
    return ModelRequest(model=model, messages=messages, max_tokens=512, **options)


async def turn(model: str, messages: list[Message], **options: Any) -> Any:
    provider, _, name = resolve_provider(model)
    return await provider.complete(request(name, messages, **options))


async def failure(model: str, messages: list[Message] | None = None) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await turn(model, messages or [Message(role="user", content="hi")])
    return caught.value


@pytest.mark.parametrize("wire", WIRES)
async def test_thinking_blocks_go_back_unchanged_in_a_tool_loop(
    monkeypatch: pytest.MonkeyPatch, wire: str
) -> None:
    async with cloud(monkeypatch, wire) as srv:
        srv.add_reply(
            text="Reading.",
            tool_calls=[{"name": "read_file", "arguments": {"path": "a"}}],
            thinking=["THOUGHT-1", REDACTED],
        )
        srv.add_reply(text="a holds alpha.", thinking=["THOUGHT-2"])
        messages = [Message(role="user", content="What does a hold?")]
        first = await turn(CLOUD_MODELS[wire], messages, reasoning_effort="low", tools=TOOLS)
        call = first.tool_calls[0]
        messages += [
            Message(
                role="assistant", content=first.text, tool_calls=[call], reasoning=first.reasoning
            ),
            Message(role="tool", tool_call_id=call.id, content="alpha"),
        ]
        second = await turn(CLOUD_MODELS[wire], messages, reasoning_effort="low", tools=TOOLS)
    assert srv.outcomes == ["200", "200"]  # a block changed would be refused
    assert second.text == "a holds alpha."
    assert [b.type for b in first.reasoning] == ["thinking", "redacted_thinking"]
    assert first.reasoning[0].thinking == "THOUGHT-1" and "THOUGHT" not in first.text
    sent = srv.requests[1]["messages"][1]["content"]
    assert [b["type"] for b in sent[:2]] == ["thinking", "redacted_thinking"]
    assert sent[0]["signature"] == first.reasoning[0].signature
    # the cloud's model id says a Claude 4.5 model: manual thinking, interleaved
    assert srv.requests[1]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "interleaved-thinking" in json.dumps(
        [srv.requests[1].get("anthropic_beta"), srv.request_headers[1].get("anthropic-beta")]
    )


@pytest.mark.parametrize(
    ("model", "mode"),
    [
        ("bedrock:global.anthropic.claude-opus-4-6-v1", "adaptive"),
        ("vertex:claude-opus-4-6@20260201", "adaptive"),
        ("bedrock:anthropic.claude-3-5-haiku-20241022-v1:0", None),
    ],
)
async def test_a_cloud_model_id_thinks_as_its_claude_model_does(
    monkeypatch: pytest.MonkeyPatch, model: str, mode: str | None
) -> None:
    async with cloud(monkeypatch, model.partition(":")[0]) as srv:
        srv.add_reply(text="ok")
        await turn(model, [Message(role="user", content="hi")], reasoning_effort="medium")
    assert (srv.requests[0].get("thinking") or {}).get("type") == mode


@pytest.mark.parametrize("wire", WIRES)
async def test_prompt_caching_reports_reads_and_writes(
    monkeypatch: pytest.MonkeyPatch, wire: str
) -> None:
    system = "You are careful. " * 400
    async with cloud(monkeypatch, wire, min_cache_tokens=1024) as srv:
        messages = [Message(role="user", content="hi")]
        first = await turn(CLOUD_MODELS[wire], messages, system=system, prompt_cache=True)
        messages += [Message(role="assistant", content=first.text)]
        messages += [Message(role="user", content="again")]
        second = await turn(CLOUD_MODELS[wire], messages, system=system, prompt_cache=True)
    assert srv.requests[0]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert first.usage.cache_write_tokens > 0 and first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens >= first.usage.cache_write_tokens
    assert second.usage.input_tokens >= second.usage.cache_read_tokens


@pytest.mark.parametrize("wire", WIRES)
async def test_a_rate_limit_is_retried_after_the_delay_the_cloud_asks(
    monkeypatch: pytest.MonkeyPatch, wire: str
) -> None:
    async with cloud(monkeypatch, wire) as srv:
        srv.add_error(429, headers={"Retry-After": "7"})
        err = await failure(CLOUD_MODELS[wire])
    assert err.type == "ModelUnavailable" and not err.non_retryable
    assert err.next_retry_delay is not None and err.next_retry_delay.total_seconds() == 7
    assert "HTTP 429" in err.message


@pytest.mark.parametrize("wire", WIRES)
async def test_a_prompt_over_the_window_is_a_context_length_error(
    monkeypatch: pytest.MonkeyPatch, wire: str
) -> None:
    async with cloud(monkeypatch, wire, context_window=50) as srv:
        err = await failure(CLOUD_MODELS[wire], [Message(role="user", content="x " * 400)])
    assert srv.outcomes == ["400"]
    assert err.type == CONTEXT_LENGTH_ERROR and err.details[0]["maximum"] == 50


async def test_bedrock_refuses_a_signature_made_with_another_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with cloud(monkeypatch, "bedrock", secret_access_key="the-servers-own") as srv:
        # the worker signs with a secret that is not the server's
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret-access-key-for-tests-only")
        err = await failure(BEDROCK)
    assert srv.outcomes == ["403"]
    assert err.type == "ModelRequestError" and err.non_retryable
    assert "signature we calculated does not match" in err.message
    assert "check the worker's AWS credentials" in err.message
    assert "fake-secret-access-key" not in err.message


BEDROCK_API_KEY = "ABSKQmVkcm9ja0FQSUtleS1mYWtlLWtleS1mb3ItdGVzdHM="


async def test_a_bedrock_api_key_is_sent_as_a_bearer_token_instead_of_a_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``AWS_BEARER_TOKEN_BEDROCK`` the SDK signs nothing, even beside access keys:
    the server takes the key; the worker's start check asks for nothing more."""
    async with cloud(monkeypatch, "bedrock", api_key=BEDROCK_API_KEY) as srv:
        assert "AWS_ACCESS_KEY_ID" not in os.environ
        assert credentials_problem("bedrock") is None
        srv.add_reply(text="by key")
        first = await turn(BEDROCK, [Message(role="user", content="hi")])
        # Access keys beside it (a role's, a profile's) do not make the SDK sign.
        for name, value in FakeBedrockServer().environment().items():
            if name.startswith("AWS_") and name != "AWS_REGION":
                monkeypatch.setenv(name, value)
        await close_providers()  # the next turn builds its client anew
        srv.add_reply(text="still by key")
        second = await turn(BEDROCK, [Message(role="user", content="hi")])
    assert (first.text, second.text) == ("by key", "still by key")
    assert srv.outcomes == ["200", "200"]
    for headers in srv.request_headers:
        assert headers["authorization"] == f"Bearer {BEDROCK_API_KEY}"
        assert "x-amz-date" not in headers and "x-amz-security-token" not in headers


async def test_bedrock_refuses_an_api_key_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with cloud(monkeypatch, "bedrock", api_key=BEDROCK_API_KEY) as srv:
        monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "ABSK-an-expired-key-0000")
        clear_provider_cache()
        err = await failure(BEDROCK)
    assert srv.outcomes == ["403"]
    assert err.type == "ModelRequestError" and err.non_retryable
    assert "Please make sure your API Key is valid" in err.message
    assert "check the worker's AWS_BEARER_TOKEN_BEDROCK" in err.message
    assert "an-expired-key" not in err.message


async def test_vertex_refuses_another_token(monkeypatch: pytest.MonkeyPatch) -> None:
    async with cloud(monkeypatch, "vertex") as srv:
        monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.someone-elses")
        clear_provider_cache()
        err = await failure(VERTEX)
    assert srv.outcomes == ["401"]
    assert err.type == "ModelRequestError" and err.non_retryable
    assert "invalid authentication credentials" in err.message
    assert "GOOGLE_OAUTH_ACCESS_TOKEN" in err.message and "ya29.someone" not in err.message


@pytest.mark.parametrize("wire", WIRES)
async def test_a_model_the_region_lacks_says_which_region(
    monkeypatch: pytest.MonkeyPatch, wire: str
) -> None:
    async with cloud(monkeypatch, wire, models=["claude-other"]) as srv:
        err = await failure(CLOUD_MODELS[wire])
    assert srv.outcomes == ["404"]
    assert err.type == "ModelRequestError" and err.non_retryable
    assert f"and that {srv.region}" in err.message  # type: ignore[attr-defined]
    assert ("AWS_REGION" if wire == "bedrock" else "CLOUD_ML_REGION") in err.message


async def test_bedrock_access_denied_names_the_permission(monkeypatch: pytest.MonkeyPatch) -> None:
    async with cloud(monkeypatch, "bedrock") as srv:
        srv.add_error(403)
        err = await failure(BEDROCK)
    assert err.non_retryable
    assert "You don't have access to the model" in err.message
    assert "bedrock:InvokeModelWithResponseStream" in err.message


async def test_vertex_in_another_project_is_permission_denied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with cloud(monkeypatch, "vertex") as srv:
        monkeypatch.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "not-mine")
        clear_provider_cache()
        err = await failure(VERTEX)
    assert srv.outcomes == ["403"] and err.non_retryable
    assert "projects/not-mine" in err.message and "roles/aiplatform.user" in err.message


@pytest.mark.parametrize("wire", WIRES)
async def test_a_stream_cut_short_is_retried_never_taken(
    monkeypatch: pytest.MonkeyPatch, wire: str
) -> None:
    async with cloud(monkeypatch, wire) as srv:
        srv.add_fault("truncate", after_chunks=3)
        srv.add_reply(text="the whole answer")
        err = await failure(CLOUD_MODELS[wire])
        whole = await turn(CLOUD_MODELS[wire], [Message(role="user", content="hi")])
    assert err.type == "ModelUnavailable" and "message_stop" in err.message
    assert whole.text == "the whole answer"


async def test_a_hostile_bedrock_model_id_stays_one_path_segment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model id a model chose cannot reach another path of the service, or none."""
    async with cloud(monkeypatch, "bedrock") as srv:
        srv.add_reply(text="ok")
        await turn("bedrock:x/../../../admin?y#z", [Message(role="user", content="hi")])
        err = await failure("bedrock:..")
    [path] = srv.paths
    assert path.startswith("/model/") and path.endswith("/invoke-with-response-stream")
    assert path.count("/") == 3  # /model/<one segment>/invoke-with-response-stream
    assert err.non_retryable and srv.outcomes == ["200"]  # ".." never left the worker


# ----------------------------------------------------- credentials missing on the worker

_TURN = """
import asyncio, sys
from temporalio.exceptions import ApplicationError
from durable_subagents.providers import resolve_provider
from durable_subagents.types import Message, ModelRequest

async def main():
    try:
        provider, _, name = resolve_provider(sys.argv[1])
        hello = [Message(role="user", content="hi")]
        await provider.complete(ModelRequest(model=name, messages=hello))
    except ApplicationError as err:
        print(err.type, err.non_retryable, err.message)

asyncio.run(main())
"""


def turn_in_a_fresh_process(model: str, env: dict[str, str]) -> str:
    """One turn in a process of its own: the SDKs cache credentials per process."""
    base = {k: v for k, v in os.environ.items() if k not in CLOUD_VARIABLES}
    blank = {
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
        "CLOUDSDK_CONFIG": "/nonexistent",
        "NO_GCE_CHECK": "True",
    }
    done = subprocess.run(
        [sys.executable, "-c", _TURN, model],
        env={**base, **blank, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("model", "env", "said"),
    [
        (
            BEDROCK,
            {"AWS_REGION": "us-east-1", "ANTHROPIC_BEDROCK_BASE_URL": "http://127.0.0.1:9"},
            "bedrock: no AWS credentials found on the worker; give the worker AWS credentials",
        ),
        (
            BEDROCK,
            {"AWS_REGION": "us-east-1", "AWS_PROFILE": "nope"},
            "bedrock: the worker's AWS credentials cannot be used (ProfileNotFound",
        ),
        (BEDROCK, {}, "bedrock: no AWS region on the worker; set AWS_REGION"),
        (VERTEX, {}, "vertex: CLOUD_ML_REGION is not set on the worker"),
        (
            VERTEX,
            {"CLOUD_ML_REGION": "us-east5", "ANTHROPIC_VERTEX_PROJECT_ID": "p"},
            "vertex: no Google credentials found on the worker; run `gcloud auth",
        ),
        (
            VERTEX,
            {"CLOUD_ML_REGION": "us-east5", "GOOGLE_OAUTH_ACCESS_TOKEN": "ya29.x"},
            "vertex: no Google Cloud project on the worker; set ANTHROPIC_VERTEX_PROJECT_ID",
        ),
    ],
)
def test_missing_settings_fail_the_turn_for_good_saying_what_to_set(
    model: str, env: dict[str, str], said: str
) -> None:
    out = turn_in_a_fresh_process(model, env)
    assert out.startswith("ModelRequestError True "), out
    assert said in out, out
    assert "ya29.x" not in out
