"""Subagents that spawn subagents: narrowed children, surfaced pauses, cascading cancel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from durable_subagents import AgentSpec, InvalidRequest, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.providers import SCRIPTS
from durable_subagents.wire._payloads import RUN_TOOL_ACTIVITY
from durable_subagents.workflows._subtasks import WAIT_REPORT_BYTES

from ..helpers import CEILING
from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.tasks import script

SLEEP_3901 = unique_sleep(3901)


def spawn(agent: str, prompt: str, model: str) -> dict:  # type: ignore[type-arg]
    call = {
        "name": "spawn_subagent",
        "arguments": {"agent": agent, "prompt": prompt, "model": model},
    }
    return {"tool_calls": [call]}


WAIT = {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]}


@pytest.fixture
def lead(client: SubagentClient) -> SubagentClient:
    client.agents["lead"] = AgentSpec(
        name="lead", tools=["read_file", "list_files", "grep"], may_spawn=True
    )
    client.agents["lead-ask"] = AgentSpec(
        name="lead-ask",
        tools=["bash", "read_file"],
        permissions=[PermissionRule(tool="bash", action="ask")],
        may_spawn=True,
    )
    client.agents["lead-bash"] = AgentSpec(
        name="lead-bash", tools=["bash"], permission_mode="dont_ask", may_spawn=True
    )
    return client


async def child_of(client: SubagentClient, parent_id: str) -> str:
    transcript = await client.get_transcript(parent_id)
    spawned = [m for m in transcript if m.role == "tool" and m.tool_name == "spawn_subagent"]
    return str(json.loads(spawned[0].content)["task_id"])


async def test_a_child_is_narrowed_to_its_parent(
    lead: SubagentClient, worker: None, workspace: Path
) -> None:
    child_model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]},
        {"text": "child answer"},
    )
    model = script(
        spawn("general", "do the child part", child_model),
        WAIT,
        {"text": "lead done: {last_tool_result}"},
    )
    task_id = await lead.spawn_task("lead", "split the work", model=model)
    info = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert "child answer" in (info.result or "")
    child = await child_of(lead, task_id)
    child_info = await lead.check_task(child)
    assert child_info.parent_id == task_id and child_info.status == TaskStatus.COMPLETED
    child_tools = [m for m in await lead.get_transcript(child) if m.role == "tool"]
    # general has bash, but its parent does not: the child does not get it
    assert "unknown tool 'bash'" in child_tools[0].content


async def test_a_childs_pause_surfaces_on_the_parent(
    lead: SubagentClient, worker: None, workspace: Path
) -> None:
    child_model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo child > c.txt"}}]},
        {"text": "child wrote it"},
    )
    model = script(
        spawn("general", "write c.txt", child_model), WAIT, WAIT, {"text": "{last_tool_result}"}
    )
    task_id = await lead.spawn_task("lead-ask", "delegate", model=model)
    paused = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    child = await child_of(lead, task_id)
    assert [p.call_id.split("/")[0] for p in paused.pending_approvals] == [child]
    assert paused.pending_approvals[0].arguments_preview.startswith("bash · echo child")
    assert not (workspace / "c.txt").exists()

    await lead.approve(task_id)  # routed to the child
    done = await lead.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED, done
    assert (workspace / "c.txt").read_text() == "child\n"
    assert "child wrote it" in (done.result or "")


async def test_cancelling_the_parent_cancels_its_children(
    lead: SubagentClient, temporal_client: Client, worker: None
) -> None:
    child_model = script({"tool_calls": [{"name": "bash", "arguments": {"command": SLEEP_3901}}]})
    model = script(spawn("general", "sleep", child_model), WAIT)
    task_id = await lead.spawn_task("lead-bash", "delegate", model=model)
    await wait_for(lambda: bool(processes_matching(SLEEP_3901)), what="the child's command")
    info = await lead.cancel_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.CANCELLED
    child = await child_of(lead, task_id)
    assert (await lead.check_task(child)).status == TaskStatus.CANCELLED
    desc = await temporal_client.get_workflow_handle(child).describe()
    assert desc.status == WorkflowExecutionStatus.CANCELED
    assert not processes_matching(SLEEP_3901)


async def test_a_child_cannot_switch_provider_or_read_files_as_scripts(
    lead: SubagentClient, worker: None
) -> None:
    model = script(
        spawn("explore", "x", "openai:gpt-4.1"),
        spawn("explore", "x", "scripted:@/etc/passwd"),
        {"text": "done"},
    )
    task_id = await lead.spawn_task("lead", "try", model=model)
    info = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED
    tool_msgs = [m for m in await lead.get_transcript(task_id) if m.role == "tool"]
    assert all(m.is_error and "is not allowed" in m.content for m in tool_msgs)
    assert await lead.list_tasks(parent_id=task_id) == []


async def test_a_follow_up_run_still_knows_the_children_of_earlier_runs(
    lead: SubagentClient, worker: None
) -> None:
    child_model = script({"text": "child answer"})
    model = script(
        spawn("explore", "look", child_model),
        WAIT,
        {"text": "lead done"},
        WAIT,
        {"text": "again: {last_tool_result}"},
    )
    task_id = await lead.spawn_task("lead", "split the work", model=model)
    first = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert first.status == TaskStatus.COMPLETED and first.result == "lead done"
    await lead.send_input(task_id, "what did your subagent say?")
    second = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert second.status == TaskStatus.COMPLETED and second.run_id != first.run_id
    assert "child answer" in (second.result or ""), second.result


async def test_limits_flow_down_the_tree(lead: SubagentClient, worker: None) -> None:
    child_model = script(
        {"text": "child done", "usage": {"input_tokens": 700, "output_tokens": 300}}
    )
    calls = [
        {"name": "spawn_subagent", "arguments": {"agent": "explore", "prompt": f"part {i}"}}
        for i in range(10)
    ]
    for call in calls:
        call["arguments"]["model"] = child_model
    model = script({"tool_calls": calls}, WAIT, {"text": "lead done"})
    task_id = await lead.spawn_task(
        "lead", "split", model=model, max_turns=3, time_limit=300, token_budget=100_000
    )
    info = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert (info.max_turns, info.time_limit, info.token_budget) == (3, 300, 100_000)
    assert info.children == 8  # at most 8 spawns in one turn

    results = [m for m in await lead.get_transcript(task_id) if m.role == "tool"][:10]
    started = [json.loads(m.content)["task_id"] for m in results[:8]]
    assert all("at most 8 subagents may be spawned in one turn" in m.content for m in results[8:])
    budgets = []
    for child in started:
        child_info = await lead.check_task(child)
        assert child_info.max_turns == 2  # the parent had 2 turns left, not explore's 30
        assert child_info.time_limit is not None and child_info.time_limit <= 300
        assert child_info.token_budget is not None
        budgets.append(child_info.token_budget)
    # 8 children of one turn share what was left with their parent: 1/9 each
    assert len(set(budgets)) == 1 and 100_000 // 10 < budgets[0] <= 100_000 // 9
    assert sum(budgets) < 100_000


async def test_a_token_budget_stops_the_task(client: SubagentClient, worker: None) -> None:
    turn = {
        "tool_calls": [{"name": "list_files", "arguments": {}}],
        "usage": {"input_tokens": 400, "output_tokens": 100},
    }
    task_id = await client.spawn_task(
        "explore", "x", model=script(turn, repeat=10), token_budget=1_200
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED
    assert info.stop_reason == "token_budget" and info.turns == 3
    assert info.usage.input_tokens + info.usage.output_tokens == 1_500
    with pytest.raises(InvalidRequest, match="token_budget must be an integer"):
        await client.spawn_task("explore", "x", token_budget=0)


async def scheduled_tool_calls(temporal: Client, task_id: str) -> int:
    """``run_tool`` activities the task's history ever scheduled (started or not)."""
    return sum(
        [
            e.activity_task_scheduled_event_attributes.activity_type.name == RUN_TOOL_ACTIVITY
            async for e in temporal.get_workflow_handle(task_id).fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
    )


async def test_a_childs_tool_calls_run_two_at_once_so_a_tree_cannot_fill_the_tool_slots(
    lead: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """A subagent's child runs 2 tool calls at once (its parent 8): a task and its 16
    children hold at most 40 of a worker's 100 tool slots."""
    sleep = unique_sleep(3911)
    sleeps = {"tool_calls": [{"name": "bash", "arguments": {"command": sleep}}] * 5}
    model = script(spawn("general", "sleep", script(sleeps)), WAIT)
    task_id = await lead.spawn_task("lead-bash", "delegate", model=model)
    await wait_for(lambda: len(processes_matching(sleep)) >= 2, what="two calls")
    [child] = await lead.list_tasks(parent_id=task_id)
    assert child.status == TaskStatus.RUNNING
    # The turn's five calls were decided in one workflow task, which scheduled two: the
    # other three wait in the workflow, holding no slot of the worker's.
    assert await scheduled_tool_calls(temporal_client, child.id) == 2
    assert len(processes_matching(sleep)) == 2
    info = await lead.cancel_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.CANCELLED
    assert (await lead.check_task(child.id)).status == TaskStatus.CANCELLED
    await wait_for(lambda: not processes_matching(sleep), what="the sleeps to end")
    # the queued three never ran: the child's whole history scheduled two calls
    assert await scheduled_tool_calls(temporal_client, child.id) == 2


async def test_children_answering_at_length_cannot_fail_their_parent(
    lead: SubagentClient, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each child answers with 4,000 characters that JSON writes as 12 bytes each: the
    wait report of six of them was over the payload limit, and the parent failed."""
    monkeypatch.setitem(SCRIPTS, "long-answer", [{"text": "\U0001f600" * 5000}])
    child_model = "scripted:long-answer"
    calls = [
        {
            "name": "spawn_subagent",
            "arguments": {"agent": "explore", "prompt": f"part {i}", "model": child_model},
        }
        for i in range(8)
    ]
    model = script({"tool_calls": calls}, WAIT, {"text": "lead done"})
    task_id = await lead.spawn_task("lead", "split", model=model)
    info = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    waited = [m for m in await lead.get_transcript(task_id) if m.role == "tool"][-1]
    assert len(waited.content) <= WAIT_REPORT_BYTES
    report = json.loads(waited.content)
    assert [r["status"] for r in report] == ["completed"] * 8
    for r in report:
        assert r["result"] == "\U0001f600" * len(r["result"]) and len(r["result"]) > 500
        assert r["cut"] == f"result: {len(r['result'])} of 4000 characters shown"


async def test_a_long_spawn_prompt_is_refused_not_cut(lead: SubagentClient, worker: None) -> None:
    """Arguments over 8 KB reach the workflow as previews: the child was started with
    the first 200 characters of its prompt and a note about a blob it cannot read."""
    prompt = "Do this. " + "detail " * 2000
    call = {
        "name": "spawn_subagent",
        "arguments": {"agent": "explore", "prompt": prompt, "model": script({"text": "x"})},
    }
    model = script({"tool_calls": [call]}, {"text": "lead done"})
    task_id = await lead.spawn_task("lead", "split", model=model)
    info = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert await lead.list_tasks(parent_id=task_id) == []
    [refused] = [m for m in await lead.get_transcript(task_id) if m.role == "tool"]
    assert refused.is_error and "over 8 KB" in refused.content, refused.content


async def test_a_wait_on_many_ids_gets_a_short_answer(
    lead: SubagentClient, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifteen thousand ids (a list stays inline however long): the refusal named each, and
    the parent's next model-turn input was over the payload limit."""
    ids = [f"not-a-child-{i:05d}" for i in range(15_000)]
    wait = {"tool_calls": [{"name": "wait_subagents", "arguments": {"task_ids": ids}}]}
    child = script({"text": "x"})
    turns = [spawn("explore", "x", child), wait, {"text": "lead done"}]
    monkeypatch.setitem(SCRIPTS, "many-ids", turns)
    task_id = await lead.spawn_task("lead", "x", model="scripted:many-ids")
    info = await lead.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    refused = [m for m in await lead.get_transcript(task_id) if m.role == "tool"][-1]
    assert refused.is_error and len(refused.content) < 1000, refused.content[:300]
    assert refused.content.startswith("not subagents of this task: not-a-child-00000, ")
    assert "and 14995 more" in refused.content
