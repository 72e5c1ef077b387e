"""What a turn costs in history: reads run in their turn, progress is throttled.

The reads a task's rules allow run inside the model turn that asked for them, before it
answers; a read the workflow runs itself (a task with a token budget) is a local
activity; everything else is an activity. A turn that reads costs one server round
trip and six events. These tests check which calls take which path, that an agent can
opt out, that the events a parent watches are the same either way, that a cancel still
stops a long read, and that the memo is written on every status change but progress
alone at most once a second.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_subagents import AgentSpec, SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.tools._processes import running_calls
from durable_subagents.worker import create_worker
from durable_subagents.workflows import _publish as publish

from ..helpers import CEILING
from ..helpers.tasks import script

CALLS = [
    {"name": "read_file", "arguments": {"path": "a.txt"}},
    {"name": "list_files", "arguments": {"pattern": "*.txt"}},
    {"name": "grep", "arguments": {"pattern": "alpha"}},
    {"name": "write_file", "arguments": {"path": "b.txt", "content": "beta\n"}},
]


async def tool_paths(temporal: Client, task_id: str) -> dict[str, list[str]]:
    """Which tool calls ran in their model turn, as local activities, or as activities."""
    converter = temporal.data_converter.payload_converter
    out: dict[str, list[str]] = {"turn": [], "local": [], "activity": []}
    async for e in temporal.get_workflow_handle(task_id).fetch_history_events():
        summary = ""
        if e.HasField("user_metadata") and e.user_metadata.HasField("summary"):
            summary = converter.from_payload(e.user_metadata.summary, str)
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            local = e.marker_recorded_event_attributes.marker_name == "core_local_activity"
            if local and summary != "activity options":  # the worker's settings, asked once
                out["local"].append(summary.split(" · ")[0])
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            if name == "run_tool":
                out["activity"].append(summary.split(" · ")[0])
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payload = e.activity_task_completed_event_attributes.result.payloads[0]
            result = converter.from_payload(payload, dict)
            ran = result.get("read_results", {})
            out["turn"] += [c["name"] for c in result.get("tool_calls", []) if c["id"] in ran]
    return out


async def test_reads_run_in_their_turn_and_writes_as_activities(
    client: SubagentClient, temporal_client: Client, worker: None, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    client.agents["both"] = AgentSpec(name="both", permission_mode="dont_ask")
    client.agents["apart"] = AgentSpec(
        name="apart", permission_mode="dont_ask", local_read_tools=False
    )
    model = script({"tool_calls": CALLS}, {"text": "done"})
    in_turn = await client.spawn_task("both", "read and write", model=model)
    apart = await client.spawn_task("apart", "read and write", model=model)
    # a token budget: the workflow may stop after the turn, so it runs the reads itself
    local = await client.spawn_task("both", "read and write", model=model, token_budget=10**6)
    for task_id in (in_turn, apart, local):
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert info.status == TaskStatus.COMPLETED, info.error
        results = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
        assert "alpha" in results[0] and "a.txt" in results[1] and "a.txt:1" in results[2]
        assert not any(m.startswith("Error") for m in results), results
        assert results[3].startswith("wrote"), results[3]

    # the calls of one turn run in parallel: compare without their order
    reads = ["grep", "list_files", "read_file"]
    paths = await tool_paths(temporal_client, in_turn)
    assert sorted(paths["turn"]) == reads and paths["local"] == []
    assert paths["activity"] == ["write_file"]
    paths = await tool_paths(temporal_client, apart)
    assert paths["turn"] == [] and paths["local"] == []
    assert sorted(paths["activity"]) == [*reads, "write_file"]
    paths = await tool_paths(temporal_client, local)
    assert paths["turn"] == [] and sorted(paths["local"]) == reads
    assert paths["activity"] == ["write_file"]
    # a watcher sees the same tool events whichever way they ran
    for task_id in (in_turn, apart, local):
        kinds = [(e.kind, e.tool) async for e in client.watch(task_id) if e.tool]
        assert sorted(kinds) == sorted(
            [(k, c["name"]) for c in CALLS for k in ("tool_started", "tool_finished")]
        )
        summaries = {e.summary async for e in client.watch(task_id) if e.tool == "read_file"}
        assert summaries == {"read_file · a.txt"}, summaries


async def test_a_cancel_stops_a_long_read_in_its_turn(
    client: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    for i in range(6):  # a search of several seconds
        (workspace / f"big{i}.txt").write_text("no match on this line\n" * 270_000)
    model = script({"tool_calls": [{"name": "grep", "arguments": {"pattern": "needle"}}]})
    async with create_worker(temporal_client, settings):
        task_id = await client.spawn_task("explore", "search", model=model)
        started = time.monotonic()
        while not running_calls(task_id):
            assert time.monotonic() - started < CEILING, "the search never started"
            await asyncio.sleep(0.02)
        (pid,) = running_calls(task_id)
        asked = time.monotonic()
        info = await client.cancel_task(task_id)
        assert info.status == TaskStatus.CANCELLED
        # within the turn's heartbeat, not after the whole search
        assert time.monotonic() - asked < 12
        # its process was killed and reaped before the cancel returned
        assert not running_calls(task_id)
        assert not Path(f"/proc/{pid}").exists()


async def history_counts(temporal: Client, task_id: str) -> tuple[int, int]:
    """Events in the task's history, and how many of them are memo writes."""
    events = [e async for e in temporal.get_workflow_handle(task_id).fetch_history_events()]
    memo = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED]
    return len(events), len(memo)


async def test_fast_turns_cost_six_events_and_the_memo_stays_right(
    client: SubagentClient, temporal_client: Client, worker: None, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}
    turns = 12
    task_id = await client.spawn_task(
        "explore", "read", model=script(read, repeat=turns - 1, final="done")
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED and info.turns == turns
    events, memo_writes = await history_counts(temporal_client, task_id)
    # per turn: a workflow task (3) and the model turn that ran the read (3)
    assert events <= 6 * turns + 12, events
    assert memo_writes < turns, memo_writes
    # the last write says where the task ended
    desc = await temporal_client.get_workflow_handle(task_id).describe()
    final = await desc.memo()
    assert final["turns"] == turns and final["status"] == "completed"
    assert final["usage"] == info.usage.model_dump()
    transcript = await client.get_transcript(task_id)
    assert transcript[-1].content == "done"


async def test_progress_is_written_at_most_every_progress_every(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Progress alone (turns, usage, head) goes to the memo at most every
    ``PROGRESS_EVERY``, as each write is a visibility update on the server: a task's
    first turn shows at once, and so does its close; turns slower than the interval
    each show while the task runs."""
    slow = {
        "text": "thinking",
        "delay": 1.1,
        "tool_calls": [{"name": "list_files", "arguments": {}}],
    }
    last = {"text": "done", "delay": 1.1}

    async def turns_seen() -> tuple[list[int], int]:
        task_id = await client.spawn_task("explore", "slow", model=script(slow, slow, slow, last))
        seen: list[int] = []
        while True:
            info = await client.check_task(task_id)
            if not seen or info.turns != seen[-1]:
                seen.append(info.turns)
            if info.status.terminal:
                break
            await asyncio.sleep(0.1)
        assert info.status == TaskStatus.COMPLETED
        return seen, (await history_counts(temporal_client, task_id))[1]

    assert publish.PROGRESS_EVERY == timedelta(seconds=10)
    async with create_worker(temporal_client, settings):
        seen, writes = await turns_seen()
    assert seen[-1] == 4 and 1 in seen and not {2, 3} & set(seen), seen
    # The sandbox imports the workflow code afresh: a worker outside it sees the patch.
    monkeypatch.setattr(publish, "PROGRESS_EVERY", timedelta(seconds=1))
    async with create_worker(temporal_client, settings, subagent_workflow_sandbox=False):
        every_turn, more_writes = await turns_seen()
    assert every_turn[-1] == 4 and {1, 2, 3} <= set(every_turn), every_turn
    assert more_writes >= writes + 2


async def test_later_turns_name_the_offered_tools_by_digest_and_rules_still_hold(
    client: SubagentClient, temporal_client: Client, worker: None, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}
    write = {"tool_calls": [{"name": "write_file", "arguments": {"path": "x", "content": "x"}}]}
    task_id = await client.spawn_task(
        "explore", "read", model=script(read, read, write, {"text": "ok"})
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED
    converter = temporal_client.data_converter.payload_converter
    results = []
    async for e in temporal_client.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payload = e.activity_task_completed_event_attributes.result.payloads[0]
            results.append(converter.from_payload(payload, dict))
    assert results[0]["offered_tools"] == ["read_file", "list_files", "grep"]
    assert all(r.get("same_tools") and "offered_tools" not in r for r in results[1:])
    # explore never offered write_file: turn 3's call is refused as before
    tool_messages = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert tool_messages[-1].is_error and "unknown tool 'write_file'" in tool_messages[-1].content
    assert not (workspace / "x").exists()
