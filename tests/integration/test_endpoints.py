"""One worker, several model servers: SUBAGENTS_ENDPOINTS on a real worker and dev server.

Each endpoint is a fake server spoken to through the real SDK of its wire; the keys
come from the worker's environment through ``${VAR}`` and must reach their own server
only, and no workflow history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.providers import clear_provider_cache, close_providers, resolve_provider
from durable_subagents.providers._endpoints import parse_endpoints
from durable_subagents.testing import (
    FakeAnthropicServer,
    FakeOpenAIResponsesServer,
    FakeOpenAIServer,
)
from durable_subagents.testing.fake_openai import SERVER_QUIRKS
from durable_subagents.types import Message, ModelRequest
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.cli import arun

OLLAMA_KEY = "ollama-key-7c1e"
GATEWAY_KEY = "sk-gateway-secret-93ad"


async def test_one_worker_serves_two_endpoints_each_with_its_own_key(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ollama:`` goes to a Chat Completions server in Ollama's quirks, ``gateway:`` to
    an Anthropic Messages server; each sees only its own key and header, and a model of
    an endpoint the worker lacks fails its task at once, naming those it has."""
    monkeypatch.setenv("OLLAMA_KEY", OLLAMA_KEY)
    monkeypatch.setenv("GATEWAY_KEY", GATEWAY_KEY)
    monkeypatch.delenv("TEAM", raising=False)
    async with (
        FakeOpenAIServer(quirks="ollama") as ollama,
        FakeAnthropicServer() as gateway,
    ):
        declaration = f"""
[endpoints.ollama]
wire = "openai"
base_url = "{ollama.base_url}"
api_key = "${{OLLAMA_KEY}}"
profile = "ollama"

[endpoints.gateway]
wire = "anthropic"
base_url = "{gateway.base_url}"
api_key = "${{GATEWAY_KEY}}"
headers = {{ "X-Team" = "${{TEAM:-research}}" }}
"""
        ollama.add_reply(text="from ollama")
        gateway.add_reply(text="from the gateway")
        worker_settings = settings.model_copy(
            update={"endpoints": SecretStr(declaration), "models": "*"}
        )
        clear_provider_cache()
        try:
            async with create_worker(temporal_client, worker_settings):
                local = await client.spawn_task("explore", "hi", model="ollama:llama3.1")
                remote = await client.spawn_task("explore", "hi", model="gateway:claude-sonnet-4-5")
                stray = await client.spawn_task("explore", "hi", model="olama:llama3.1")
                infos = [
                    await client.check_task(t, wait=True, timeout=CEILING)
                    for t in (local, remote, stray)
                ]
        finally:
            await close_providers()
    local_info, remote_info, stray_info = infos
    assert local_info.status == TaskStatus.COMPLETED, local_info.error
    assert local_info.result == "from ollama"
    assert remote_info.status == TaskStatus.COMPLETED, remote_info.error
    assert remote_info.result == "from the gateway"

    [ollama_request] = ollama.requests
    [ollama_headers] = ollama.request_headers
    assert ollama_request["model"] == "llama3.1"
    assert ollama_headers["authorization"] == f"Bearer {OLLAMA_KEY}"
    assert "x-team" not in ollama_headers
    # The server refuses max_completion_tokens, and thinks in reasoning_content: the
    # answer is the answer alone.
    assert "max_completion_tokens" not in ollama_request
    assert ollama.outcomes == ["200"]
    assert SERVER_QUIRKS["ollama"].thinking not in (local_info.result or "")

    [gateway_request] = gateway.requests
    [gateway_headers] = gateway.request_headers
    assert gateway_request["model"] == "claude-sonnet-4-5"
    # The SDK sends the key as x-api-key or, in its newer releases, as a bearer token.
    sent = gateway_headers.get("x-api-key") or gateway_headers["authorization"]
    assert sent.removeprefix("Bearer ") == GATEWAY_KEY
    assert gateway_headers["x-team"] == "research"
    assert OLLAMA_KEY not in str(gateway_headers) and GATEWAY_KEY not in str(ollama_headers)

    assert stray_info.status == TaskStatus.FAILED
    assert "unknown model 'olama:llama3.1'" in (stray_info.error or "")
    assert "(this worker has: gateway, ollama)" in (stray_info.error or "")

    for task_id in (local, remote, stray):
        history = await temporal_client.get_workflow_handle(task_id).fetch_history()
        text = history.to_json()
        assert task_id in text  # the history is the task's, and readable here
        assert OLLAMA_KEY not in text and GATEWAY_KEY not in text


async def test_an_override_takes_the_openai_models_and_a_responses_endpoint_its_own(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``override = true`` sends ``openai:`` to the endpoint, not to ``OPENAI_BASE_URL``'s
    server; an ``openai-responses`` endpoint speaks the Responses API."""
    async with (
        FakeOpenAIServer() as by_env,
        FakeOpenAIServer() as proxy,
        FakeOpenAIResponsesServer() as reasoner,
    ):
        monkeypatch.setenv("OPENAI_BASE_URL", by_env.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-of-the-environment")
        monkeypatch.setenv("PROXY_KEY", "sk-of-the-proxy")
        declaration = json.dumps(
            {
                "endpoints": {
                    "openai": {
                        "wire": "openai",
                        "base_url": proxy.base_url,
                        "api_key": "${PROXY_KEY}",
                        "override": True,
                    },
                    "reasoner": {"wire": "openai-responses", "base_url": reasoner.base_url},
                }
            }
        )
        proxy.add_reply(text="from the proxy")
        reasoner.add_reply(text="from the reasoner")
        worker_settings = settings.model_copy(
            update={"endpoints": SecretStr(declaration), "models": "*"}
        )
        clear_provider_cache()
        try:
            async with create_worker(temporal_client, worker_settings):
                infos = []
                for model in ("openai:gpt-4.1-mini", "reasoner:gpt-5-mini"):
                    task_id = await client.spawn_task("explore", "hi", model=model)
                    infos.append(await client.check_task(task_id, wait=True, timeout=CEILING))
        finally:
            await close_providers()
    assert [(i.status, i.result) for i in infos] == [
        (TaskStatus.COMPLETED, "from the proxy"),
        (TaskStatus.COMPLETED, "from the reasoner"),
    ], [i.error for i in infos]
    assert [r["model"] for r in proxy.requests] == ["gpt-4.1-mini"]
    assert proxy.request_headers[0]["authorization"] == "Bearer sk-of-the-proxy"
    assert [r["model"] for r in reasoner.requests] == ["gpt-5-mini"]
    assert reasoner.requests[0]["store"] is False
    assert reasoner.request_headers[0]["authorization"] == "Bearer not-needed"
    assert by_env.requests == []  # both tasks finished above: nothing is still to come


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_a_servers_refusal_never_shows_the_endpoints_key_or_headers(wire: str) -> None:
    """A server that echoes what it was sent (a proxy's error page) has its key and
    header values redacted from the task's error."""
    key, token = "key-without-a-known-shape-1f2e", "gateway-token-9a8b"
    server = FakeOpenAIServer() if wire == "openai" else FakeAnthropicServer()
    async with server as srv:
        echo = f"denied: key {key}, token {token}"
        srv.add_error(401, {"error": {"message": echo, "type": "authentication_error"}})
        declaration = {
            "endpoints": {
                "proxy": {
                    "wire": wire,
                    "base_url": srv.base_url,
                    "api_key": key,
                    "headers": {"X-Gateway-Token": token},
                }
            }
        }
        endpoints = parse_endpoints(json.dumps(declaration), {})
        provider, _, model = resolve_provider("proxy:m", endpoints=endpoints)
        try:
            with pytest.raises(ApplicationError) as caught:
                await provider.complete(
                    ModelRequest(model=model, messages=[Message(role="user", content="hi")])
                )
        finally:
            await close_providers()
    assert srv.request_headers[0]["x-gateway-token"] == token
    assert caught.value.non_retryable
    assert "denied: key <redacted>, token <redacted>" in caught.value.message
    assert key not in str(caught.value) and token not in str(caught.value)


@pytest.mark.parametrize(
    ("declaration", "line"),
    [
        (
            '[endpoints.ollama]\nwire = "grpc"\nbase_url = "http://localhost:11434/v1"\n',
            "endpoint 'ollama': wire 'grpc' is not one we speak; use one of openai, "
            "openai-responses, anthropic",
        ),
        (
            '[endpoints.ollama]\nwire = "openai"\nbase_url = "http://h/v1"\n'
            'api_key = "${NO_SUCH_KEY_SET}"\n',
            "endpoint 'ollama': the worker's environment lacks NO_SUCH_KEY_SET (set it, or "
            "give a default: ${VAR:-default})",
        ),
        ('[endpoints.ollama]\nwire = "openai"\n[endpoints.ollama]\n', "not valid TOML"),
    ],
)
async def test_a_bad_endpoints_file_stops_the_worker_in_one_line(
    env: dict[str, str], tmp_path: Path, declaration: str, line: str
) -> None:
    path = tmp_path / "endpoints.toml"
    path.write_text(declaration)
    result = await arun("worker", env={**env, "SUBAGENTS_ENDPOINTS": str(path)})
    assert result.code != 0
    [error] = result.err.strip().splitlines()
    assert error.startswith(f"error: SUBAGENTS_ENDPOINTS ({path}): "), error
    assert line in error
    assert "Traceback" not in result.out + result.err
