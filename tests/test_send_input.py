"""Follow-up and steering input: signals to a live task, a new run for a finished one."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from durable_subagents import InvalidRequest, SubagentClient, TaskStatus

from .conftest import script


async def test_follow_up_continues_a_completed_task(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    model = script({"text": "first answer"}, {"text": "second answer"})
    task_id = await client.spawn_task("explore", "question one", model=model)
    first = await client.check_task(task_id, wait=True, timeout=30)
    assert first.status == TaskStatus.COMPLETED and first.result == "first answer"

    await client.send_input(task_id, "question two")
    second = await client.check_task(task_id, wait=True, timeout=30)
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


async def test_steering_input_reaches_a_running_task(client: SubagentClient, worker: None) -> None:
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 1.5"}}]},
        {"text": "finished"},
    )
    task_id = await client.spawn_task("general", "work", model=model)
    info = await client.send_input(task_id, "also check the tests")
    assert not info.status.terminal
    done = await client.check_task(task_id, wait=True, timeout=30)
    assert done.result == "finished"
    roles = [(m.role, m.content) for m in await client.get_transcript(task_id)]
    assert ("user", "also check the tests") in roles
    assert roles.index(("user", "also check the tests")) < roles.index(("assistant", "finished"))


async def test_a_cancelled_task_cannot_be_revived(client: SubagentClient) -> None:
    task_id = await client.spawn_task("explore", "x", model="scripted")
    await client.temporal.get_workflow_handle(task_id).cancel()
    await client.temporal.get_workflow_handle(task_id).terminate()
    with pytest.raises(InvalidRequest, match="only a completed task can be continued"):
        await client.send_input(task_id, "come back")
    with pytest.raises(InvalidRequest, match="input is empty"):
        await client.send_input(task_id, " ")


async def test_follow_up_after_max_turns_keeps_the_conversation_well_formed(
    client: SubagentClient, worker: None
) -> None:
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]}
    model = script({"text": "reading", **read}, {"text": "after the follow-up"})
    task_id = await client.spawn_task("explore", "go", model=model, max_turns=1)
    first = await client.check_task(task_id, wait=True, timeout=30)
    assert first.stop_reason == "max_turns"
    await client.send_input(task_id, "please continue")
    done = await client.check_task(task_id, wait=True, timeout=30)
    assert done.result == "after the follow-up"
    roles = [(m.role, m.tool_call_id) for m in await client.get_transcript(task_id)]
    # every tool call is answered before the next user message
    call_at = roles.index(("assistant", None))
    assert roles[call_at + 1] == ("tool", "call_0_0")
    assert roles[call_at + 2] == ("user", None)
