"""Prices: a turn's cost, sums of costs, how a model finds its price, SUBAGENTS_PRICES."""

from __future__ import annotations

import json
import logging
import re
from fractions import Fraction
from pathlib import Path

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from durable_subagents.cli._common import make_settings
from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest
from durable_subagents.pricing import (
    BUILT_IN_PRICES,
    Price,
    PriceTable,
    cost_of,
    load_prices,
    price_table,
)
from durable_subagents.providers._windows import maker_model
from durable_subagents.types import TaskInfo, TaskStatus, Usage
from durable_subagents.wire._payloads import ModelTurnResult

DOCS = Path(__file__).parents[2] / "docs" / "models.md"
SONNET = Price(input=3, cached_input=0.3, cache_write=3.75, output=15)


def exact(usage: Usage, price: Price) -> Fraction:
    """The cost as a fraction: each kind of token at its rate, the fallbacks spelled out."""
    rate = Fraction(str(price.input))
    output = Fraction(str(price.output)) if price.output is not None else rate
    cached = Fraction(str(price.cached_input)) if price.cached_input is not None else rate
    write = Fraction(str(price.cache_write)) if price.cache_write is not None else rate
    reasoning = Fraction(str(price.reasoning)) if price.reasoning is not None else output
    fresh = usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens
    answer = usage.output_tokens - usage.reasoning_tokens
    total = (
        fresh * rate
        + usage.cache_read_tokens * cached
        + usage.cache_write_tokens * write
        + answer * output
        + usage.reasoning_tokens * reasoning
    )
    return total / 1_000_000


# ---------------------------------------------------------------- the arithmetic


def test_each_kind_of_token_is_billed_once_at_its_own_rate() -> None:
    usage = Usage(
        input_tokens=10_000, cache_read_tokens=6_000, cache_write_tokens=3_000, output_tokens=500
    )
    # 1,000 fresh at 3, 6,000 read at 0.3, 3,000 written at 3.75, 500 out at 15
    assert cost_of(usage, SONNET) == 0.003 + 0.0018 + 0.01125 + 0.0075
    assert cost_of(usage, SONNET) == 0.02355
    # the cached tokens are not billed again as input: cheaper than all input at 3
    assert cost_of(usage, SONNET) < cost_of(Usage(input_tokens=10_000, output_tokens=500), SONNET)


def test_a_rate_left_out_costs_as_input_and_reasoning_as_output() -> None:
    usage = Usage(
        input_tokens=4_000,
        cache_read_tokens=1_000,
        cache_write_tokens=1_000,
        output_tokens=900,
        reasoning_tokens=600,
    )
    only_input = Price(input=2)
    assert cost_of(usage, only_input) == 4_900 * 2 / 1_000_000
    with_output = Price(input=2, output=8)
    assert cost_of(usage, with_output) == (4_000 * 2 + 900 * 8) / 1_000_000
    # reasoning has a rate of its own where a provider bills it apart
    apart = Price(input=2, output=8, reasoning=4)
    assert cost_of(usage, apart) == (4_000 * 2 + 300 * 8 + 600 * 4) / 1_000_000


def test_openai_cached_tokens_cost_a_quarter_on_gpt_4_1_mini() -> None:
    price = BUILT_IN_PRICES["openai:gpt-4.1-mini"]
    usage = Usage(input_tokens=2_048, cache_read_tokens=1_024, output_tokens=100)
    assert cost_of(usage, price) == (1_024 * 0.4 + 1_024 * 0.1 + 100 * 1.6) / 1_000_000


usages = st.builds(
    lambda fresh, read, write, answer, thought: Usage(
        input_tokens=fresh + read + write,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=answer + thought,
        reasoning_tokens=thought,
    ),
    *[st.integers(0, 2_000_000)] * 5,
)
rates = st.sampled_from([0, 0.025, 0.1, 0.275, 0.3, 1.1, 1.25, 3.75, 4.4, 15, 75])
prices = st.builds(
    Price,
    input=rates,
    cached_input=st.none() | rates,
    cache_write=st.none() | rates,
    output=st.none() | rates,
    reasoning=st.none() | rates,
)


@given(usage=usages, price=prices)
def test_a_cost_is_the_exact_cost_rounded_to_a_billionth(usage: Usage, price: Price) -> None:
    assert cost_of(usage, price) == float(round(exact(usage, price), 9))


@given(parts=st.lists(st.tuples(usages, prices), min_size=1, max_size=12))
def test_sums_of_costs_are_exact_in_any_order(parts: list[tuple[Usage, Price]]) -> None:
    priced = [u.model_copy(update={"cost_usd": cost_of(u, p)}) for u, p in parts]
    forward = sum(priced, Usage())
    backward = sum(reversed(priced), Usage())
    expected = sum((round(exact(u, p), 9) for u, p in parts), Fraction(0))
    assert forward.cost_usd == backward.cost_usd == float(expected)


def test_a_sum_holds_the_priced_parts_and_is_none_only_when_none_was_priced() -> None:
    priced = Usage(input_tokens=10, cost_usd=0.25)
    unpriced = Usage(input_tokens=5)
    assert (unpriced + unpriced).cost_usd is None
    assert (priced + unpriced).cost_usd == 0.25 == (unpriced + priced).cost_usd
    assert (priced + unpriced).input_tokens == 15
    free = Usage(input_tokens=3, cost_usd=0.0)
    assert (unpriced + free).cost_usd == 0.0  # a free model is priced: 0, not None


def test_an_unknown_cost_stays_out_of_what_is_recorded() -> None:
    """Usage without a cost is written as before prices: old histories replay unchanged."""
    assert "cost_usd" not in Usage(input_tokens=3).model_dump()
    assert "cost_usd" not in ModelTurnResult(head="h", usage=Usage(input_tokens=3)).model_dump()
    recorded = ModelTurnResult(head="h", usage=Usage(input_tokens=3, cost_usd=0.0))
    assert json.loads(recorded.model_dump_json())["usage"]["cost_usd"] == 0.0
    # read back as written; a payload recorded before prices reads as no cost
    assert Usage.model_validate(recorded.usage.model_dump()).cost_usd == 0.0
    assert Usage.model_validate({"input_tokens": 3}).cost_usd is None
    # the public TaskInfo shows the tree's cost, null when unknown
    info = TaskInfo(id="t", status=TaskStatus.COMPLETED)
    assert json.loads(info.model_dump_json())["tree_cost_usd"] is None


# ---------------------------------------------------------------- lookups


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("anthropic:claude-sonnet-4-5", "anthropic:claude-sonnet-4-5"),
        ("anthropic:claude-sonnet-4-5-20250929", "anthropic:claude-sonnet-4-5"),
        ("openai:gpt-4.1-mini-2025-04-14", "openai:gpt-4.1-mini"),
        ("openai-responses:gpt-5-mini", "openai:gpt-5-mini"),
        ("bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0", "anthropic:claude-sonnet-4-5"),
        ("bedrock:anthropic.claude-3-5-haiku-20241022-v1:0", "anthropic:claude-3-5-haiku"),
        (
            "bedrock:arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
            "global.anthropic.claude-opus-4-6-v1",
            "anthropic:claude-opus-4-6",
        ),
        ("vertex:claude-sonnet-4-5@20250929", "anthropic:claude-sonnet-4-5"),
        ("vertex:claude-haiku-4-5@20251001", "anthropic:claude-haiku-4-5"),
    ],
)
def test_a_model_finds_the_price_of_the_model_it_is(model: str, key: str) -> None:
    assert price_table().price_of(model, maker_model(model)) is BUILT_IN_PRICES[key]


def test_unknown_models_have_no_price_and_a_key_of_its_own_wins() -> None:
    table = price_table()
    assert table.price_of("openai:gpt-4.1-nano") is None  # no prefix match: not gpt-4.1's
    assert table.price_of("anthropic:claude-sonnet-4-6") is None
    assert table.price_of("scripted") is None and table.price_of("scripted:[]") is None
    assert table.cost("openai:my-model", Usage(input_tokens=1)) is None
    bedrock = "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    own = Price(input=3.3, output=16.5)
    mine = PriceTable({**BUILT_IN_PRICES, bedrock: own, "scripted": Price(input=1)})
    assert mine.price_of(bedrock, maker_model(bedrock)) is own
    assert mine.price_of("scripted:[{}]") == Price(input=1)  # every script, unread


def test_a_model_without_a_price_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    table = price_table()
    usage = Usage(input_tokens=100, output_tokens=10)
    with caplog.at_level(logging.INFO, logger="durable_subagents.pricing._prices"):
        for _ in range(3):
            assert table.priced("openai:my-model", usage) == usage
        assert table.priced("openai:other-model", usage).cost_usd is None
        assert table.priced("scripted", usage) == usage  # bills nothing: never said
        priced = table.priced("openai:gpt-4.1-mini", usage)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and all(r.levelno == logging.WARNING for r in caplog.records), said
    assert said[0].startswith("model openai:my-model has no price")
    assert "SUBAGENTS_PRICES" in said[0]
    assert priced.cost_usd == (100 * 0.4 + 10 * 1.6) / 1_000_000
    assert priced.model_copy(update={"cost_usd": None}) == usage


# ---------------------------------------------------------------- SUBAGENTS_PRICES


def doc_snippets() -> dict[str, str]:
    """The price files of docs/models.md's "Prices", by language."""
    section = DOCS.read_text().split("\n## Prices\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```(json|toml)\n(.*?)^```", section, re.S | re.M)
    return dict(blocks)


def test_the_docs_price_files_load_the_same_prices(tmp_path: Path) -> None:
    snippets = doc_snippets()
    assert set(snippets) == {"json", "toml"}
    loaded = {}
    for lang, text in snippets.items():
        path = tmp_path / f"prices.{lang}"
        path.write_text(text)
        settings = Settings(prices=path)
        assert settings.prices == path
        loaded[lang] = load_prices(path)
        table = price_table(settings.prices)
        assert table.price_of("openai:gpt-4.1-mini") == Price(
            input=0.4, cached_input=0.1, output=1.6
        )
        assert table.price_of("openai:qwen3-coder") == Price(input=0, output=0)
        assert table.price_of("anthropic:claude-sonnet-4-6") == SONNET
        assert table.price_of("openai:gpt-5") is BUILT_IN_PRICES["openai:gpt-5"]  # kept
    assert loaded["json"] == loaded["toml"]


def test_the_docs_table_is_the_built_in_table() -> None:
    section = DOCS.read_text().split("\n## Prices\n", 1)[1]
    rows = re.findall(r"^\| `([a-z-]+:[^`]+)` \| (.*) \|$", section, re.M)
    shown = {}
    for model, cells in rows:
        values = [c.strip() for c in cells.split("|")]
        number = [None if v == "(input)" else float(v) for v in values]
        shown[model] = Price(
            input=number[0], cached_input=number[1], cache_write=number[2], output=number[3]
        )
    assert shown == BUILT_IN_PRICES


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("p.json", "{not json", "p.json is not valid JSON"),
        ("p.toml", "[openai:x\ninput = 1", "p.toml is not valid TOML"),
        ("p.json", "[1, 2]", 'give a JSON or TOML file of "provider:model" keys'),
        ("p.json", '{"gpt-4.1": {"input": 1}}', "'gpt-4.1' is not a provider:model name"),
        ("p.json", '{"openai:x": 1}', "'openai:x' is not a table of rates"),
        ("p.json", '{"openai:x": {"output": 1}}', "'openai:x': input: Field required"),
        ("p.json", '{"openai:x": {"input": -1}}', "input: Input should be greater than or"),
        ("p.json", '{"openai:x": {"input": 1, "cached": 1}}', "cached: Extra inputs are not"),
        ("p.json", '{"openai:x": {"input": "cheap"}}', "input: Input should be a valid number"),
        ("p.json", '{"openai:x": {"input": 1e999}}', "input: Input should be a finite number"),
    ],
)
def test_a_bad_prices_file_is_refused_saying_what_to_fix(
    tmp_path: Path, name: str, content: str, says: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InvalidRequest) as refused:
        load_prices(path)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(ValidationError) as invalid:
        Settings(prices=path)
    assert says in str(invalid.value)


def test_a_missing_file_is_refused_and_a_blank_setting_is_none(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    with pytest.raises(InvalidRequest, match=r"cannot read .*nowhere.json: No such file"):
        load_prices(missing)
    assert Settings(prices="").prices is None
    assert Settings(prices="  ").prices is None
    assert Settings().prices is None


def test_the_worker_command_says_a_bad_file_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"openai:gpt-4.1-mini": {"input": 0.4, "output": -1.6}}')
    monkeypatch.setenv("SUBAGENTS_PRICES", str(path))
    with pytest.raises(typer.BadParameter) as refused:
        make_settings()
    message = str(refused.value)
    assert message.startswith(f"SUBAGENTS_PRICES={path}: {path}: 'openai:gpt-4.1-mini': output")
    assert "greater than or equal to 0" in message and "\n" not in message
