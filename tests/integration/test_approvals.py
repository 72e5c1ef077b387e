"""Tool approvals: a task pauses visibly, waits durably, and goes on as decided."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from durable_subagents import (
    AgentSpec,
    InvalidRequest,
    PermissionRule,
    SubagentClient,
    TaskEvent,
    TaskNotFound,
    TaskStatus,
    UnknownCallId,
    WrongTaskState,
)
from durable_subagents.activities import _model_turn as model_turn_module
from durable_subagents.config import Settings
from durable_subagents.policy import arguments_hash
from durable_subagents.wire._payloads import (
    MAX_CALLS_KEPT,
    MAX_CALLS_PER_TURN,
    CallDecision,
    Decisions,
)
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.tasks import script

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
    paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED and paused.pause_id
    assert [p.tool_name for p in paused.pending_approvals] == ["bash", "bash"]
    assert "echo approved" in paused.pending_approvals[0].arguments_preview
    first = paused.pending_approvals[0].call_id

    await careful.approve(task_id, [first])
    # still paused on the same pause: a wait that skips it returns at the timeout
    again = await careful.check_task(task_id, wait=True, timeout=1, after_pause=paused.pause_id)
    assert again.status == TaskStatus.PAUSED and again.pause_id == paused.pause_id
    await careful.reject(task_id, reason="not that one")

    done = await careful.check_task(
        task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
    )
    assert done.status == TaskStatus.COMPLETED and done.pending_approvals == []
    assert (workspace / "out.txt").read_text() == "approved\n"
    assert not (workspace / "no.txt").exists()
    tool_msgs = [m for m in await careful.get_transcript(task_id) if m.role == "tool"]
    assert "the parent rejected this call: not that one" in tool_msgs[1].content


async def test_a_wait_after_a_decision_skips_the_pause_it_decided(
    careful: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    """No ``after_pause`` needed, even while no worker has applied the decisions yet: the
    client that decided remembers them, and another one finds them in the history."""
    model = script(bash("echo one", "echo two"), bash("echo three"), {"text": "done"})
    async with create_worker(temporal_client, settings):
        task_id = await careful.spawn_task("careful", "x", model=model)
        first = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert first.status == TaskStatus.PAUSED
    one, two = (p.call_id for p in first.pending_approvals)
    await careful.approve(task_id, [one])
    # a partly decided pause still needs the caller: returned at once
    partly = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert partly.pause_id == first.pause_id
    await careful.reject(task_id, [two], reason="no")
    await careful.approve(task_id, [one])  # a repeat sends nothing
    for waiter in (careful, SubagentClient(temporal_client, task_queue=settings.task_queue)):
        started = time.monotonic()
        still = await waiter.check_task(task_id, wait=True, timeout=1)
        assert time.monotonic() - started >= 1  # waited past it, to the timeout
        assert still.pause_id == first.pause_id
    async with create_worker(temporal_client, settings):
        second = await careful.check_task(task_id, wait=True, timeout=CEILING)
        assert second.status == TaskStatus.PAUSED and second.pause_id != first.pause_id
        await careful.approve(task_id)
        done = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED
    decided = [
        e
        async for e in temporal_client.get_workflow_handle(task_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert len(decided) == 3  # one, two, and the second pause: the repeat was not sent


async def test_pause_is_visible_and_decidable_with_no_worker(
    careful: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    model = script(bash("echo ok > late.txt"), {"text": "done"})
    async with create_worker(temporal_client, settings):
        task_id = await careful.spawn_task("careful", "x", model=model)
        paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    # every worker is gone: the pause is still readable and the decision is durable
    assert (await careful.check_task(task_id)).pending_approvals[0].tool_name == "bash"
    await careful.approve(task_id)
    async with create_worker(temporal_client, settings):
        done = await careful.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
        )
    assert done.status == TaskStatus.COMPLETED
    assert (workspace / "late.txt").exists()


async def test_approval_timeout_rejects_undecided_calls(
    careful: SubagentClient, worker: None, workspace: Path
) -> None:
    model = script(bash("touch never.txt"), {"text": "gave up: {last_tool_result}"})
    task_id = await careful.spawn_task("careful", "x", model=model, approval_timeout=1)
    done = await careful.check_task(task_id, wait=True, timeout=CEILING, after_pause="none")
    paused_first = done.status == TaskStatus.PAUSED
    if paused_first:
        done = await careful.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=done.pause_id
        )
    assert done.status == TaskStatus.COMPLETED
    assert "approval timed out after 1s" in (done.result or "")
    assert not (workspace / "never.txt").exists()


async def test_decisions_are_checked(careful: SubagentClient, worker: None) -> None:
    model = script(bash("echo hi"), {"text": "done"})
    task_id = await careful.spawn_task("careful", "x", model=model)
    paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    with pytest.raises(UnknownCallId, match="not pending"):
        await careful.approve(task_id, ["call_9_9"])
    with pytest.raises(InvalidRequest, match="call_ids is empty"):
        await careful.reject(task_id, [])
    with pytest.raises(TaskNotFound):
        await careful.approve("no-such-task")
    await careful.approve(task_id)
    done = await careful.check_task(
        task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
    )
    assert done.status == TaskStatus.COMPLETED
    with pytest.raises(WrongTaskState, match="not paused") as caught:
        await careful.approve(task_id)
    assert caught.value.status == "completed"
    with pytest.raises(InvalidRequest, match="reason must be text of at most 4096 bytes"):
        await careful.reject(task_id, reason="r" * 5000)
    # refused on the client: nothing reached the task
    assert (await careful.check_task(task_id)).ignored_decisions == []


async def test_stale_and_mismatched_decisions_are_ignored_and_recorded(
    careful: SubagentClient, worker: None, workspace: Path
) -> None:
    model = script(bash("echo 1 > one.txt"), bash("echo 2 > two.txt"), {"text": "done"})
    task_id = await careful.spawn_task("careful", "two steps", model=model)
    first = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert first.status == TaskStatus.PAUSED and first.pending_approvals[0].arguments_hash
    handle = careful.temporal.get_workflow_handle(task_id)
    call = first.pending_approvals[0]

    # a decision bound to other arguments does not approve this call
    forged = CallDecision(call_id=call.call_id, arguments_hash="0" * 16, approved=True)
    await handle.signal("decide", Decisions(pause_id=first.pause_id or "", decisions=[forged]))
    await careful.approve(task_id)
    second = await careful.check_task(
        task_id, wait=True, timeout=CEILING, after_pause=first.pause_id
    )
    assert second.status == TaskStatus.PAUSED and second.pause_id != first.pause_id
    assert (workspace / "one.txt").exists() and not (workspace / "two.txt").exists()

    # a late "approve all" of the first pause never approves the second one
    late = Decisions(
        pause_id=first.pause_id or "",
        decisions=[
            CallDecision(call_id=p.call_id, arguments_hash=p.arguments_hash, approved=True)
            for p in [*first.pending_approvals, *second.pending_approvals]
        ],
    )
    await handle.signal("decide", late)
    reasons = [
        f"call {call.call_id}: its arguments differ",
        f"pause {first.pause_id} is over (current pause: {second.pause_id})",
    ]
    events = await _events_until(
        careful,
        task_id,
        lambda seen: (
            sum(e.kind == "decision_ignored" for e in seen) >= len(reasons)
            and sum(e.kind == "decision" for e in seen) >= 3
        ),
    )
    assert [e.summary for e in events if e.kind == "decision_ignored"] == [
        f"pause {first.pause_id}: {r}" for r in reasons
    ]
    assert sum(e.kind == "decision" for e in events) == 3
    info = await careful.check_task(task_id)
    assert info.status == TaskStatus.PAUSED and info.pause_id == second.pause_id
    assert not (workspace / "two.txt").exists()
    # A stale decision never writes the memo itself: the late one waits for its next
    # write (the first was shown when the second pause began).
    assert [d.reason for d in info.ignored_decisions] == reasons[:1]

    await careful.reject(task_id, reason="enough")
    done = await careful.check_task(
        task_id, wait=True, timeout=CEILING, after_pause=second.pause_id
    )
    assert done.status == TaskStatus.COMPLETED and not (workspace / "two.txt").exists()
    # ... the memo shows them with its next write
    assert [d.reason for d in done.ignored_decisions] == reasons


async def _events_until(
    client: SubagentClient, task_id: str, enough: Callable[[list[TaskEvent]], bool]
) -> list[TaskEvent]:
    """The task's events until ``enough(events)``: a paused task's stream does not end."""
    events: list[TaskEvent] = []

    async def read() -> None:
        async for event in client.watch(task_id):
            events.append(event)
            if enough(events):
                return

    await asyncio.wait_for(read(), CEILING)
    return events


async def test_a_pause_shows_what_it_waits_for_in_the_web_ui(
    careful: SubagentClient, worker: None
) -> None:
    model = script(bash("make deploy"), {"text": "done"})
    task_id = await careful.spawn_task("careful", "x", model=model, approval_timeout=600)
    paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    handle = careful.temporal.get_workflow_handle(task_id)
    details = (
        await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    ).current_details
    assert f"pause `{paused.pause_id}`" in details and "bash · make deploy" in details
    assert "rejected automatically after 600s" in details
    assert f"subagents approve {task_id}" in details
    await careful.approve(task_id)
    await careful.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert metadata.current_details == ""


async def test_large_arguments_pause_by_reference_and_run_in_full(
    careful: SubagentClient, worker: None, workspace: Path
) -> None:
    command = "echo " + "z" * 9000 + " > big.txt"
    model = script(bash(command), {"text": "done"})
    task_id = await careful.spawn_task("careful", "x", model=model)
    paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    pending = paused.pending_approvals[0]
    assert pending.arguments_ref and len(pending.arguments_preview) <= 210
    assert pending.arguments_hash != arguments_hash({"command": command[:100]})
    await careful.approve(task_id)
    done = await careful.check_task(
        task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
    )
    assert done.status == TaskStatus.COMPLETED
    assert (workspace / "big.txt").read_text() == "z" * 9000 + "\n"


async def test_modes_pause_what_they_should(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    write = {"name": "write_file", "arguments": {"path": "notes.md", "content": "hi"}}
    model = script({"tool_calls": [write]}, bash("echo ran > ran.txt"), {"text": "done"})
    # general runs everything (dont_ask); narrowed to accept_edits, only bash asks
    task_id = await client.spawn_task("general", "x", model=model, permission_mode="accept_edits")
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED and paused.turns == 2
    assert (workspace / "notes.md").read_text() == "hi"
    assert [p.tool_name for p in paused.pending_approvals] == ["bash"]
    await client.reject(task_id, reason="no shell")
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED and not (workspace / "ran.txt").exists()

    # default mode asks before the edit too
    task_id = await client.spawn_task("general", "x", model=model, permission_mode="default")
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert [p.tool_name for p in paused.pending_approvals] == ["write_file"]
    await client.cancel_task(task_id)

    # plan never offers or runs them: both calls come back as errors
    task_id = await client.spawn_task("general", "x", model=model, permission_mode="plan")
    done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED and done.turns == 3
    errors = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert all("unknown tool" in e for e in errors) and len(errors) == 2


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
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
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
    done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED
    assert not (workspace / "pwned").exists()
    tool_msgs = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert "denied by this agent's permission rules" in tool_msgs[0].content
    assert "too long to check against this agent's permission rules" in tool_msgs[1].content


async def test_calls_sharing_an_id_never_share_a_verdict(
    careful: SubagentClient, worker: None, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that passes the model's ids on unchanged (one from before ids were made
    unique, say): the command and the read share an id, so they would share a verdict."""
    monkeypatch.setattr(model_turn_module, "well_formed", lambda calls, turn: calls)
    (workspace / "a.txt").write_text("a\n")
    calls = [
        {"id": "x", "name": "bash", "arguments": {"command": "echo pwned > pwned.txt"}},
        {"id": "x", "name": "read_file", "arguments": {"path": "a.txt"}},
        {"id": "y", "name": "read_file", "arguments": {"path": "a.txt"}},
    ]
    model = script({"tool_calls": calls}, {"text": "done"})
    task_id = await careful.spawn_task("careful", "x", model=model)
    done = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED, done
    assert not (workspace / "pwned.txt").exists()
    outputs = [m.content for m in await careful.get_transcript(task_id) if m.role == "tool"]
    assert outputs == ["not run: call id 'x' is not unique"] * 2 + ["     1\ta"]


async def test_a_long_reason_for_many_calls_never_fails_the_task(
    careful: SubagentClient, worker: None
) -> None:
    """A turn of 200 calls that ask, all rejected with one long reason: each result
    repeated it, and the next model-turn input was over the payload limit. (Of a turn,
    64 calls run, here pause; the next 64 come back as errors; the rest are dropped.)"""
    model = script(bash(*(f"echo {i}" for i in range(200))), {"text": "{last_tool_result}"})
    task_id = await careful.spawn_task("careful", "x", model=model)
    paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert len(paused.pending_approvals) == MAX_CALLS_PER_TURN
    reason = "Do not run commands here. " + "x" * 4000
    await careful.reject(task_id, reason=reason)
    done = await careful.check_task(
        task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
    )
    assert done.status == TaskStatus.COMPLETED, done.error
    outputs = [m.content for m in await careful.get_transcript(task_id) if m.role == "tool"]
    assert len(outputs) == MAX_CALLS_KEPT
    rejected = outputs[:MAX_CALLS_PER_TURN]
    assert all(o.startswith("the parent rejected this call: Do not run commands") for o in rejected)
    assert all(o.startswith("not run: at most 64") for o in outputs[MAX_CALLS_PER_TURN:])
    assert sum(len(o) for o in outputs) < 200 * 1024


async def test_a_wait_returns_when_the_decision_it_would_skip_for_was_ignored(
    careful: SubagentClient, worker: None, workspace: Path
) -> None:
    """A decision the task ignored (bound to other arguments) decides nothing: a wait
    that skips decided pauses must not sleep through the pause it leaves open."""
    model = script(bash("echo 1 > one.txt"), {"text": "done"})
    task_id = await careful.spawn_task("careful", "one step", model=model)
    paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    call = paused.pending_approvals[0]
    forged = CallDecision(call_id=call.call_id, arguments_hash="0" * 16, approved=True)
    handle = careful.temporal.get_workflow_handle(task_id)
    await handle.signal("decide", Decisions(pause_id=paused.pause_id or "", decisions=[forged]))

    started = time.monotonic()
    # another process decided every call of the pause, so far as the history tells
    again = await SubagentClient(careful.temporal).check_task(task_id, wait=True, timeout=20)
    assert time.monotonic() - started < 10
    assert again.status == TaskStatus.PAUSED and again.pause_id == paused.pause_id
    events = await _events_until(
        careful, task_id, lambda seen: any(e.kind == "decision_ignored" for e in seen)
    )
    assert [e.summary for e in events if e.kind == "decision_ignored"] == [
        f"pause {paused.pause_id}: call {call.call_id}: its arguments differ"
    ]
    again = await careful.check_task(task_id)
    assert again.status == TaskStatus.PAUSED and again.pause_id == paused.pause_id
    assert not (workspace / "one.txt").exists()
