"""Model settings a subagent's child inherits, read from the agent specs alone."""

from __future__ import annotations

from durable_subagents import AgentSpec
from durable_subagents.spawn import child_spec

from ..helpers.providers import THINKER

PLAIN = AgentSpec(name="plain", description="No settings.", tools=["read_file"])


def test_a_subagents_child_thinks_no_harder_than_its_parent() -> None:
    parent = THINKER.model_copy(update={"reasoning_effort": "low"})
    child = child_spec(parent, ["read_file"], THINKER)
    assert child.reasoning_effort == "low"
    assert child_spec(PLAIN, ["read_file"], THINKER).reasoning_effort == "medium"
    assert child_spec(THINKER, ["read_file"], PLAIN).reasoning_effort == "medium"
    assert child_spec(PLAIN, ["read_file"], PLAIN).reasoning_effort is None
