"""The agent loop end to end: real dev server, real worker, scripted model."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from durable_subagents import AgentSpec, SubagentClient, TaskEvent, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.tools import ToolContext, ToolRegistry, tool
from durable_subagents.worker import create_worker

from ..helpers import CEILING, eventually
from ..helpers.tasks import script


def read(path: str) -> dict:
    return {"tool_calls": [{"name": "read_file", "arguments": {"path": path}}]}


async def test_runs_to_final_answer_with_usage_and_turns(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("the answer is 42\n")
    model = script(read("notes.txt"), {"text": "Found: {last_tool_result}"})
    task_id = await client.spawn_task("explore", "What is the answer?", model=model)
    assert task_id.startswith("subagent-explore-")
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED
    assert "the answer is 42" in (info.result or "")
    assert info.turns == 2
    assert info.stop_reason == "end_turn"
    assert info.usage.input_tokens > 0 and info.usage.output_tokens > 0
    assert info.model == "scripted"
    assert info.agent == "explore"
    assert info.finished_at is not None


async def test_several_tool_calls_of_one_turn_run_in_parallel(
    client: SubagentClient, temporal_client: Client, worker: None, workspace: Path
) -> None:
    calls = [
        {"name": "bash", "arguments": {"command": f"sleep 0.5; echo call{i}"}} for i in range(3)
    ]
    model = script({"tool_calls": calls}, {"text": "done"})
    task_id = await client.spawn_task("general", "run three things", model=model)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED
    events = [e async for e in temporal_client.get_workflow_handle(task_id).fetch_history_events()]
    tool_events = [
        (e.event_type, e.event_id)
        for e in events
        if e.event_type
        in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        )
    ]
    # turn 1, then three tool activities all scheduled before the first completes
    kinds = [k for k, _ in tool_events[2:]]
    assert kinds[:3] == [EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED] * 3


async def test_max_turns_stops_with_reason(client: SubagentClient, worker: None) -> None:
    model = script({"text": "looking", **read("x")}, repeat=50)
    task_id = await client.spawn_task("explore", "loop forever", model=model, max_turns=3)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED
    assert info.stop_reason == "max_turns"
    assert info.turns == 3
    assert info.result == "looking"


async def test_time_limit_times_out_with_partial_output(
    client: SubagentClient, worker: None
) -> None:
    model = script({"text": "partial", **read("x")}, {"text": "slow", "delay": 30})
    task_id = await client.spawn_task("explore", "be slow", model=model, time_limit=2)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.TIMED_OUT
    assert info.stop_reason == "time_limit"
    assert info.result == "partial"


async def test_tool_errors_go_back_to_the_model(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
        read("../../etc/passwd"),
        {"text": "last: {last_tool_result}"},
    )
    task_id = await client.spawn_task("explore", "try things", model=model)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED
    transcript = await client.get_transcript(task_id)
    tool_msgs = [m for m in transcript if m.role == "tool"]
    assert len(tool_msgs) == 2
    assert tool_msgs[0].is_error and "unknown tool 'bash'" in tool_msgs[0].content
    assert tool_msgs[1].is_error and "outside" in tool_msgs[1].content
    assert transcript[0].role == "system" and transcript[1].content == "try things"


async def test_check_and_list_answer_with_no_worker(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    task_id = await client.spawn_task(
        "plan", "plan it", description="a plan", parent_id="parent-xyz", model="scripted"
    )
    info = await client.check_task(task_id)
    assert info.status == TaskStatus.PENDING
    assert info.description == "a plan" and info.parent_id == "parent-xyz"
    waited = await client.check_task(task_id, wait=True, timeout=1.5)
    assert waited.status == TaskStatus.PENDING
    tasks = await eventually(lambda: client.list_tasks(parent_id="parent-xyz"), "the listing")
    assert [t.id for t in tasks] == [task_id]
    assert tasks[0].status == TaskStatus.PENDING
    # a worker comes back: the task runs
    async with create_worker(temporal_client, settings):
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED
    completed = await eventually(
        lambda: client.list_tasks(parent_id="parent-xyz", status="completed"), "it completed"
    )
    assert [t.id for t in completed] == [task_id]
    assert await client.list_tasks(parent_id="parent-xyz", status="running") == []


async def test_spawn_with_task_id_is_idempotent(client: SubagentClient, worker: None) -> None:
    first = await client.spawn_task("explore", "once", model="scripted", task_id="job-123")
    second = await client.spawn_task("explore", "once", model="scripted", task_id="job-123")
    assert first == second == "job-123"
    await client.check_task(first, wait=True, timeout=CEILING)
    third = await client.spawn_task("explore", "once", model="scripted", task_id="job-123")
    assert third == "job-123"
    desc = await client.temporal.get_workflow_handle("job-123").describe()
    assert desc.status == WorkflowExecutionStatus.COMPLETED


async def test_web_ui_metadata(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    model = script({"tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}]})
    task_id = await client.spawn_task(
        "general", "List the files please", description="list files", model=model
    )
    await client.check_task(task_id, wait=True, timeout=CEILING)
    handle = temporal_client.get_workflow_handle(task_id)
    desc = await handle.describe()
    assert await desc.static_summary() == "list files"
    details = await desc.static_details()
    assert details is not None and "general" in details and "List the files please" in details
    summaries = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            payload = event.user_metadata.summary
            summaries.append(temporal_client.data_converter.payload_converter.from_payload(payload))
    assert summaries[0].startswith("turn 1 · ")
    assert "bash · ls -la" in summaries
    assert "turn 2 · scripted" in summaries


async def test_watch_reports_turns_tools_and_close(client: SubagentClient, worker: None) -> None:
    model = script(read("a.txt"), {"text": "bye"})
    task_id = await client.spawn_task("explore", "watch me", model=model)
    events = [e async for e in client.watch(task_id)]
    kinds = [e.kind for e in events]
    assert kinds[-1] == "closed" and events[-1].status == TaskStatus.COMPLETED
    assert [e.turn for e in events if e.kind == "turn"] == [1, 2]
    assert "tool_started" in kinds and "tool_finished" in kinds
    assert any(e.kind == "status" and e.status == TaskStatus.RUNNING for e in events)


async def test_watch_reports_a_cancelled_tool_call(client: SubagentClient, worker: None) -> None:
    """A cancelled call ends as ``tool_finished`` with ``error="cancelled"``, live and on
    every later watch (it had raised AttributeError)."""
    call = {"name": "bash", "arguments": {"command": "echo started; sleep 60"}}
    task_id = await client.spawn_task("general", "run it", model=script({"tool_calls": [call]}))
    live: list[TaskEvent] = []

    async def follow() -> None:
        async for event in client.watch(task_id):
            live.append(event)

    follower = asyncio.create_task(follow())
    deadline = asyncio.get_running_loop().time() + 30
    while not any(e.kind == "tool_started" for e in live):
        assert asyncio.get_running_loop().time() < deadline, live
        await asyncio.sleep(0.1)
    await client.cancel_task(task_id)
    await asyncio.wait_for(follower, 30)
    again = [e async for e in client.watch(task_id)]
    for events in (live, again):
        [finished] = [e for e in events if e.kind == "tool_finished"]
        assert (finished.tool, finished.error) == ("bash", "cancelled")
        assert events[-1].kind == "closed" and events[-1].status == TaskStatus.CANCELLED


async def test_cancel_with_no_worker_is_durable(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    task_id = await client.spawn_task("explore", "never mind", model="scripted")
    info = await client.cancel_task(task_id, wait=True, timeout=1)
    assert info.status == TaskStatus.CANCELLING
    assert (await client.check_task(task_id)).status == TaskStatus.CANCELLING
    async with create_worker(temporal_client, settings):
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.CANCELLED
    assert done.turns == 0


async def test_custom_tools_and_their_crashes(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    registry = ToolRegistry()
    registry.register(shout)
    client.agents["shouter"] = AgentSpec(name="shouter", tools=None)
    model = script(
        {"tool_calls": [{"name": "shout", "arguments": {"text": "hi"}}]},
        {"tool_calls": [{"name": "shout", "arguments": {"text": "boom"}}]},
        {"text": "ok"},
    )
    async with create_worker(temporal_client, settings, tools=registry):
        task_id = await client.spawn_task("shouter", "shout", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        narrowed = await client.spawn_task("explore", "shout", model=model)
        await client.check_task(narrowed, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED
    tool_msgs = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert tool_msgs[0].content == f"HI (from {task_id})" and not tool_msgs[0].is_error
    assert tool_msgs[1].is_error
    assert tool_msgs[1].content == "shout failed: RuntimeError: the shouter broke"
    # an agent with an allowlist never sees a tool outside it
    tool_msgs = [m for m in await client.get_transcript(narrowed) if m.role == "tool"]
    assert "unknown tool 'shout'" in tool_msgs[0].content


@tool(read_only=True)
async def shout(ctx: ToolContext, text: str) -> str:
    """Shout a text back.

    Args:
        ctx: The call's context.
        text: What to shout.
    """
    if text == "boom":
        raise RuntimeError("the shouter broke")
    return text.upper() + f" (from {ctx.task_id})"


async def test_malformed_tool_arguments_never_break_the_workflow(
    client: SubagentClient, worker: None
) -> None:
    calls = [
        {"name": "bash", "arguments": {"command": "echo a", "timeout": "soon"}},
        {"name": "bash", "arguments": {"command": "echo b", "timeout": None}},
        {"name": "bash", "arguments": {"command": ["not", "a", "string"]}},
        {"name": "read_file", "arguments": {"path": 42, "limit": "x"}},
        {"name": "bash", "arguments": {"command": "echo c", "timeout": 1e309}},
        {"name": "bash", "arguments": {"command": "echo d", "timeout": 10**400}},
    ]
    model = script({"tool_calls": calls}, {"text": "survived"})
    task_id = await client.spawn_task("general", "bad args", model=model)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED and info.result == "survived"
    tool_msgs = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert len(tool_msgs) == 6
    assert tool_msgs[2].is_error and "command" in tool_msgs[2].content
    assert tool_msgs[3].is_error


async def test_max_activities_bounds_the_model_turns_in_flight(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    """``SUBAGENTS_MAX_ACTIVITIES=1``: three tasks' model turns run one after another."""
    one = settings.model_copy(update={"max_activities": 1})
    model = script({"text": "slow answer", "delay": 0.5})
    async with create_worker(temporal_client, one):
        ids = [await client.spawn_task("explore", f"task {i}", model=model) for i in range(3)]
        for task_id in ids:
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
            assert info.status == TaskStatus.COMPLETED, info.error
    spans = []
    for task_id in ids:
        started = None
        async for e in temporal_client.get_workflow_handle(task_id).fetch_history_events():
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started = e.event_time.ToDatetime()
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                assert started is not None
                spans.append((started, e.event_time.ToDatetime()))
    assert len(spans) == 3
    spans.sort()
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, spans  # never two at once
