"""wait_tasks: several tasks at once, returning as they finish or pause."""

from __future__ import annotations

import time

import pytest

from durable_subagents import (
    AgentSpec,
    InvalidRequest,
    PermissionRule,
    SubagentClient,
    TaskNotFound,
    TaskStatus,
)

from ..helpers import CEILING
from ..helpers.tasks import script

SLOW = script({"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 30"}}]})
ASK = script(
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo ok"}}]}, {"text": "approved"}
)


@pytest.fixture
def asking(client: SubagentClient) -> SubagentClient:
    client.agents["asking"] = AgentSpec(
        name="asking", tools=["bash"], permissions=[PermissionRule(tool="bash", action="ask")]
    )
    return client


async def test_any_returns_when_the_first_task_finishes(
    client: SubagentClient, worker: None
) -> None:
    slow = await client.spawn_task("general", "slow", model=SLOW)
    fast = await client.spawn_task("explore", "fast", model=script({"text": "quick"}))
    started = time.monotonic()
    infos = await client.wait_tasks([slow, fast], mode="any", timeout=CEILING)
    assert time.monotonic() - started < 20
    assert [i.id for i in infos] == [slow, fast]
    assert infos[0].status == TaskStatus.RUNNING
    assert infos[1].status == TaskStatus.COMPLETED and infos[1].result == "quick"
    await client.cancel_task(slow)


async def test_all_returns_when_every_task_finished_or_paused(
    asking: SubagentClient, worker: None
) -> None:
    paused = await asking.spawn_task("asking", "ask", model=ASK)
    done = await asking.spawn_task(
        "explore", "two turns", model=script({"text": "a", "delay": 1}, {"text": "b"})
    )
    infos = await asking.wait_tasks([paused, done], mode="all", timeout=CEILING)
    assert [i.status for i in infos] == [TaskStatus.PAUSED, TaskStatus.COMPLETED]

    # a pause the caller decided is skipped, as with check_task's after_pause
    pause_id = infos[0].pause_id
    await asking.approve(paused)
    again = await asking.wait_tasks([paused], timeout=CEILING, after_pause={paused: pause_id})
    assert again[0].status == TaskStatus.COMPLETED and again[0].result == "approved"


async def test_all_returns_current_states_at_the_timeout(
    client: SubagentClient, worker: None
) -> None:
    slow = await client.spawn_task("general", "slow", model=SLOW)
    started = time.monotonic()
    infos = await client.wait_tasks([slow], timeout=1.5)
    assert 1.4 < time.monotonic() - started < 10
    assert infos[0].status in (TaskStatus.PENDING, TaskStatus.RUNNING)
    await client.cancel_task(slow)


async def test_waiting_long_polls_instead_of_polling(
    client: SubagentClient, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = await client.spawn_task("general", "slow", model=SLOW)
    await client.wait_tasks([slow], timeout=1)  # it started
    describes = 0
    real = client._info

    async def counting(task_id: str):  # type: ignore[no-untyped-def]
        nonlocal describes
        describes += 1
        return await real(task_id)

    monkeypatch.setattr(client, "_info", counting)
    await client.wait_tasks([slow], timeout=4)
    # a sleep loop would describe the task every few hundred ms
    assert describes <= 3
    await client.cancel_task(slow)


async def test_bad_requests_are_refused(client: SubagentClient) -> None:
    with pytest.raises(InvalidRequest, match="at least one task id"):
        await client.wait_tasks([])
    with pytest.raises(InvalidRequest, match="mode must be"):
        await client.wait_tasks(["x"], mode="some")  # type: ignore[arg-type]
    with pytest.raises(TaskNotFound):
        await client.wait_tasks(["no-such-task"], timeout=5)
    with pytest.raises(InvalidRequest, match="timeout must be"):
        await client.wait_tasks(["x"], timeout=-1)
    with pytest.raises(InvalidRequest, match="timeout must be"):
        await client.check_task("x", wait=True, timeout="5")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="unknown status 'bogus'"):
        await client.list_tasks(status="bogus")
