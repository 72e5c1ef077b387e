"""Cancelling a task cancels the tasks registered under it, durably."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus, WrongTaskState
from durable_subagents.config import Settings
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.cli import arun, ok
from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.tasks import script

SLEEP_3907 = unique_sleep(3907)
SLEEP_3911 = unique_sleep(3911)

SLEEP = script({"tool_calls": [{"name": "bash", "arguments": {"command": SLEEP_3907}}]})


async def test_a_task_spawned_with_a_parent_id_is_cancelled_with_its_parent(
    client: SubagentClient, worker: None, env: dict[str, str]
) -> None:
    parent = await client.spawn_task("general", "parent", model=SLEEP)
    # spawned by another process, which is gone before the parent is cancelled
    spawned = ok(
        await arun(
            "spawn", "general", "child", "--parent", parent, "--model", SLEEP, "--json", env=env
        )
    )
    child = json.loads(spawned.out)["id"]
    await wait_for(lambda: len(processes_matching(SLEEP_3907)) == 2, what="both commands")
    assert [t.id for t in await client.list_tasks(parent_id=parent)] == [child]

    assert (await client.cancel_task(parent)).status == TaskStatus.CANCELLED
    done = await client.check_task(child, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.CANCELLED
    await wait_for(lambda: not processes_matching(SLEEP_3907), what="the commands to end")


async def test_a_parent_that_times_out_cancels_its_registered_tasks(
    client: SubagentClient, worker: None
) -> None:
    parent = await client.spawn_task("general", "parent", model=SLEEP, time_limit=2)
    child = await client.spawn_task("general", "child", parent_id=parent, model=SLEEP)
    assert (
        await client.check_task(parent, wait=True, timeout=CEILING)
    ).status == TaskStatus.TIMED_OUT
    assert (
        await client.check_task(child, wait=True, timeout=CEILING)
    ).status == TaskStatus.CANCELLED


async def test_parents_that_are_not_running_tasks(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    # an orchestrator's own id is recorded, not registered with
    outside = await client.spawn_task("explore", "x", parent_id="claude-session-42", model=SLEEP)
    assert (await client.check_task(outside)).parent_id == "claude-session-42"
    # a finished parent: recorded only, the new task runs on
    async with create_worker(temporal_client, settings):
        done = await client.spawn_task("explore", "x", model=script({"text": "done"}))
        await client.check_task(done, wait=True, timeout=CEILING)
        after = await client.spawn_task(
            "explore", "x", parent_id=done, model=script({"text": "ok"})
        )
        assert (await client.check_task(after, wait=True, timeout=CEILING)).result == "ok"
    # a parent being cancelled takes no new tasks
    parent = await client.spawn_task("general", "parent", model=SLEEP)
    await client.cancel_task(parent, wait=False)
    with pytest.raises(WrongTaskState, match="being cancelled"):
        await client.spawn_task("general", "child", parent_id=parent, model=SLEEP)


async def test_cancel_says_what_is_still_settling_at_its_timeout(
    client: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    model = script({"tool_calls": [{"name": "bash", "arguments": {"command": SLEEP_3911}}]})
    async with create_worker(temporal_client, settings):
        task_id = await client.spawn_task("general", "x", model=model)
        await wait_for(lambda: bool(processes_matching(SLEEP_3911)), what="the command")
    # every worker is gone: the cancel is recorded, nothing can acknowledge it yet
    info = await client.cancel_task(task_id, timeout=1)
    assert info.status == TaskStatus.CANCELLING
    assert info.settling and "activity run_tool" in info.settling[0]
    async with create_worker(temporal_client, settings):
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.CANCELLED and done.settling == []
    assert not processes_matching(SLEEP_3911)
