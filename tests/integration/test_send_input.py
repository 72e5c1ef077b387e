"""Follow-up and steering input: signals to a live task, a new run for a finished one."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_subagents import (
    InvalidRequest,
    Message,
    SubagentClient,
    TaskNotFound,
    TaskStatus,
    WrongTaskState,
)
from durable_subagents.config import Settings
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.tasks import script


async def test_follow_up_continues_a_completed_task(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    model = script({"text": "first answer"}, {"text": "second answer"})
    task_id = await client.spawn_task("explore", "question one", model=model)
    first = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert first.status == TaskStatus.COMPLETED and first.result == "first answer"

    await client.send_input(task_id, "question two")
    second = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert second.status == TaskStatus.COMPLETED
    assert second.result == "second answer"
    assert second.turns == 2 and second.run_id != first.run_id
    assert second.usage.input_tokens > first.usage.input_tokens
    transcript = await client.get_transcript(task_id)
    assert [(m.role, m.content) for m in transcript if m.role != "system"] == [
        ("user", "question one"),
        ("assistant", "first answer"),
        ("user", "question two"),
        ("assistant", "second answer"),
    ]
    assert [t.id for t in await client.list_tasks()].count(task_id) <= 1


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def conversation(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in messages if m.role != "system"]


async def test_input_while_a_tool_runs_joins_at_the_next_turn_boundary(
    client: SubagentClient, worker: None
) -> None:
    # The command sleeps until the test ends its sleep: the input surely arrives while
    # the call runs, however slow the machine.
    sleep = unique_sleep(600)
    model = script(bash(f"{sleep}; echo slept"), {"text": "finished"})
    task_id = await client.spawn_task("general", "work", model=model)
    await wait_for(lambda: processes_matching(sleep), what="the tool to start")
    info = await client.send_input(task_id, "also check the tests")
    assert info.status == TaskStatus.RUNNING and info.turns == 1
    [pid] = processes_matching(sleep)
    os.kill(pid, signal.SIGTERM)  # the call goes on to its echo and ends
    done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.result == "finished" and done.turns == 2
    talk = conversation(await client.get_transcript(task_id))
    # the tool's result first (the call was answered), then the input, then the model
    assert [role for role, _ in talk] == ["user", "assistant", "tool", "user", "assistant"]
    assert "slept" in talk[2][1] and talk[3] == ("user", "also check the tests")


async def test_input_while_paused_follows_the_decided_calls(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    model = script(bash("echo ran > ran.txt"), {"text": "done"})
    task_id = await client.spawn_task("general", "x", model=model, permission_mode="default")
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    await client.send_input(task_id, "use the fast path")
    still = await client.check_task(task_id)
    assert still.status == TaskStatus.PAUSED and still.pause_id == paused.pause_id
    await client.approve(task_id)
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED and (workspace / "ran.txt").exists()
    talk = conversation(await client.get_transcript(task_id))
    assert [role for role, _ in talk] == ["user", "assistant", "tool", "user", "assistant"]
    assert talk[3] == ("user", "use the fast path")


async def test_input_during_the_final_answer_is_read_before_completing(
    client: SubagentClient, worker: None
) -> None:
    model = script({"text": "draft answer", "delay": 1.5}, {"text": "revised answer"})
    task_id = await client.spawn_task("explore", "x", model=model)
    await wait_for_turn(client, task_id, 1)
    await client.send_input(task_id, "mention the edge cases")
    done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED
    assert done.result == "revised answer" and done.turns == 2 and done.unread_input == 0
    assert conversation(await client.get_transcript(task_id)) == [
        ("user", "x"),
        ("assistant", "draft answer"),
        ("user", "mention the edge cases"),
        ("assistant", "revised answer"),
    ]


async def wait_for_turn(client: SubagentClient, task_id: str, turn: int) -> None:
    deadline = asyncio.get_running_loop().time() + 15
    while (await client.check_task(task_id)).turns < turn:
        assert asyncio.get_running_loop().time() < deadline, f"turn {turn} never started"
        await asyncio.sleep(0.05)


async def test_input_to_a_stopped_task_is_refused_in_every_stopped_state(
    client: SubagentClient, temporal_client: Client, settings: Settings, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-script.json"
    async with create_worker(temporal_client, settings):
        cancelled = await client.spawn_task("general", "x", model=script(bash("sleep 60")))
        await wait_for_turn(client, cancelled, 1)
        assert (await client.cancel_task(cancelled)).status == TaskStatus.CANCELLED
        failed = await client.spawn_task("explore", "x", model=f"scripted:@{missing}")
        timed_out = await client.spawn_task(
            "general", "x", model=script(bash("sleep 60")), time_limit=1
        )
        states = await client.wait_tasks([failed, timed_out], timeout=CEILING)
    assert [i.status for i in states] == [TaskStatus.FAILED, TaskStatus.TIMED_OUT]
    # a cancel that no worker has applied yet shows as cancelling
    cancelling = await client.spawn_task("explore", "x", model="scripted")
    assert (await client.cancel_task(cancelling, wait=False)).status == TaskStatus.CANCELLING

    for task_id, status in [
        (cancelled, "cancelled"),
        (failed, "failed"),
        (timed_out, "timed_out"),
        (cancelling, "cancelling"),
    ]:
        with pytest.raises(WrongTaskState) as caught:
            await client.send_input(task_id, "come back")
        assert caught.value.status == status and "Spawn a new task" in str(caught.value)
        assert (await client.check_task(task_id)).status.value == status  # not revived
    with pytest.raises(InvalidRequest, match="input is empty"):
        await client.send_input(cancelled, " ")
    with pytest.raises(TaskNotFound):
        await client.send_input("no-such-task", "hello")


async def test_input_a_task_never_read_is_reported(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    task_id = await client.spawn_task("explore", "x", model="scripted")
    await client.send_input(task_id, "read this first")  # no worker yet: queued
    await client.cancel_task(task_id, wait=False)
    async with create_worker(temporal_client, settings):
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.CANCELLED and info.turns == 0
    assert info.unread_input == 1


async def test_follow_up_after_max_turns_keeps_the_conversation_well_formed(
    client: SubagentClient, worker: None
) -> None:
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]}
    model = script({"text": "reading", **read}, {"text": "after the follow-up"})
    task_id = await client.spawn_task("explore", "go", model=model, max_turns=1)
    first = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert first.stop_reason == "max_turns"
    await client.send_input(task_id, "please continue")
    done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.result == "after the follow-up"
    roles = [(m.role, m.tool_call_id) for m in await client.get_transcript(task_id)]
    # every tool call is answered before the next user message
    call_at = roles.index(("assistant", None))
    assert roles[call_at + 1] == ("tool", "call_0_0")
    assert roles[call_at + 2] == ("user", None)


async def test_input_during_the_last_allowed_turn_waits_for_a_follow_up(
    client: SubagentClient, worker: None
) -> None:
    read = [{"name": "read_file", "arguments": {"path": "notes.md"}}]
    model = script(
        {"text": "draft", "delay": 1.5},
        {"text": "read it: {prompt}", "tool_calls": read},
        {"text": "later"},
    )
    task_id = await client.spawn_task("explore", "x", model=model, max_turns=1)
    await wait_for_turn(client, task_id, 1)
    await client.send_input(task_id, "one more thing")
    first = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert first.status == TaskStatus.COMPLETED and first.stop_reason == "max_turns"
    assert first.result == "draft" and first.unread_input == 1  # said, not dropped

    # the follow-up run reads it first, with the spawn's budget of one turn again
    await client.send_input(task_id, "and this")
    second = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert second.status == TaskStatus.COMPLETED and second.turns == 2
    assert second.stop_reason == "max_turns" and second.unread_input == 0
    assert second.result == "read it: x"
    assert conversation(await client.get_transcript(task_id)) == [
        ("user", "x"),
        ("assistant", "draft"),
        ("user", "one more thing"),
        ("user", "and this"),
        ("assistant", "read it: x"),
    ]


async def test_many_large_inputs_at_once_are_read_over_several_turns(
    client: SubagentClient, worker: None
) -> None:
    model = script({"text": "busy", "delay": 1.5}, {"text": "a"}, {"text": "b"}, {"text": "c"})
    task_id = await client.spawn_task("explore", "x", model=model)
    await wait_for_turn(client, task_id, 1)
    big = [f"{n}" + "y" * 100_000 for n in range(3)]
    for text in big:
        await client.send_input(task_id, text)
    done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED, done.error
    talk = conversation(await client.get_transcript(task_id))
    assert [c for r, c in talk if r == "user"] == ["x", *big]  # all read, in order
    assert done.turns == 4 and done.result == "c"  # one large input per turn
