"""``SubagentsPlugin`` is exported at the top of the package and checks what it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

import durable_subagents
from durable_subagents import InvalidRequest, Settings
from durable_subagents.worker import SubagentsPlugin


def test_the_plugin_is_exported_at_the_top() -> None:
    assert durable_subagents.SubagentsPlugin is SubagentsPlugin
    assert "SubagentsPlugin" in durable_subagents.__all__


def test_the_plugin_takes_activity_options_and_refuses_a_bad_one(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    plugin = SubagentsPlugin(settings, activity_options={"tool_call": {"maximum_attempts": 1}})
    assert plugin.settings.activity_options.tool_call.maximum_attempts == 1
    assert plugin.settings.activity_options.model_turn.maximum_attempts == 10
    assert settings.activity_options.tool_call.maximum_attempts == 3  # the caller's untouched
    with pytest.raises(InvalidRequest, match=r"model_turn\.heartbeat: '0s' is not a duration"):
        SubagentsPlugin(settings, activity_options="model_turn.heartbeat=0s")
