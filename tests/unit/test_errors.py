"""Typed errors that say what to do, checked on the errors and options themselves."""

from __future__ import annotations

import pytest

from durable_subagents import (
    InvalidRequest,
    SubagentClient,
    TemporalUnavailable,
)
from durable_subagents.config import Settings
from durable_subagents.wording._error_wording import for_http, for_model, for_shell


def test_spawn_options_refuse_unknown_names_and_stay_as_built() -> None:
    from pydantic import ValidationError

    from durable_subagents.spawn import SpawnOptions

    with pytest.raises(InvalidRequest, match=r"unknown spawn option 'max_turn'.*max_turns"):
        SpawnOptions(max_turn=3)
    options = SpawnOptions(tools=["read_file"], permissions=[{"tool": "bash", "action": "ask"}])
    assert options.tools == ("read_file",) and options.permissions[0].action == "ask"
    with pytest.raises(ValidationError):
        options.tools = ("bash",)  # type: ignore[misc]
    # validating a dict runs the same checks (the cause is the InvalidRequest)
    with pytest.raises(ValidationError, match="max_turns must be an integer"):
        SpawnOptions.model_validate({"max_turns": 0})


async def test_unreachable_temporal_names_the_address(tmp_path: object) -> None:
    settings = Settings(address="127.0.0.1:1", blob_dir=None)
    with pytest.raises(TemporalUnavailable) as err:
        await SubagentClient.connect(settings=settings)
    assert "127.0.0.1:1" in str(err.value) and "subagents dev" in str(err.value)


def test_messages_speak_to_their_reader() -> None:
    """The API's names become flags and commands for a shell user, tools for a model."""
    api = (
        "task 't' is completed, not paused; there is nothing to decide (check_task shows "
        "pending approvals while it is paused); max_turns must be at most 200; "
        "no task 'x'; list_tasks() lists the tasks"
    )
    shell = for_shell(api)
    assert "`subagents check` shows" in shell and "--max-turns must" in shell
    assert "`subagents ls` lists the tasks" in shell
    model = for_model(api)
    assert "check_subagent shows" in model and "list_subagents lists" in model
    assert "max_turns must" in model  # the tool's own argument name
    assert for_shell("a my_max_turns or max_turns_x") == "a my_max_turns or max_turns_x"
    http = for_http(api, "t/1")
    assert "(GET /api/tasks/t%2F1/pause shows" in http and "GET /api/tasks lists" in http
    assert "{task_id}" in for_http("check_task(task_id, wait=True) waits for it")


@pytest.mark.parametrize(
    ("given", "current", "never"),
    [
        ("pause-1-wrong", "pause-1-0123abcd", True),  # not the form pauses have
        ("pause-0-0123abcd", "pause-1-0123abcd", True),  # turns count from 1
        ("pause-4-0123abcd", "pause-3-89abcdef", True),  # a turn not reached
        ("pause-2-0123abcd", "pause-3-89abcdef", False),  # an earlier pause, maybe real
        ("pause-3-0123abcd", "pause-3-89abcdef", False),  # another pause of this turn
        ("subagent-x-1:pause-9-0123abcd", "subagent-x-1:pause-3-89abcdef", True),
        ("subagent-x-2:pause-9-0123abcd", "subagent-x-1:pause-3-89abcdef", False),
        ("subagent-x-1:pause-9-0123abcd", "pause-3-89abcdef", False),  # a child's
    ],
)
def test_a_pause_that_never_was_is_told_from_an_earlier_one(
    given: str, current: str, never: bool
) -> None:
    from durable_subagents.client._decisions import never_a_pause

    assert never_a_pause(given, current) is never
