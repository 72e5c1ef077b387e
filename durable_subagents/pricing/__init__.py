"""What models cost: prices per million tokens, built in and from ``SUBAGENTS_PRICES``.

The worker prices each model turn where its usage is made (the model activity), so
workflows only add up recorded costs. A model without a price costs None.
"""

from pathlib import Path

from durable_subagents.pricing._file import PricesFile, load_prices, parse_prices
from durable_subagents.pricing._prices import COST_DIGITS, Price, PriceTable, cost_of
from durable_subagents.pricing._table import BUILT_IN_PRICES

__all__ = [
    "BUILT_IN_PRICES",
    "COST_DIGITS",
    "Price",
    "PriceTable",
    "PricesFile",
    "cost_of",
    "load_prices",
    "parse_prices",
    "price_table",
]


def price_table(path: Path | None = None) -> PriceTable:
    """The built-in prices with those of the file at ``path`` over them (``SUBAGENTS_PRICES``).

    Raises:
        InvalidRequest: the file cannot be read, or holds anything but prices.
    """
    return PriceTable({**BUILT_IN_PRICES, **(load_prices(path) if path is not None else {})})
