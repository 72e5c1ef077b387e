"""The reads a model turn runs itself: what the workflow would allow, and nothing else.

A turn runs its model's built-in reads before it answers, judged by the verdict the
workflow decides calls with, on the task's rules. The scripted model attacks that
judgement: denied paths, a symlink and ``..`` onto them, a search that would reach
them, a path that asks, arguments that are not JSON, more calls than a turn may make.
Whatever a turn ran is in its result (``read_results``); a secret it must not read
appears nowhere in the task's history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.wire._payloads import MAX_CALLS_PER_TURN

from ..helpers import CEILING
from ..helpers.tasks import script

SECRET = "the-key-material"


def read(call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": "read_file", "arguments": arguments}


async def turn_reads(temporal: Client, task_id: str) -> tuple[list[set[str]], bytes]:
    """The call ids each model turn ran itself, and the whole history's bytes."""
    converter = temporal.data_converter.payload_converter
    ran: list[set[str]] = []
    history = b""
    async for e in temporal.get_workflow_handle(task_id).fetch_history_events():
        history += e.SerializeToString()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payload = e.activity_task_completed_event_attributes.result.payloads[0]
            result = converter.from_payload(payload, dict)
            if "head" in result:  # a model turn's result
                ran.append(set(result.get("read_results", {})))
    return ran, history


async def outputs(client: SubagentClient, task_id: str) -> dict[str, str]:
    return {
        m.tool_call_id or "": m.content
        for m in await client.get_transcript(task_id)
        if m.role == "tool"
    }


async def test_a_turn_runs_only_the_reads_the_rules_allow(
    client: SubagentClient, temporal_client: Client, worker: None, workspace: Path
) -> None:
    (workspace / "secrets").mkdir()
    (workspace / "secrets" / "key.txt").write_text(SECRET + "\n")
    (workspace / "docs").symlink_to("secrets")
    (workspace / "private").mkdir()
    (workspace / "private" / "notes.txt").write_text("private notes\n")
    (workspace / "ok.txt").write_text("fine to read\n")
    client.agents["guarded"] = AgentSpec(
        name="guarded",
        permission_mode="dont_ask",
        tools=["read_file", "grep", "list_files"],
        permissions=[
            PermissionRule(tool="*", pattern="secrets/*", action="deny"),
            PermissionRule(tool="read_file", pattern="private/*", action="ask"),
        ],
    )
    calls = [
        read("direct", path="secrets/key.txt"),
        read("dotdot", path="private/../secrets/key.txt"),
        read("symlink", path="docs/key.txt"),
        read("absolute", path=str(workspace / "secrets" / "key.txt")),
        {"id": "search", "name": "grep", "arguments": {"pattern": "key-material"}},
        read("asks", path="private/notes.txt"),
        {"id": "raw", "name": "read_file", "arguments": {"_raw": '{"path": "ok.txt"'}},
        read("allowed", path="ok.txt"),
    ]
    task_id = await client.spawn_task(
        "guarded", "read", model=script({"tool_calls": calls}, {"text": "done"})
    )
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused
    assert [p.call_id for p in paused.pending_approvals] == ["asks"]
    await client.approve(task_id)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error

    ran, history = await turn_reads(temporal_client, task_id)
    assert ran == [{"allowed"}, set()], ran  # the first turn ran the one read it may
    assert SECRET.encode() not in history
    out = await outputs(client, task_id)
    for denied in ("direct", "dotdot", "symlink", "absolute", "search"):
        assert "denied by this agent's permission rules" in out[denied], (denied, out[denied])
    assert "not valid JSON" in out["raw"]
    assert "fine to read" in out["allowed"]
    # asked, approved, then run by the workflow as before
    assert "private notes" in out["asks"]
    assert SECRET not in "\n".join(out.values())


async def test_a_turn_past_its_limits_leaves_every_call_to_the_workflow(
    client: SubagentClient, temporal_client: Client, worker: None, workspace: Path
) -> None:
    (workspace / "ok.txt").write_text("fine to read\n")
    client.agents["reader"] = AgentSpec(
        name="reader", permission_mode="dont_ask", tools=["read_file"]
    )
    too_many = [read(f"c{i}", path="ok.txt") for i in range(MAX_CALLS_PER_TURN + 1)]
    task_id = await client.spawn_task(
        "reader", "read", model=script({"tool_calls": too_many}, {"text": "done"})
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    ran, _ = await turn_reads(temporal_client, task_id)
    assert ran == [set(), set()], ran
    messages = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    # the workflow ran the calls a turn may make, and refused the rest, as before
    assert len(messages) == len(too_many)
    assert all("fine to read" in m.content for m in messages[:MAX_CALLS_PER_TURN])
    assert f"at most {MAX_CALLS_PER_TURN} tool calls" in messages[-1].content
