"""The built-in prices: the models the documentation names, at their makers' list prices.

USD per million tokens, standard (not batch, not priority) tier. Anthropic's
``cache_write`` is the five-minute cache's (the one the Anthropic provider asks for);
OpenAI bills no cache writes and its reasoning tokens as output, so those rates are
left out. Sources, and the date they were read: ``docs/models.md#prices``.
"""

from __future__ import annotations

from durable_subagents.pricing._prices import Price

__all__ = ["BUILT_IN_PRICES"]

BUILT_IN_PRICES: dict[str, Price] = {
    # https://platform.claude.com/docs/en/about-claude/pricing
    "anthropic:claude-opus-4-6": Price(input=5, cached_input=0.5, cache_write=6.25, output=25),
    "anthropic:claude-opus-4-1": Price(input=15, cached_input=1.5, cache_write=18.75, output=75),
    "anthropic:claude-sonnet-4-5": Price(input=3, cached_input=0.3, cache_write=3.75, output=15),
    "anthropic:claude-haiku-4-5": Price(input=1, cached_input=0.1, cache_write=1.25, output=5),
    "anthropic:claude-3-5-haiku": Price(input=0.8, cached_input=0.08, cache_write=1, output=4),
    # https://platform.openai.com/docs/pricing
    "openai:gpt-5": Price(input=1.25, cached_input=0.125, output=10),
    "openai:gpt-5-mini": Price(input=0.25, cached_input=0.025, output=2),
    "openai:gpt-4.1": Price(input=2, cached_input=0.5, output=8),
    "openai:gpt-4.1-mini": Price(input=0.4, cached_input=0.1, output=1.6),
    "openai:gpt-4o": Price(input=2.5, cached_input=1.25, output=10),
    "openai:o1": Price(input=15, cached_input=7.5, output=60),
    "openai:o3": Price(input=2, cached_input=0.5, output=8),
    "openai:o4-mini": Price(input=1.1, cached_input=0.275, output=4.4),
    "openai:gpt-4-turbo": Price(input=10, output=30),
    "openai:gpt-4": Price(input=30, output=60),
    "openai:gpt-3.5-turbo": Price(input=0.5, output=1.5),
}
"""Prices by ``provider:model``; ``SUBAGENTS_PRICES`` adds to them and overrides them."""
