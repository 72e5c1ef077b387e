"""Prompt cache keys, known context windows and the APIs' context-length messages."""

from __future__ import annotations

import pytest

from durable_subagents.providers import (
    OpenAIProvider,
    clear_provider_cache,
    resolve_provider,
)
from durable_subagents.providers._errors import context_length
from durable_subagents.providers._windows import known_window

"""A system prompt of about 1,350 tokens as the fakes count (4 characters a token)."""


def test_prompt_cache_key_goes_to_openai_itself_unless_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")

    def sends(base_url: str | None, setting: str) -> bool:
        clear_provider_cache()
        if base_url is None:
            monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        else:
            monkeypatch.setenv("OPENAI_BASE_URL", base_url)
        provider, _, _ = resolve_provider("openai:gpt-4.1", prompt_cache_key=setting)
        assert isinstance(provider, OpenAIProvider)
        return provider.prompt_cache_key

    try:
        assert sends(None, "auto") and sends("https://api.openai.com/v1", "auto")
        assert not sends("http://localhost:11434/v1", "auto")  # Ollama, vLLM...
        assert sends("http://localhost:11434/v1", "on")
        assert not sends(None, "off")
    finally:
        clear_provider_cache()


@pytest.mark.parametrize(
    ("message", "sizes"),
    [
        ("prompt is too long: 345320 tokens > 199999 maximum", (345320, 199999)),
        (
            "input length and `max_tokens` exceed context limit: 197626 + 21333 > 204658, "
            "decrease input length or `max_tokens` and try again",
            (197626, 204658),
        ),
        (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 411525 tokens (411032 in the messages, 493 in the functions). "
            "Please reduce the length of the messages or functions.",
            (411525, 128000),
        ),
        (
            "This model's maximum context length is 4097 tokens. However, you requested "
            "4128 tokens (2128 in the messages, 2000 in the completion).",
            (4128, 4097),
        ),
    ],
)
def test_context_length_messages_of_both_apis_are_read(
    message: str, sizes: tuple[int, int]
) -> None:
    assert context_length({}, message) == {"tokens": sizes[0], "maximum": sizes[1]}
    assert context_length({}, "messages: at least one message is required") is None
    coded = {"error": {"code": "context_length_exceeded", "message": "too long"}}
    assert context_length(coded, "too long") == {"tokens": None, "maximum": 0}


def test_known_windows() -> None:
    assert known_window("openai:gpt-4.1-mini") == 1_047_576
    assert known_window("openai:gpt-4o-mini") == 128_000
    assert known_window("openai:gpt-4") == 8_192
    assert known_window("anthropic:claude-haiku-4-5") == 200_000
    assert known_window("openai:llama3") is None and known_window("scripted") is None
