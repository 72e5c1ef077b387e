"""The Web UI details of a task that compacts, built from its state alone."""

from __future__ import annotations

from durable_subagents import (
    TaskStatus,
)
from durable_subagents.types import Usage
from durable_subagents.workflows._current_details import TaskView, current_details

"""What the model writes besides its note each turn (about 1.6 KB): turns add up, so
notes alone are not enough and older turns get summarized."""


def test_the_web_ui_details_say_when_a_task_compacts_and_what_it_used() -> None:
    usage = Usage(
        input_tokens=12_400, output_tokens=310, cache_read_tokens=11_000, cache_write_tokens=900
    )
    view = TaskView(
        task_id="t",
        status=TaskStatus.RUNNING,
        turns=3,
        max_turns=50,
        model="m",
        waiting_for_model=True,
        usage=usage,
        compactions=2,
        compacting=True,
    )
    details = current_details(view).split("\n\n")
    assert details[1] == (
        "Compacting the conversation to fit the model's context window (old tool results "
        "become notes, older turns a summary)"
    )
    assert details[-1] == (
        "Tokens in 12,400 (cache read 11,000, written 900) · out 310 · compacted 2 times "
        "to fit the model's context window"
    )
    done = TaskView(task_id="t", status=TaskStatus.COMPLETED, turns=3, max_turns=50, model="m")
    assert current_details(done) == ""
