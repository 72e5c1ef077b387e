"""Named model endpoints (SUBAGENTS_ENDPOINTS): parsing, ${VAR} expansion, model names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durable_subagents import InvalidRequest, Settings
from durable_subagents.providers import (
    AnthropicProvider,
    OpenAIProvider,
    OpenAIResponsesProvider,
    clear_provider_cache,
    parse_model,
    resolve_provider,
)
from durable_subagents.providers._endpoints import Endpoint, parse_endpoints
from durable_subagents.providers._names import named_model
from durable_subagents.worker import worker_models

TOML = """
[endpoints.ollama]
wire = "openai"
base_url = "http://localhost:11434/v1"
profile = "ollama"

[endpoints.vllm-a]
wire = "openai"
base_url = "${VLLM_URL:-http://gpu-a:8000/v1}"
api_key = "${VLLM_A_KEY}"
headers = { "X-Team" = "${TEAM:-research}", "X-Token" = "${GATEWAY_TOKEN}" }

[endpoints.claude-proxy]
wire = "anthropic"
base_url = "https://llm-gateway.example/anthropic"
api_key = "${PROXY_KEY:-}"
"""
ENV = {"VLLM_A_KEY": "sk-vllm", "GATEWAY_TOKEN": "gw-secret"}


@pytest.fixture(autouse=True)
def _fresh_providers() -> None:
    clear_provider_cache()


def one_line(err: pytest.ExceptionInfo[InvalidRequest]) -> str:
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("SUBAGENTS_ENDPOINTS")
    return message


def test_a_toml_file_declares_endpoints_with_variables_expanded(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.toml"
    path.write_text(TOML)
    endpoints = parse_endpoints(str(path), ENV)
    assert list(endpoints) == ["ollama", "vllm-a", "claude-proxy"]
    assert endpoints["ollama"] == Endpoint(
        name="ollama", wire="openai", base_url="http://localhost:11434/v1", profile="ollama"
    )
    vllm = endpoints["vllm-a"]
    assert (vllm.base_url, vllm.api_key, vllm.profile) == (
        "http://gpu-a:8000/v1",
        "sk-vllm",
        None,
    )
    assert dict(vllm.headers) == {"X-Team": "research", "X-Token": "gw-secret"}
    assert set(vllm.secrets) == {"sk-vllm", "research", "gw-secret"}
    # ${VAR:-} is an empty default: a server that takes no key.
    assert endpoints["claude-proxy"].api_key is None
    assert "sk-vllm" not in repr(endpoints) and "gw-secret" not in repr(endpoints)


def test_json_and_inline_declarations_mean_the_same(tmp_path: Path) -> None:
    from_toml = parse_endpoints(TOML, ENV)
    document = {
        "endpoints": {
            "ollama": {
                "wire": "openai",
                "base_url": "http://localhost:11434/v1",
                "profile": "ollama",
            }
        }
    }
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps(document))
    assert parse_endpoints(str(path), {})["ollama"] == from_toml["ollama"]
    assert parse_endpoints(json.dumps(document), {})["ollama"] == from_toml["ollama"]
    assert parse_endpoints("", {}) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[endpoints.x]\nwire = "grpc"\nbase_url = "http://h/v1"\n',
            "endpoint 'x': wire 'grpc' is not one we speak; use one of openai, "
            "openai-responses, anthropic",
        ),
        (
            '[endpoints.x]\nwire = "openai"\nbase-url = "http://h/v1"\n',
            "endpoint 'x': unknown field 'base-url'; the fields are api_key, base_url, "
            "headers, override, profile, wire",
        ),
        ('[endpoints.Big]\nwire = "openai"\nbase_url = "http://h/v1"\n', "'Big': not an"),
        ('[endpoints."a:b"]\nwire = "openai"\nbase_url = "http://h/v1"\n', "'a:b': not an"),
        ('[endpoints.x]\nwire = "openai"\nbase_url = "localhost:1/v1"\n', "http:// or https://"),
        ('[endpoints.x]\nwire = "openai"\nbase_url = "http://h"\n[endpoints.x]\n', "not valid"),
        ('{"endpoints": {"x": {"wire": "openai"}, "x": {}}}', "'x' is declared twice"),
        ('{"endpoints": {"x": {"wire": "openai"}', "not valid JSON"),
        ('{"ollama": {"wire": "openai"}}', "expected tables [endpoints.NAME]"),
        (
            '[endpoints.x]\nwire = "openai"\nbase_url = "http://h/v1"\napi_key = "${NOPE}"\n',
            "endpoint 'x': the worker's environment lacks NOPE (set it, or give a default: "
            "${VAR:-default})",
        ),
        (
            '[endpoints.x]\nwire = "anthropic"\nbase_url = "http://h"\nprofile = "ollama"\n',
            "profile is for wire 'openai'",
        ),
        (
            '[endpoints.x]\nwire = "openai"\nbase_url = "http://h"\nprofile = "olama"\n',
            "unknown profile 'olama'; known: openai, ollama,",
        ),
        (
            '[endpoints.openai]\nwire = "openai"\nbase_url = "http://h/v1"\n',
            "'openai' is a built-in provider's name (set override = true to send openai: "
            "models to this endpoint)",
        ),
        (
            '[endpoints.bedrock]\nwire = "anthropic"\nbase_url = "http://h"\noverride = true\n',
            "'bedrock' is a built-in provider's name (it cannot be replaced)",
        ),
        (
            '[endpoints.anthropic]\nwire = "openai"\nbase_url = "http://h"\noverride = true\n',
            "an override of anthropic speaks wire 'anthropic'",
        ),
        (
            '[endpoints.x]\nwire = "openai"\nbase_url = "http://h"\noverride = true\n',
            "override = true is only for a built-in provider's name",
        ),
        ("/nonexistent/endpoints.toml", "cannot read the file (No such file or directory)"),
    ],
)
def test_a_bad_declaration_is_one_line_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_endpoints(text, {})
    assert message in one_line(err)


def test_an_override_replaces_a_built_in_provider() -> None:
    text = '[endpoints.openai]\nwire = "openai"\nbase_url = "http://proxy:4000/v1"\noverride = true'
    [endpoint] = parse_endpoints(text, {}).values()
    provider, full, model = resolve_provider("openai:gpt-4.1", endpoints={"openai": endpoint})
    assert isinstance(provider, OpenAIProvider)
    assert (full, model, provider.profile.name) == ("openai:gpt-4.1", "gpt-4.1", "litellm")


def test_a_model_of_an_endpoint_resolves_to_its_wire_and_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SUBAGENTS_OPENAI_PROFILE", raising=False)
    endpoints = parse_endpoints(
        TOML + '\n[endpoints.resp]\nwire = "openai-responses"\nbase_url = "https://r/v1"\n', ENV
    )
    ollama, full, model = resolve_provider("ollama:llama3.1", endpoints=endpoints)
    assert isinstance(ollama, OpenAIProvider)
    assert (full, model, ollama.profile.name) == ("ollama:llama3.1", "llama3.1", "ollama")
    vllm, _, _ = resolve_provider("vllm-a:qwen", endpoints=endpoints)
    assert isinstance(vllm, OpenAIProvider) and vllm.profile.name == "vllm"  # from the port
    assert vllm is resolve_provider("vllm-a:other-model", endpoints=endpoints)[0]
    assert isinstance(resolve_provider("claude-proxy:c", endpoints=endpoints)[0], AnthropicProvider)
    assert isinstance(
        resolve_provider("resp:gpt-5", endpoints=endpoints)[0], OpenAIResponsesProvider
    )
    with pytest.raises(InvalidRequest, match=r"\(this worker has: claude-proxy, ollama, resp"):
        resolve_provider("olama:llama3.1", endpoints=endpoints)
    with pytest.raises(InvalidRequest, match=r"\(this worker has none\)"):
        resolve_provider("ollama:llama3.1")


def test_only_a_worker_knows_its_endpoints() -> None:
    # A client (endpoints=None) takes any well-formed NAME:model; a worker only its own.
    assert parse_model("ollama:llama3.1") == ("ollama", "ollama:llama3.1", "llama3.1")
    assert parse_model("ollama:llama3.1", endpoints={"ollama"})[0] == "ollama"
    with pytest.raises(InvalidRequest, match=r"unknown model 'ollama:llama3\.1'"):
        parse_model("ollama:llama3.1", endpoints=set())
    for malformed in ("Ollama:x", "gpt-4.1", "x y:z"):
        with pytest.raises(InvalidRequest, match="unknown model"):
            parse_model(malformed)
    with pytest.raises(InvalidRequest, match="names no model; use ollama:<model>"):
        parse_model("ollama: ")


def test_metrics_name_an_endpoints_models_as_configured() -> None:
    assert named_model("ollama:llama3.1", "ollama:llama3.1", endpoints={"ollama"}) == (
        "ollama:llama3.1"
    )
    assert named_model("default", "ollama:llama3.1") == "ollama:llama3.1"
    assert named_model("ollama:chosen-by-a-model", None, endpoints={"ollama"}) == "ollama:other"
    assert named_model("stranger:x", None, endpoints={"ollama"}) == "other:other"


def test_a_worker_checks_its_endpoints_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SUBAGENTS_MODELS", "SUBAGENTS_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VLLM_A_KEY", "sk-vllm")
    monkeypatch.setenv("GATEWAY_TOKEN", "gw")
    settings = Settings(endpoints=TOML, model="ollama:llama3.1", models="ollama:llama3*,vllm-a:*")
    assert "sk-vllm" not in repr(settings) and "localhost:11434" not in repr(settings)
    models = worker_models(settings)  # no OPENAI_API_KEY: the endpoint has what it needs
    assert models.endpoints is not None
    assert set(models.endpoints) == {"ollama", "vllm-a", "claude-proxy"}
    assert models.refusal("vllm-a:qwen") is None
    assert models.refusal("ollama:qwen3") is not None
    with pytest.raises(InvalidRequest, match=r"^SUBAGENTS_MODEL=olama:x: unknown model"):
        worker_models(settings.model_copy(update={"model": "olama:x"}))
    with pytest.raises(InvalidRequest, match=r"'vllm-b:\*' is not a model pattern"):
        worker_models(settings.model_copy(update={"models": "ollama:*,vllm-b:*"}))
    monkeypatch.delenv("GATEWAY_TOKEN")
    with pytest.raises(InvalidRequest, match="lacks GATEWAY_TOKEN") as err:
        worker_models(settings)
    one_line(err)


def test_a_client_told_the_patterns_checks_endpoint_models_without_knowing_endpoints() -> None:
    from durable_subagents.client._client import client_models

    models = client_models(Settings(models="ollama:llama3*,openai:*", allow_scripted=False))
    assert models is not None and models.endpoints is None
    assert models.refusal("ollama:llama3.1") is None
    refused = models.refusal("ollama:qwen3")
    assert refused is not None and "SUBAGENTS_MODELS allows ollama:llama3*" in refused
    with pytest.raises(InvalidRequest, match="unknown model"):
        models.refusal("Ollama llama3")
