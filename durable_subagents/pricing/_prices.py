"""What a model's tokens cost: prices in USD per million tokens, and a turn's cost.

A price has five rates, as the providers bill them: fresh input, input read from the
prompt cache, input written to it, output, and reasoning (output tokens spent thinking,
where a provider bills them apart). A rate left out costs as ``input`` (as ``output``
for ``reasoning``). Costs are rounded to ``COST_DIGITS`` decimal places (a billionth of
a dollar), so sums of them compare exactly whatever order they were added in.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from durable_subagents.types import Usage

__all__ = ["COST_DIGITS", "Price", "PriceTable", "cost_of"]

log = logging.getLogger(__name__)

COST_DIGITS = 9
"""Decimal places a cost keeps (USD)."""

_MILLION = Decimal(1_000_000)
_DATED = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")
"""A snapshot's suffix: Anthropic's ``-20250929``, OpenAI's ``-2025-04-14``, ``-latest``."""


class Price(BaseModel):
    """A model's rates in USD per million tokens.

    Attributes:
        input: Input tokens billed at the full rate.
        cached_input: Input tokens read from the prompt cache; None: as ``input``.
        cache_write: Input tokens written to the prompt cache; None: as ``input``.
        output: Output tokens; None: as ``input``.
        reasoning: Output tokens spent reasoning; None: as ``output``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, allow_inf_nan=False)
    cached_input: float | None = Field(None, ge=0, allow_inf_nan=False)
    cache_write: float | None = Field(None, ge=0, allow_inf_nan=False)
    output: float | None = Field(None, ge=0, allow_inf_nan=False)
    reasoning: float | None = Field(None, ge=0, allow_inf_nan=False)


def cost_of(usage: Usage, price: Price) -> float:
    """What ``usage`` costs at ``price``, in USD, rounded to ``COST_DIGITS`` places.

    ``input_tokens`` holds the cache's reads and writes, and ``output_tokens`` the
    reasoning tokens (``Usage``): each token is billed once, at its own rate.

    Example:
        >>> cost_of(Usage(input_tokens=1000, output_tokens=100), Price(input=3, output=15))
        0.0045
    """
    rate = _decimal(price.input)
    output = _decimal(price.output) if price.output is not None else rate
    rates = (
        (rate, max(usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens, 0)),
        (_or(price.cached_input, rate), usage.cache_read_tokens),
        (_or(price.cache_write, rate), usage.cache_write_tokens),
        (output, max(usage.output_tokens - usage.reasoning_tokens, 0)),
        (_or(price.reasoning, output), usage.reasoning_tokens),
    )
    total = sum((r * tokens for r, tokens in rates), Decimal(0)) / _MILLION
    return float(round(total, COST_DIGITS))


class PriceTable:
    """Prices by ``provider:model``, and how a model's name finds its price.

    A name finds the price of its own key first, then of the key without a snapshot
    suffix (``claude-sonnet-4-5-20250929`` is ``claude-sonnet-4-5``), then of the same
    model on its maker's API (``same_as``: a Claude model on Bedrock is priced as on
    Anthropic's API). Every scripted model has the price of ``scripted``, if one is given.

    Args:
        prices: The rates by ``provider:model`` (or ``scripted``).
    """

    def __init__(self, prices: Mapping[str, Price]) -> None:
        self.prices = dict(prices)
        self._unpriced: set[str] = set()

    def price_of(self, model: str, same_as: str | None = None) -> Price | None:
        """The price of ``model`` (a full ``provider:model`` name), or None."""
        if model.partition(":")[0] == "scripted":
            return self.prices.get("scripted")
        for name in (model, same_as):
            if not name:
                continue
            for key in (name, _DATED.sub("", name)):
                if key in self.prices:
                    return self.prices[key]
        return None

    def cost(self, model: str, usage: Usage, same_as: str | None = None) -> float | None:
        """What ``usage`` of ``model`` costs in USD; None when the model has no price."""
        price = self.price_of(model, same_as)
        return None if price is None else cost_of(usage, price)

    def priced(self, model: str, usage: Usage, same_as: str | None = None) -> Usage:
        """``usage`` of ``model`` with its ``cost_usd``, if the model has a price.

        The worker prices usage where it is made (the model activity), so that
        workflows only add up recorded costs. A model without a price is said once in
        the log (a scripted one never: it bills nothing), and its usage keeps no cost.
        """
        cost = self.cost(model, usage, same_as)
        if cost is not None:
            return usage.model_copy(update={"cost_usd": cost})
        if model not in self._unpriced and model.partition(":")[0] != "scripted":
            self._unpriced.add(model)
            log.warning(
                "model %s has no price: its usage is counted without a cost "
                "(SUBAGENTS_PRICES can give one; see docs/models.md#prices)",
                model,
            )
        return usage


def _decimal(value: float) -> Decimal:
    """A rate as the decimal it was written as (``0.1``, not its binary neighbour)."""
    return Decimal(repr(value))


def _or(value: float | None, default: Decimal) -> Decimal:
    return default if value is None else _decimal(value)
