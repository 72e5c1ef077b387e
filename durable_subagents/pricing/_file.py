"""``SUBAGENTS_PRICES``: a JSON or TOML file of prices by ``provider:model``.

Read once, when the settings are: a file that cannot be read, or holds anything but
prices, is refused with one line that says what to fix, before a worker starts.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ValidationError

from durable_subagents.errors import InvalidRequest
from durable_subagents.pricing._prices import Price

__all__ = ["PricesFile", "load_prices", "parse_prices"]

_KEY = re.compile(r"(?:[a-z][a-z0-9_-]*:\S+|scripted)")
"""``provider:model``: a built-in provider's or an endpoint's (``SUBAGENTS_ENDPOINTS``)."""
_FORM = (
    'give a JSON or TOML file of "provider:model" keys, each with the fields input, '
    "cached_input, cache_write, output and reasoning in USD per million tokens "
    '(for example {"openai:gpt-4.1-mini": {"input": 0.4, "cached_input": 0.1, "output": 1.6}})'
)


def load_prices(path: Path) -> dict[str, Price]:
    """The prices of the file at ``path`` (``.toml``: TOML; anything else: JSON).

    Raises:
        InvalidRequest: the file cannot be read or parsed, or holds something else.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or err
        raise InvalidRequest(f"cannot read {path}: {reason}") from None
    toml = path.suffix.lower() == ".toml"
    try:
        data = tomllib.loads(text) if toml else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as err:
        raise InvalidRequest(f"{path} is not valid {'TOML' if toml else 'JSON'} ({err})") from None
    return parse_prices(data, str(path))


def parse_prices(data: Any, source: str = "the prices") -> dict[str, Price]:
    """Prices from a parsed file: ``{"provider:model": {"input": ..., ...}}``.

    Raises:
        InvalidRequest: ``data`` is not such a mapping, or a price is not valid.
    """
    if not isinstance(data, dict):
        raise InvalidRequest(f"{source}: {_FORM}")
    prices: dict[str, Price] = {}
    for key, value in data.items():
        if not _KEY.fullmatch(key):
            raise InvalidRequest(f"{source}: {key!r} is not a provider:model name; {_FORM}")
        if not isinstance(value, dict):
            raise InvalidRequest(f"{source}: {key!r} is not a table of rates; {_FORM}")
        try:
            prices[key] = Price.model_validate(value)
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "its rates"
            raise InvalidRequest(
                f"{source}: {key!r}: {field}: {first['msg']} (rates are USD per million "
                "tokens; input is required, the others cost as input when left out)"
            ) from None
    return prices


def _checked(path: Path | None) -> Path | None:
    if path is not None:
        load_prices(path)
    return path


PricesFile = Annotated[
    Path | None,
    BeforeValidator(lambda v: None if isinstance(v, str) and not v.strip() else v),
    AfterValidator(_checked),
]
"""A setting's prices file (``SUBAGENTS_PRICES``), read when the settings are: a bad one
is refused then, in one line. Blank: none."""
