"""OpenAI-compatible servers' profiles: detected from the base URL, or named."""

from __future__ import annotations

import pytest

from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest
from durable_subagents.providers._profiles import PROFILES, detect_profile, profile_named
from durable_subagents.providers.openai import estimate_usage
from durable_subagents.types import Usage
from durable_subagents.worker._models import worker_models


@pytest.mark.parametrize(
    ("base_url", "profile"),
    [
        (None, "openai"),
        ("https://api.openai.com/v1", "openai"),
        ("http://localhost:11434/v1", "ollama"),
        ("http://ollama:8080/v1", "ollama"),
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("http://litellm.internal:4000", "litellm"),
        ("http://0.0.0.0:4000/v1", "litellm"),
        ("http://gpu-box:8000/v1", "vllm"),
        ("http://vllm.svc.cluster.local/v1", "vllm"),
        ("http://127.0.0.1:8080/v1", "llamacpp"),
        ("http://llama-server:9000/v1", "llamacpp"),
        ("https://example.com/v1", "compatible"),
        ("https://api.openai.com.evil.example/v1", "compatible"),
        ("http://host:notaport/v1", "compatible"),
    ],
)
def test_the_base_url_names_the_profile(base_url: str | None, profile: str) -> None:
    assert detect_profile(base_url).name == profile


def test_a_profile_is_named_in_any_case_and_an_unknown_one_lists_the_known() -> None:
    assert profile_named(" Ollama ") is PROFILES["ollama"]
    with pytest.raises(ValueError, match="unknown OpenAI-compatible profile 'olama'; known: "):
        profile_named("olama")


def test_only_openai_gets_max_completion_tokens() -> None:
    fields = {name: p.max_tokens_field for name, p in PROFILES.items()}
    assert {n for n, f in fields.items() if f == "max_completion_tokens"} == {"openai"}


def test_an_estimate_is_marked_and_the_mark_survives_a_sum() -> None:
    estimate = estimate_usage(400, 40)
    assert (estimate.input_tokens, estimate.output_tokens, estimate.estimated) == (100, 10, True)
    total = Usage(input_tokens=5) + estimate + Usage(output_tokens=1)
    assert total.estimated and total.input_tokens == 105
    assert not (Usage() + Usage()).estimated
    assert Usage.model_validate({"input_tokens": 3}).estimated is False  # old payloads


def test_a_worker_with_an_unknown_profile_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUBAGENTS_OPENAI_PROFILE", "olama")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    with pytest.raises(InvalidRequest) as caught:
        worker_models(Settings(model="openai:gpt-4.1-mini"))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("SUBAGENTS_OPENAI_PROFILE=olama: unknown OpenAI-compatible")
    monkeypatch.setenv("SUBAGENTS_OPENAI_PROFILE", "vllm")
    worker_models(Settings(model="openai:gpt-4.1-mini"))


def test_an_estimate_is_shown_as_one_and_kept_out_of_payloads_when_false() -> None:
    from durable_subagents.cli._render import usage_text
    from durable_subagents.wire._payloads import ModelTurnResult

    assert usage_text(estimate_usage(400, 40)) == "in 100 / out 10 (estimated)"
    assert usage_text(Usage(input_tokens=100, output_tokens=10)) == "in 100 / out 10"
    for usage, kept in ((Usage(input_tokens=1), False), (estimate_usage(4, 4), True)):
        dumped = ModelTurnResult(head="h", usage=usage).model_dump()
        assert ("estimated" in dumped["usage"]) is kept
