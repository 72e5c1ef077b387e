"""Which models a worker runs: its default, SUBAGENTS_MODELS, and scripted where enabled."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from durable_subagents import InvalidRequest, Settings
from durable_subagents.providers._allowlist import ModelAllowlist, parse_model_patterns
from durable_subagents.worker import worker_models


@pytest.fixture(autouse=True)
def _no_suite_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults, not what the suite's workers are given; no provider keys."""
    for name in (
        "SUBAGENTS_ALLOW_SCRIPTED",
        "SUBAGENTS_MODELS",
        "SUBAGENTS_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)


def test_patterns_bound_the_models_and_the_default_is_always_allowed() -> None:
    models = ModelAllowlist(
        parse_model_patterns("openai:gpt-4.1*, anthropic:*"), "openai:gpt-4.1-mini"
    )
    assert models.refusal("openai:gpt-4.1") is None
    assert models.refusal("openai:gpt-4.1-nano") is None
    assert models.refusal("anthropic:claude-haiku-4-5") is None
    assert models.refusal("default") is None
    refused = models.refusal("openai:gpt-5")
    assert refused == (
        "model 'openai:gpt-5' is not allowed: SUBAGENTS_MODELS allows "
        "openai:gpt-4.1*,anthropic:*; ask for one of those, or add it to SUBAGENTS_MODELS "
        "on the workers"
    )


def test_without_patterns_a_worker_runs_its_default_model_only() -> None:
    models = ModelAllowlist((), "anthropic:claude-haiku-4-5")
    assert models.refusal("anthropic:claude-haiku-4-5") is None
    refused = models.refusal("anthropic:claude-opus-4-1")
    assert refused is not None
    assert "runs its SUBAGENTS_MODEL (anthropic:claude-haiku-4-5) only" in refused
    assert "set SUBAGENTS_MODELS on the workers (e.g. anthropic:*)" in refused
    assert ModelAllowlist(("*",), "anthropic:claude-haiku-4-5").refusal("openai:o3") is None


def test_the_scripted_model_runs_only_where_it_is_enabled() -> None:
    off = ModelAllowlist(("*",), "openai:gpt-4.1-mini")
    refused = off.refusal('scripted:[{"text": "hi"}]')
    assert refused is not None and "runs only where it is enabled" in refused
    assert '"hi"' not in refused  # a script is not repeated
    assert off.refusal("scripted") is not None
    assert ModelAllowlist((), None).refusal("default") is not None  # default is scripted
    on = ModelAllowlist((), None, scripted=True)
    assert on.refusal("default") is None and on.refusal("scripted:demo-general") is None


@pytest.mark.parametrize("text", ["gpt-4.1", "mistral:large", "openai:", "openai*"])
def test_a_pattern_without_a_known_provider_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequest, match="is not a model pattern"):
        parse_model_patterns(text, frozenset({"ollama"}))


def test_a_pattern_may_name_an_endpoint_and_a_client_takes_any_endpoint_name() -> None:
    assert parse_model_patterns("ollama:*", frozenset({"ollama"})) == ("ollama:*",)
    with pytest.raises(InvalidRequest, match=r"endpoint of SUBAGENTS_ENDPOINTS \(ollama here\)"):
        parse_model_patterns("mistral:large", frozenset({"ollama"}))
    # A client does not know the workers' endpoints: a well-formed name is theirs to judge.
    assert parse_model_patterns("mistral:large") == ("mistral:large",)
    for malformed in ("Mistral:large", "mis tral:large", "-x:y"):
        with pytest.raises(InvalidRequest, match="is not a model pattern"):
            parse_model_patterns(malformed)


def test_the_setting_checks_its_patterns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBAGENTS_MODELS", "openai:gpt-4.1*,gpt-5")
    with pytest.raises(ValidationError, match="'gpt-5' is not a model pattern"):
        Settings()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {},
            "this worker has no model: set SUBAGENTS_MODEL (for example openai:gpt-4.1-mini "
            "or anthropic:claude-haiku-4-5), or SUBAGENTS_ALLOW_SCRIPTED=true to serve the "
            "offline scripted model",
        ),
        ({"SUBAGENTS_MODEL": "foo"}, "SUBAGENTS_MODEL=foo: unknown model 'foo'"),
        (
            {"SUBAGENTS_MODEL": "scripted"},
            "SUBAGENTS_MODEL=scripted: the offline scripted model is not enabled on this "
            "worker; set SUBAGENTS_MODEL to a real model, or SUBAGENTS_ALLOW_SCRIPTED=true",
        ),
        (
            {"SUBAGENTS_MODEL": "openai:gpt-5", "SUBAGENTS_MODELS": "anthropic:*"},
            "SUBAGENTS_MODEL=openai:gpt-5 is not among SUBAGENTS_MODELS (anthropic:*): add "
            "it there, or change SUBAGENTS_MODEL",
        ),
        (
            {"SUBAGENTS_MODEL": "openai:gpt-4.1-mini"},
            "SUBAGENTS_MODEL=openai:gpt-4.1-mini needs OPENAI_API_KEY: set it in the "
            "worker's environment (or OPENAI_BASE_URL, for a server that needs none), or "
            "change SUBAGENTS_MODEL",
        ),
        (
            {"SUBAGENTS_MODEL": "openai-responses:gpt-5-mini"},
            "SUBAGENTS_MODEL=openai-responses:gpt-5-mini needs OPENAI_API_KEY: set it in the "
            "worker's environment (or OPENAI_BASE_URL, for a server that needs none), or "
            "change SUBAGENTS_MODEL",
        ),
        (
            {"SUBAGENTS_MODEL": "anthropic:claude-haiku-4-5", "OPENAI_API_KEY": "k"},
            "SUBAGENTS_MODEL=anthropic:claude-haiku-4-5 needs ANTHROPIC_API_KEY",
        ),
    ],
)
def test_a_worker_whose_default_model_cannot_run_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(InvalidRequest) as err:
        worker_models(Settings())
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "env",
    [
        {"SUBAGENTS_ALLOW_SCRIPTED": "true"},
        {"SUBAGENTS_MODEL": "scripted:demo-general", "SUBAGENTS_ALLOW_SCRIPTED": "1"},
        {"SUBAGENTS_MODEL": "openai:gpt-4.1-mini", "OPENAI_API_KEY": "k"},
        {"SUBAGENTS_MODEL": "openai-responses:gpt-5-mini", "OPENAI_API_KEY": "k"},
        {"SUBAGENTS_MODEL": "openai:llama3", "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"},
        {
            "SUBAGENTS_MODEL": "anthropic:claude-haiku-4-5",
            "ANTHROPIC_API_KEY": "k",
            "SUBAGENTS_MODELS": "anthropic:claude-haiku*",
        },
    ],
)
def test_a_worker_with_a_model_it_can_run_starts(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    models = worker_models(Settings())
    assert models.refusal("default") is None


def test_each_openai_wire_is_allowed_by_its_own_prefix() -> None:
    chat = ModelAllowlist(parse_model_patterns("openai:*"), "openai:gpt-5")
    assert chat.refusal("openai:gpt-5-mini") is None
    assert chat.refusal("openai-responses:gpt-5-mini") is not None
    both = ModelAllowlist(parse_model_patterns("openai:*,openai-responses:gpt-5*"), None)
    assert both.refusal("openai-responses:gpt-5-mini") is None
    assert both.refusal("openai-responses:o3") is not None
    everything = ModelAllowlist(parse_model_patterns("*"), None)
    assert everything.refusal("openai-responses:o3") is None
