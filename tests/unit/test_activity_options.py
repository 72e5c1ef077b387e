"""Activity options: read from settings and agents, checked, defaulted and narrowed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from durable_subagents import ActivityConfig, ActivityOptions, AgentSpec, InvalidRequest, Settings
from durable_subagents.agents import (
    DEFAULT_ACTIVITY_OPTIONS,
    AgentFileError,
    load_agent_file,
    parse_activity_options,
)


def test_the_defaults_are_the_values_tasks_ran_with_before_they_were_settings() -> None:
    model = ActivityConfig(
        start_to_close=600,
        heartbeat=15,
        initial_interval=1,
        backoff_coefficient=2,
        maximum_interval=60,
        maximum_attempts=10,
    )
    assert DEFAULT_ACTIVITY_OPTIONS.model_turn == model
    assert DEFAULT_ACTIVITY_OPTIONS.compaction == model
    assert DEFAULT_ACTIVITY_OPTIONS.tool_call == ActivityConfig(
        start_to_close=660,
        heartbeat=10,
        initial_interval=1,
        backoff_coefficient=2,
        maximum_attempts=3,
    )
    assert parse_activity_options("") == DEFAULT_ACTIVITY_OPTIONS
    assert Settings().activity_options == DEFAULT_ACTIVITY_OPTIONS


@pytest.mark.parametrize(
    "text",
    [
        "tool_call.start_to_close=2m, tool_call.maximum_attempts=1,model_turn.heartbeat=5s",
        '{"tool_call": {"start_to_close": 120, "maximum_attempts": 1},'
        ' "model_turn": {"heartbeat": "5s"}}',
    ],
)
def test_a_setting_gives_some_options_and_the_rest_keep_their_defaults(text: str) -> None:
    options = parse_activity_options(text)
    assert options.tool_call.start_to_close == 120
    assert options.tool_call.maximum_attempts == 1
    assert options.tool_call.heartbeat == 10
    assert options.model_turn.heartbeat == 5
    assert options.model_turn.start_to_close == 600
    assert options.compaction == DEFAULT_ACTIVITY_OPTIONS.compaction
    assert options.changed() == {
        "model_turn.heartbeat": 5,
        "tool_call.start_to_close": 120,
        "tool_call.maximum_attempts": 1,
    }


def test_the_environment_sets_a_workers_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBAGENTS_ACTIVITY_OPTIONS", "compaction.schedule_to_close=1h")
    assert Settings().activity_options.compaction.schedule_to_close == 3600
    monkeypatch.setenv("SUBAGENTS_ACTIVITY_OPTIONS", "compaction.schedule_to_close=soon")
    with pytest.raises(ValidationError, match=re.escape("compaction.schedule_to_close: 'soon'")):
        Settings()


def test_a_default_heartbeat_longer_than_a_short_attempt_is_shortened_to_fit() -> None:
    options = parse_activity_options("model_turn.start_to_close=5")
    assert options.model_turn.heartbeat == 5
    assert options.model_turn.start_to_close == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tool_calls.start_to_close=5", "unknown activity tool_calls in activity options; known"),
        ("tool_call.timeout=5", "unknown activity option tool_call.timeout; known: start_to"),
        ("tool_call.start_to_close=0", "tool_call.start_to_close: '0' is not a duration above 0"),
        ("tool_call.heartbeat=-1", "tool_call.heartbeat: '-1' is not a duration above 0"),
        ("tool_call.start_to_close=5 min", "give seconds (30) or a duration with its unit"),
        ("model_turn.maximum_attempts=-1", "model_turn.maximum_attempts: '-1'; give a whole"),
        ("model_turn.maximum_attempts=1.5", "give a whole number of attempts"),
        ("model_turn.maximum_attempts=3000000000", "give a whole number of attempts up to"),
        ("compaction.schedule_to_close=9000h", "'9000h' is longer than a year; give at most"),
        ("tool_call.heartbeat=1e400", "is not a duration above 0"),
        ("model_turn.backoff_coefficient=0.5", "backoff_coefficient: '0.5'; give a number of 1"),
        ("tool_call.start_to_close", "is not kind.option=value"),
        ('{"tool_call": ', "activity options: not valid JSON"),
        ('{"tool_call": 5}', "tool_call: 5 is not a set of options"),
        (
            "tool_call.heartbeat=20,tool_call.start_to_close=10",
            "tool_call.heartbeat (20 s) is longer than tool_call.start_to_close (10 s)",
        ),
        (
            "model_turn.heartbeat=700",
            "model_turn.heartbeat (700 s) is longer than model_turn.start_to_close (600 s, "
            "the default)",
        ),
        (
            "compaction.start_to_close=10m,compaction.schedule_to_close=5m",
            "one attempt cannot outlast all of them",
        ),
        (
            "model_turn.initial_interval=2m",
            "model_turn.initial_interval (120 s) is longer than model_turn.maximum_interval "
            "(60 s, the default)",
        ),
    ],
)
def test_a_bad_option_is_refused_with_what_to_give(text: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_activity_options(text)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_an_agent_narrows_the_workers_options_and_never_widens_them() -> None:
    worker = parse_activity_options("tool_call.maximum_attempts=0,model_turn.start_to_close=60")
    agent = ActivityOptions(
        tool_call=ActivityConfig(start_to_close=30, maximum_attempts=2, schedule_to_close=90),
        model_turn=ActivityConfig(start_to_close=120, maximum_attempts=0),
    )
    options, wider = worker.narrowed(agent)
    assert options.tool_call.start_to_close == 30
    assert options.tool_call.heartbeat == 10
    assert options.tool_call.maximum_attempts == 2  # 0 is no limit: 2 is fewer
    assert options.tool_call.schedule_to_close == 90  # the worker's has none
    assert options.model_turn.start_to_close == 60
    assert options.model_turn.heartbeat == 15
    assert options.model_turn.maximum_attempts == 10  # 0 (no limit) would be more
    assert options.compaction == worker.compaction
    assert wider == [
        "model_turn.start_to_close 120 (kept at 60)",
        "model_turn.maximum_attempts 0 (kept at 10)",
    ]
    narrow, _ = worker.narrowed(ActivityOptions(tool_call=ActivityConfig(start_to_close=4)))
    assert narrow.tool_call.heartbeat == 4  # the heartbeat fits in the shorter attempt
    assert worker.narrowed(None) == (worker, [])


def test_an_agent_may_not_set_the_workers_retry_intervals() -> None:
    with pytest.raises(
        ValidationError, match=re.escape("not tool_call.initial_interval: retry intervals")
    ):
        AgentSpec(
            name="a",
            description="d",
            activity_options={"tool_call": {"initial_interval": 5}},
        )
    with pytest.raises(
        ValidationError, match=re.escape("tool_call.start_to_close: '-5s' is not a")
    ):
        AgentSpec(
            name="a",
            description="d",
            activity_options={"tool_call": {"start_to_close": "-5s"}},
        )


def test_an_agent_file_gives_its_activity_options_and_a_bad_one_names_its_line(
    tmp_path: Path,
) -> None:
    good = tmp_path / "quick.md"
    good.write_text(
        "---\nname: quick\ndescription: Quick.\nactivity_options:\n"
        "  tool_call: {start_to_close: 30s, maximum_attempts: 1}\n---\nBe quick.\n"
    )
    spec = load_agent_file(good)
    assert spec.activity_options is not None
    assert spec.activity_options.tool_call.given() == {"start_to_close": 30, "maximum_attempts": 1}
    bad = tmp_path / "slow.md"
    bad.write_text(
        "---\nname: slow\ndescription: Slow.\n\nactivityOptions:\n"
        "  model_turn: {maximum_interval: 5m}\n---\nBe slow.\n"
    )
    with pytest.raises(AgentFileError) as err:
        load_agent_file(bad)
    assert err.value.line == 5
    assert "not model_turn.maximum_interval: retry intervals are the worker's" in str(err.value)


def test_the_deployment_pages_table_gives_each_option_its_default_and_a_setting() -> None:
    page = (Path(__file__).parents[2] / "docs" / "deployment.md").read_text()
    section = page.split("## Activity timeouts and retries", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    assert [r[0].strip("`") for r in rows] == list(ActivityConfig.model_fields)

    def shown(value: float | None, key: str) -> str:
        if value is None:
            return "100 x `initial_interval`" if key == "maximum_interval" else "none"
        text = f"{value:g}"
        return text if key in ("backoff_coefficient", "maximum_attempts") else f"{text} s"

    for key, _, model_turn, tool_call, compaction, example in rows:
        key = key.strip("`")
        for kind, cell in (
            ("model_turn", model_turn),
            ("tool_call", tool_call),
            ("compaction", compaction),
        ):
            default = getattr(DEFAULT_ACTIVITY_OPTIONS.of(kind), key)  # type: ignore[arg-type]
            assert cell == shown(default, key), (kind, key, cell)
        setting = example.strip("`")
        assert setting.split("=")[0].endswith("." + key)
        assert parse_activity_options(setting).changed(), setting
