"""The context windows of known models: how many input tokens a request may carry.

A worker compacts a task's conversation before it would pass ``COMPACT_AT`` of its
model's window. A model not in this table has no window until one is configured
(``SUBAGENTS_CONTEXT_WINDOW``, an agent's ``context_window``) or the provider refuses a
request as too long: its error names the maximum, and the task keeps it.
"""

from __future__ import annotations

from ._names import CLAUDE_PLATFORMS, claude_model

__all__ = ["CONTEXT_WINDOWS", "known_window", "maker_model"]

CONTEXT_WINDOWS: dict[str, int] = {
    # OpenAI: the input limit (GPT-5's 400K window holds 272K of input and 128K of output)
    "openai:gpt-5": 272_000,
    "openai:gpt-4.1": 1_047_576,
    "openai:gpt-4o": 128_000,
    "openai:gpt-4-turbo": 128_000,
    "openai:gpt-4": 8_192,
    "openai:gpt-3.5-turbo": 16_385,
    "openai:o1": 200_000,
    "openai:o3": 200_000,
    "openai:o4-mini": 200_000,
    # Anthropic: 200K for every Claude model (1M for some only with a beta header)
    "anthropic:claude-": 200_000,
}
"""Window in tokens by ``provider:model`` prefix; the longest prefix that matches wins."""


def maker_model(model: str) -> str:
    """The same model as its maker's own API names it (``provider:model``).

    A model behind the Responses API is the one behind Chat Completions
    (``openai:...``), and a Claude model on Bedrock or Vertex the one on Anthropic's
    API (``anthropic:claude-...``, see ``claude_model``); other names are as given.
    """
    provider, _, name = model.partition(":")
    if provider == "openai-responses":
        return f"openai:{name}"
    if provider in CLAUDE_PLATFORMS:
        return f"anthropic:{claude_model(provider, name)}"
    return model


def known_window(model: str) -> int | None:
    """The context window of a ``provider:model`` name from ``CONTEXT_WINDOWS``, or None.

    A model behind the Responses API has the window it has behind Chat Completions, and
    a Claude model on Bedrock or Vertex the one it has on Anthropic's API.
    """
    model = maker_model(model)
    matches = [prefix for prefix in CONTEXT_WINDOWS if model.startswith(prefix)]
    return CONTEXT_WINDOWS[max(matches, key=len)] if matches else None
