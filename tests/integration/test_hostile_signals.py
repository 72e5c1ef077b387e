"""Signals are checked where they land: sent with a plain Temporal client, as anyone who
may signal a task could send them."""

from __future__ import annotations

from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.wire._payloads import CallDecision, Decisions
from durable_subagents.workflows._subagent import MAX_QUEUED_INPUTS, MAX_REGISTERED

from ..helpers import CEILING, eventually
from ..helpers.tasks import script


async def paused_task(client: SubagentClient, parent_id: str | None = None) -> str:
    client.agents["careful"] = AgentSpec(
        name="careful", permissions=[PermissionRule(tool="bash", action="ask")]
    )
    model = script({"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]})
    task_id = await client.spawn_task("careful", "x", model=model, parent_id=parent_id)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.PAUSED
    return task_id


async def events_of(temporal: Client, task_id: str, kind: int) -> int:
    count = 0
    async for event in temporal.get_workflow_handle(task_id).fetch_history_events():
        count += event.event_type == kind
    return count


async def test_hostile_signals_are_bounded_where_they_land(
    client: SubagentClient, worker: None, temporal_client: Client, workspace: Path
) -> None:
    task_id = await paused_task(client)
    stranger = await paused_task(client)  # another person's task
    handle = temporal_client.get_workflow_handle(task_id)
    # Registrations: no id that is not a task's, none past the cap, and a forged one
    # of a task that is not this one's child is never cancelled with it.
    await handle.signal("register_child", stranger)
    for bad in ("../x", "", "a" * 300, task_id):
        await handle.signal("register_child", bad)
    for i in range(MAX_REGISTERED + 20):
        await handle.signal("register_child", f"victim-{i}")
    # A flood of forged ids first does not keep the task's own child out.
    own = await paused_task(client, parent_id=task_id)  # registers itself
    # Inputs: none over the size, none past the count.
    await handle.signal("send_input", "x" * (256 * 1024))
    for i in range(MAX_QUEUED_INPUTS + 10):
        await handle.signal("send_input", f"steer {i}")
    # Stale decisions: each ignored, the memo never written for them.
    info = await client.check_task(task_id)
    for i in range(35):
        stale = Decisions(
            pause_id=f"pause-{i}-00000000",
            decisions=[CallDecision(call_id="c", arguments_hash="0" * 16, approved=True)],
        )
        await handle.signal("decide", stale)
    status = await eventually(lambda: handle.query("status"), "the task's state")
    signals = MAX_REGISTERED + 26 + MAX_QUEUED_INPUTS + 11 + 35

    async def all_taken() -> bool:
        done = await events_of(
            temporal_client, task_id, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        )
        return done >= signals

    await eventually(all_taken, "every signal delivered")
    await eventually(lambda: _settled(temporal_client, task_id), "the task to take every signal in")
    memo_writes = await events_of(
        temporal_client, task_id, EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED
    )
    assert memo_writes <= 3, memo_writes
    still = await client.check_task(task_id)
    assert still.status == TaskStatus.PAUSED and still.pause_id == info.pause_id
    assert status is not None
    # Cancelling it cancels its own registered child alone: not the stranger, not the
    # ids that are no task's.
    await client.cancel_task(task_id, wait=True, timeout=CEILING)
    cancels = await events_of(
        temporal_client,
        task_id,
        EventType.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    )
    assert cancels == 1
    ended = await client.check_task(own, wait=True, timeout=CEILING)
    assert ended.status == TaskStatus.CANCELLED, ended
    assert (await client.check_task(stranger)).status == TaskStatus.PAUSED
    await client.cancel_task(stranger)


async def _settled(temporal: Client, task_id: str) -> bool:
    """Whether the last workflow task completed after the last signal."""
    last_signal = last_completed = 0
    async for event in temporal.get_workflow_handle(task_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            last_signal = event.event_id
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            last_completed = event.event_id
    return last_completed > last_signal
