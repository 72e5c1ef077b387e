"""Bad input gets a typed error that says what to do, and leaves nothing behind."""

from __future__ import annotations

import logging
import re

import pytest

from durable_subagents import (
    InvalidRequest,
    PayloadTooLarge,
    SubagentClient,
    TaskNotFound,
)
from durable_subagents.config import Settings

from ..helpers import CEILING


async def _no_task_started(client: SubagentClient) -> None:
    assert await client.list_tasks() == [] or all(
        t.description != "must not start" for t in await client.list_tasks()
    )


async def test_unknown_agent_lists_the_known_ones(client: SubagentClient) -> None:
    with pytest.raises(InvalidRequest) as err:
        await client.spawn_task("explor", "find it", description="must not start")
    message = str(err.value)
    assert "unknown agent 'explor'" in message
    for name in ("explore", "plan", "research", "general"):
        assert name in message
    await _no_task_started(client)


@pytest.mark.parametrize("prompt", ["", "   \n"])
async def test_empty_prompt(client: SubagentClient, prompt: str) -> None:
    with pytest.raises(InvalidRequest, match="prompt is empty"):
        await client.spawn_task("explore", prompt)


@pytest.mark.parametrize("turns", [0, -3])
async def test_max_turns_below_one(client: SubagentClient, turns: int) -> None:
    with pytest.raises(InvalidRequest, match="max_turns must be an integer >= 1"):
        await client.spawn_task("explore", "x", max_turns=turns)


async def test_oversized_prompt_is_refused_before_starting(client: SubagentClient) -> None:
    with pytest.raises(InvalidRequest, match="write the material to a file"):
        await client.spawn_task("explore", "z" * 200_000)


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("description", "d" * 5_000, "description is 5000 bytes, over the 2000-byte limit"),
        ("parent_id", "p" * 3_000, "parent_id is 3000 bytes, over the 1000-byte limit"),
        ("model", "scripted:[" + " " * 200_000 + "]", "model is 200011 bytes"),
        ("metadata", {"k": "v" * 20_000}, "over the 16384-byte limit"),
    ],
)
async def test_oversized_fields_are_payload_too_large(
    client: SubagentClient, option: str, value: object, problem: str
) -> None:
    with pytest.raises(PayloadTooLarge, match=re.escape(problem)):
        await client.spawn_task("explore", "x", **{option: value})  # type: ignore[arg-type]
    await _no_task_started(client)


async def test_options_may_only_narrow(client: SubagentClient) -> None:
    with pytest.raises(InvalidRequest, match="does not allow bash"):
        await client.spawn_task("explore", "x", tools=["read_file", "bash"])
    with pytest.raises(InvalidRequest, match="more permissive"):
        await client.spawn_task("plan", "x", permission_mode="accept_edits")
    with pytest.raises(InvalidRequest, match="only add 'deny' or 'ask' rules"):
        await client.spawn_task(
            "general", "x", permissions=[{"tool": "bash", "pattern": "*", "action": "allow"}]
        )
    with pytest.raises(InvalidRequest, match="task_id"):
        await client.spawn_task("general", "x", task_id="bad id with spaces")
    with pytest.raises(InvalidRequest, match="time_limit"):
        await client.spawn_task("general", "x", time_limit=0)


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        # a bare string was once split into letters ("does not allow b, a, s, h")
        ("tools", "bash", "tools must be a list of tool names, got 'bash'"),
        ("disallowed_tools", ["bash", 3], "disallowed_tools must be a list of tool names"),
        ("permissions", {"tool": "bash", "action": "deny"}, "permissions must be a list"),
        ("permissions", [{"tool": "bash", "action": "sometimes"}], "invalid permission rule"),
        ("permission_mode", "yolo", "unknown permission_mode 'yolo'; use one of plan"),
        ("network", "yes", "network must be true or false, got 'yes'"),
        ("model", 5, "model must be a string like openai:gpt-4.1-mini, got int"),
        ("max_turns", True, "max_turns must be an integer >= 1, got True"),
        ("token_budget", 0, "token_budget must be an integer from 1 to"),
        ("approval_timeout", float("nan"), "approval_timeout must be more than 0"),
        ("workspace", "../elsewhere", "leaves the worker's workspace root"),
        ("metadata", ["not", "a", "dict"], "metadata must be a dict, got list"),
    ],
)
async def test_each_spawn_option_is_checked_with_a_message_that_says_what_to_do(
    client: SubagentClient, option: str, value: object, problem: str
) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(problem)):
        await client.spawn_task("general", "x", description="must not start", **{option: value})  # type: ignore[arg-type]
    await _no_task_started(client)


async def test_narrowing_options_take_effect(
    client: SubagentClient, worker: None, workspace: object
) -> None:
    from ..helpers.tasks import script

    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "rm -rf x"}}]},
        {"tool_calls": [{"name": "grep", "arguments": {"pattern": "x"}}]},
        {"text": "done"},
    )
    task_id = await client.spawn_task(
        "general",
        "x",
        model=model,
        disallowed_tools=["grep"],
        permissions=[{"tool": "bash", "pattern": "rm *", "action": "deny"}],
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == "completed"
    tool_msgs = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert "denied by this agent's permission rules" in tool_msgs[0].content
    assert "unknown tool 'grep'" in tool_msgs[1].content


async def test_unknown_task_id(client: SubagentClient) -> None:
    with pytest.raises(TaskNotFound, match=r"no task 'subagent-nope'.*list_tasks\(\) lists"):
        await client.check_task("subagent-nope")
    with pytest.raises(TaskNotFound):
        await client.cancel_task("subagent-nope")
    with pytest.raises(TaskNotFound):
        await client.get_transcript("subagent-nope")


@pytest.mark.parametrize(
    ("workspace", "problem"),
    [
        ("/etc", "outside this worker's workspace root"),
        ("no-such-dir", "is not a directory under"),
    ],
)
async def test_a_workspace_the_worker_cannot_use_fails_the_task_in_one_log_line(
    client: SubagentClient,
    worker: None,
    caplog: pytest.LogCaptureFixture,
    workspace: str,
    problem: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    task_id = await client.spawn_task("explore", "x", model="scripted", workspace=workspace)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == "failed"
    assert info.error is not None and problem in info.error
    mine = [r for r in caplog.records if task_id in r.getMessage() and r.levelno >= logging.INFO]
    assert [(r.levelno, problem in r.getMessage()) for r in mine] == [(logging.WARNING, True)]
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.INFO]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


@pytest.mark.parametrize("problem", ["no key", "key refused"])
async def test_a_model_the_worker_is_not_configured_for_fails_the_task_in_one_log_line(
    client: SubagentClient,
    temporal_client: object,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    problem: str,
) -> None:
    """A task that fails on what the worker's operator must set (a key, a model) is one
    warning each, naming the task and the setting: no traceback says more."""
    from durable_subagents.providers import clear_provider_cache
    from durable_subagents.testing import FakeOpenAIServer
    from durable_subagents.worker import create_worker

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    clear_provider_cache()
    caplog.set_level(logging.DEBUG)
    async with FakeOpenAIServer() as api, create_worker(temporal_client, settings):  # type: ignore[arg-type]
        if problem == "key refused":
            monkeypatch.setenv("OPENAI_BASE_URL", api.base_url)
            monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
            api.add_error(401)
            api.add_error(401)
        ids = [await client.spawn_task("explore", "x", model="openai:gpt-4.1-mini") for _ in "ab"]
        for task_id in ids:
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
            assert info.status == "failed"
            assert info.error is not None and "OPENAI_API_KEY" in info.error
    clear_provider_cache()
    for task_id in ids:
        mine = [r for r in caplog.records if task_id in r.getMessage()]
        mine = [r for r in mine if r.levelno >= logging.INFO]
        assert [(r.levelno, "OPENAI_API_KEY" in r.getMessage()) for r in mine] == [
            (logging.WARNING, True)
        ], [r.getMessage() for r in mine]
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.INFO]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


async def test_a_task_that_fails_before_any_model_answer_reports_0_turns(
    client: SubagentClient, worker: None
) -> None:
    from ..helpers.tasks import script

    failed = await client.spawn_task("explore", "x", model="scripted", workspace="no-such-dir")
    info = await client.check_task(failed, wait=True, timeout=CEILING)
    assert info.status == "failed" and info.turns == 0, info
    [listed] = [t for t in await client.list_tasks() if t.id == failed] or [info]
    assert listed.turns == 0
    # a task whose model answered counts the turn, however it ended
    answered = await client.spawn_task("explore", "x", model=script({"text": "done"}))
    done = await client.check_task(answered, wait=True, timeout=CEILING)
    assert done.status == "completed" and done.turns == 1


@pytest.mark.parametrize("workspace", ["../..", "..", "a/../../b", "", "   ", "x\x00y", "a" * 5000])
async def test_a_workspace_outside_any_root_is_refused_at_spawn(
    client: SubagentClient, workspace: str
) -> None:
    with pytest.raises(InvalidRequest, match="workspace") as err:
        await client.spawn_task("explore", "x", workspace=workspace)
    assert len(str(err.value)) < 400


async def test_bad_model_name_is_refused_at_spawn(client: SubagentClient) -> None:
    with pytest.raises(InvalidRequest, match="openai:<model>"):
        await client.spawn_task("explore", "x", model="gpt-4")


async def test_a_bad_model_names_where_it_came_from(client: SubagentClient) -> None:
    from durable_subagents.agents import BUILTIN_AGENTS

    odd = BUILTIN_AGENTS["explore"].model_copy(update={"name": "odd", "model": "gpt-4"})
    client.agents["odd"] = odd
    with pytest.raises(InvalidRequest, match=re.escape("'gpt-4' (from the agent 'odd')")):
        await client.spawn_task("odd", "x", description="must not start")
    client.default_model = "claude"
    with pytest.raises(InvalidRequest, match=re.escape("'claude' (from SUBAGENTS_MODEL)")):
        await client.spawn_task("explore", "x", description="must not start")
    with pytest.raises(InvalidRequest) as given:
        await client.spawn_task("explore", "x", model="gpt-4", description="must not start")
    assert "(from" not in str(given.value)
    await _no_task_started(client)


async def test_a_bad_default_model_stops_the_worker_before_it_takes_a_task(
    client: SubagentClient, temporal_client: object, settings: Settings
) -> None:
    from durable_subagents.worker import create_worker

    bad = settings.model_copy(update={"model": "gpt-4"})
    with pytest.raises(InvalidRequest, match=r"^SUBAGENTS_MODEL=gpt-4: unknown model 'gpt-4'"):
        create_worker(temporal_client, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("time_limit", -1, "time_limit must be more than 0"),
        ("time_limit", float("inf"), "time_limit must be more than 0"),
        ("time_limit", float("nan"), "time_limit must be more than 0"),
        ("time_limit", 1e300, "at most"),
        ("time_limit", True, "time_limit must be a number"),
        ("time_limit", "10", "time_limit must be a number"),
        ("approval_timeout", 0, "approval_timeout must be more than 0"),
        ("approval_timeout", 1e300, "at most"),
        ("max_turns", True, "max_turns must be an integer"),
        ("max_turns", 2.5, "max_turns must be an integer"),
        ("max_turns", 10**9, "max_turns must be at most"),
        ("metadata", ["not", "a", "dict"], "metadata must be a dict"),
        ("metadata", {"when": object()}, "JSON-serializable"),
        ("metadata", {"blob": "m" * 100_000}, "over the"),
        ("permission_mode", "yolo", "unknown permission_mode 'yolo'"),
        ("tools", ["bash"], "does not allow bash"),
    ],
)
async def test_bad_limits_and_options_are_refused_before_starting(
    client: SubagentClient, option: str, value: object, problem: str
) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(problem)):
        await client.spawn_task("explore", "x", description="must not start", **{option: value})  # type: ignore[arg-type]
    await _no_task_started(client)


async def test_every_call_names_an_unknown_task(client: SubagentClient) -> None:
    calls = {
        "check_task": client.check_task("nope", wait=True, timeout=1),
        "approve": client.approve("nope"),
        "reject": client.reject("nope", reason="no"),
        "send_input": client.send_input("nope", "more"),
        "cancel_task": client.cancel_task("nope"),
        "get_transcript": client.get_transcript("nope"),
        "wait_tasks": client.wait_tasks(["nope"], timeout=1),
    }
    for name, call in calls.items():
        with pytest.raises(TaskNotFound, match="no task 'nope'"):
            await call
        assert name  # each call raised on its own
    with pytest.raises(TaskNotFound):
        async for _ in client.watch("nope"):
            pass


async def test_after_bad_requests_the_worker_still_runs_tasks(
    client: SubagentClient, worker: None
) -> None:
    from ..helpers.tasks import script

    for bad in ({"max_turns": 0}, {"time_limit": float("inf")}, {"metadata": {"x": object()}}):
        with pytest.raises(InvalidRequest):
            await client.spawn_task("explore", "x", description="must not start", **bad)  # type: ignore[arg-type]
    await _no_task_started(client)
    task_id = await client.spawn_task("explore", "x", model=script({"text": "fine"}))
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == "completed" and info.result == "fine"
