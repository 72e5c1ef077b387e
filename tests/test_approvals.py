"""Tool approvals: a task pauses visibly, waits durably, and goes on as decided."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from durable_subagents import (
    AgentSpec,
    InvalidRequest,
    PermissionRule,
    SubagentClient,
    TaskStatus,
)
from durable_subagents.config import Settings
from durable_subagents.worker import create_worker

from .conftest import script

CAREFUL = AgentSpec(
    name="careful",
    system_prompt="You ask before running commands.",
    tools=["bash", "read_file"],
    permissions=[PermissionRule(tool="bash", action="ask")],
)


def bash(*commands: str) -> dict:  # type: ignore[type-arg]
    return {"tool_calls": [{"name": "bash", "arguments": {"command": c}} for c in commands]}


@pytest.fixture
def careful(client: SubagentClient) -> SubagentClient:
    client.agents["careful"] = CAREFUL
    return client


async def test_pause_approve_some_reject_the_rest(
    careful: SubagentClient, worker: None, workspace: Path
) -> None:
    model = script(bash("echo approved > out.txt", "echo nope > no.txt"), {"text": "done"})
    task_id = await careful.spawn_task("careful", "write files", model=model)
    paused = await careful.check_task(task_id, wait=True, timeout=30)
    assert paused.status == TaskStatus.PAUSED and paused.pause_id
    assert [p.tool_name for p in paused.pending_approvals] == ["bash", "bash"]
    assert "echo approved" in paused.pending_approvals[0].arguments_preview
    first = paused.pending_approvals[0].call_id

    await careful.approve(task_id, [first])
    # still paused on the same pause: a wait that skips it returns at the timeout
    again = await careful.check_task(task_id, wait=True, timeout=1, after_pause=paused.pause_id)
    assert again.status == TaskStatus.PAUSED and again.pause_id == paused.pause_id
    await careful.reject(task_id, reason="not that one")

    done = await careful.check_task(task_id, wait=True, timeout=30, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED and done.pending_approvals == []
    assert (workspace / "out.txt").read_text() == "approved\n"
    assert not (workspace / "no.txt").exists()
    tool_msgs = [m for m in await careful.get_transcript(task_id) if m.role == "tool"]
    assert "the parent rejected this call: not that one" in tool_msgs[1].content


async def test_pause_is_visible_and_decidable_with_no_worker(
    careful: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    model = script(bash("echo ok > late.txt"), {"text": "done"})
    async with create_worker(temporal_client, settings):
        task_id = await careful.spawn_task("careful", "x", model=model)
        paused = await careful.check_task(task_id, wait=True, timeout=30)
    assert paused.status == TaskStatus.PAUSED
    # every worker is gone: the pause is still readable and the decision is durable
    assert (await careful.check_task(task_id)).pending_approvals[0].tool_name == "bash"
    await careful.approve(task_id)
    async with create_worker(temporal_client, settings):
        done = await careful.check_task(task_id, wait=True, timeout=30, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED
    assert (workspace / "late.txt").exists()


async def test_approval_timeout_rejects_undecided_calls(
    careful: SubagentClient, worker: None, workspace: Path
) -> None:
    model = script(bash("touch never.txt"), {"text": "gave up: {last_tool_result}"})
    task_id = await careful.spawn_task("careful", "x", model=model, approval_timeout=1)
    done = await careful.check_task(task_id, wait=True, timeout=30, after_pause="none")
    paused_first = done.status == TaskStatus.PAUSED
    if paused_first:
        done = await careful.check_task(task_id, wait=True, timeout=30, after_pause=done.pause_id)
    assert done.status == TaskStatus.COMPLETED
    assert "no decision within 1s" in (done.result or "")
    assert not (workspace / "never.txt").exists()


async def test_decisions_are_checked(careful: SubagentClient, worker: None) -> None:
    model = script(bash("echo hi"), {"text": "done"})
    task_id = await careful.spawn_task("careful", "x", model=model)
    paused = await careful.check_task(task_id, wait=True, timeout=30)
    with pytest.raises(InvalidRequest, match="not pending"):
        await careful.approve(task_id, ["call_9_9"])
    await careful.approve(task_id)
    done = await careful.check_task(task_id, wait=True, timeout=30, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED
    with pytest.raises(InvalidRequest, match="not paused"):
        await careful.approve(task_id)


async def test_spawn_restrictions_can_ask_but_never_widen(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    model = script(bash("echo a > a.txt"), {"text": "done"})
    task_id = await client.spawn_task(
        "general",
        "x",
        model=model,
        permissions=[{"tool": "bash", "pattern": "echo *", "action": "ask"}],
    )
    paused = await client.check_task(task_id, wait=True, timeout=30)
    assert paused.status == TaskStatus.PAUSED
    await client.cancel_task(task_id)
    info = await client.check_task(task_id)
    assert info.status == TaskStatus.CANCELLED and info.pending_approvals == []
    assert not (workspace / "a.txt").exists()


async def test_rules_see_the_whole_of_a_long_command(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    client.agents["no-touch"] = AgentSpec(
        name="no-touch",
        tools=["bash"],
        permissions=[PermissionRule(tool="bash", pattern="*touch*", action="deny")],
    )
    padded = "echo " + "x" * 9000 + " >/dev/null; touch pwned"
    huge = "echo " + "y" * 70_000 + " >/dev/null; echo fine"
    model = script(bash(padded), bash(huge), {"text": "done"})
    task_id = await client.spawn_task("no-touch", "x", model=model)
    done = await client.check_task(task_id, wait=True, timeout=30)
    assert done.status == TaskStatus.COMPLETED
    assert not (workspace / "pwned").exists()
    tool_msgs = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert "denied by this agent's permission rules" in tool_msgs[0].content
    assert "too long to check against this agent's permission rules" in tool_msgs[1].content
