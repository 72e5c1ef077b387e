"""What a task shows in the Temporal Web UI while it runs, pauses and spawns (no browser).

Current details are read as the Web UI reads them (the ``__temporal_workflow_metadata``
query); the Markdown is rendered with markdown-it to check what a person would see.
``test_web_ui_browser.py`` checks the same in the real Web UI.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.wording._markdown import escape
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.markdown import commonmark
from ..helpers.tasks import script

HOSTILE_COMMAND = (
    "wc -l inventory/*.py tests/*.py\n\n"
    "Approve: `subagents approve other-task --all` [docs](http://evil.example) "
    "![x](http://evil.example/x.png) ``` __init__"
)


WAIT = {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]}


def bash(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": c}} for c in commands]}


def spawn(agent: str, prompt: str, model: str, description: str) -> dict[str, Any]:
    arguments = {"agent": agent, "prompt": prompt, "model": model, "description": description}
    return {"tool_calls": [{"name": "spawn_subagent", "arguments": arguments}]}


@pytest.fixture
def careful(client: SubagentClient) -> SubagentClient:
    client.agents["careful"] = AgentSpec(
        name="careful",
        tools=["bash", "read_file"],
        permissions=[PermissionRule(tool="bash", action="ask")],
    )
    client.agents["lead-ask"] = AgentSpec(
        name="lead-ask",
        tools=["bash", "read_file"],
        permissions=[PermissionRule(tool="bash", action="ask")],
        may_spawn=True,
    )
    return client


@pytest.fixture
async def default_model_worker(
    temporal_client: Client, settings: Settings
) -> AsyncIterator[Settings]:
    """A worker whose ``SUBAGENTS_MODEL`` runs ``sleep 30`` and then answers."""
    default = script(bash("sleep 30"), {"text": "slept"})
    with_model = settings.model_copy(update={"model": default})
    async with create_worker(temporal_client, with_model):
        yield with_model


async def current_details(client: SubagentClient, task_id: str) -> str:
    handle = client.temporal.get_workflow_handle(task_id)
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def details_once(client: SubagentClient, task_id: str, wanted: str) -> str:
    """The task's current details once they contain ``wanted`` (fails at ``CEILING``)."""
    deadline = time.monotonic() + CEILING
    details = ""
    while time.monotonic() < deadline:
        details = await current_details(client, task_id)
        if wanted in details:
            return details
        await asyncio.sleep(0.1)
    raise AssertionError(f"{wanted!r} never appeared in the current details:\n{details}")


async def test_a_running_task_says_what_runs_and_names_the_workers_model(
    client: SubagentClient, default_model_worker: Settings
) -> None:
    task_id = await client.spawn_task("general", "sleep a while", description="sleeper")
    details = await details_once(client, task_id, "bash · sleep 30")
    rendered = commonmark(details)
    info = await client.check_task(task_id)
    tokens = f"Tokens in {info.usage.input_tokens:,} · out {info.usage.output_tokens:,}"
    assert rendered.text == f"Running turn 1 of 50 · model 1 tool call running {tokens}"
    assert rendered.codes == ["scripted", "bash · sleep 30"]
    # the memo names the model as soon as it answered, not at the next status change
    assert info.status == TaskStatus.RUNNING and info.model == "scripted"
    await client.cancel_task(task_id, wait=True, timeout=CEILING)
    assert await current_details(client, task_id) == ""


async def test_watch_names_the_model_that_answered_the_first_turn(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    quick = settings.model_copy(update={"model": script({"text": "done"})})
    async with create_worker(temporal_client, quick):
        task_id = await client.spawn_task("explore", "answer at once")
        events = [e async for e in client.watch(task_id)]
    turns = [e for e in events if e.kind == "turn"]
    assert [(e.turn, e.summary) for e in turns] == [(1, "turn 1 · scripted")]
    assert (await client.check_task(task_id)).model == "scripted"


async def test_tool_calls_beyond_the_slots_are_counted_as_waiting(
    client: SubagentClient, worker: None
) -> None:
    model = script(bash(*(f"sleep 30; echo {i}" for i in range(10))), {"text": "done"})
    task_id = await client.spawn_task("general", "ten sleeps", model=model)
    details = await details_once(client, task_id, "8 tool calls running")
    rendered = commonmark(details)
    assert "8 tool calls running 2 waiting for a free slot" in rendered.text
    assert rendered.codes[1:] == [f"bash · sleep 30; echo {i}" for i in range(8)]
    await client.cancel_task(task_id, wait=True, timeout=CEILING)


async def test_a_hostile_pending_call_shows_literally_and_adds_nothing(
    careful: SubagentClient, worker: None
) -> None:
    model = script(bash(HOSTILE_COMMAND), {"text": "done"})
    task_id = await careful.spawn_task(
        "careful", "count the lines of __init__ in *.py", model=model, approval_timeout=600
    )
    paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    call = paused.pending_approvals[0]
    # what check and watch show is the text itself, not Markdown
    assert call.arguments_preview == "bash · " + " ".join(HOSTILE_COMMAND.split())
    rendered = commonmark(await current_details(careful, task_id))
    assert rendered.codes == [
        paused.pause_id,
        call.call_id,
        call.arguments_preview,
        f"subagents approve {task_id} --all --pause {paused.pause_id}",
        f"subagents reject {task_id} --all --pause {paused.pause_id} --reason TEXT",
        "scripted",
    ]
    assert rendered.text == (
        "Waiting for approval of 1 tool call · pause · rejected automatically after 600s "
        "Approve: (or name call ids) · reject: Turn 1 of 50 · model "
        f"Tokens in {paused.usage.input_tokens:,} · out {paused.usage.output_tokens:,}"
    )
    assert "a" not in rendered.tags and "img" not in rendered.tags
    details = await careful.temporal.get_workflow_handle(task_id).describe()
    prompt = commonmark(await details.static_details() or "").codes[-1]
    assert prompt == "count the lines of __init__ in *.py"
    await careful.cancel_task(task_id, wait=True, timeout=CEILING)


async def test_a_spawned_childs_summary_shows_its_description_literally(
    careful: SubagentClient, worker: None
) -> None:
    description = "check __init__ in *.py"
    child_model = script(bash("wc -l inventory/*.py tests/*.py"), {"text": "counted"})
    model = script(spawn("general", "count lines", child_model, description), WAIT, WAIT)
    task_id = await careful.spawn_task("lead-ask", "delegate", model=model)
    paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused
    child = paused.pending_approvals[0].call_id.split("/")[0]
    desc = await careful.temporal.get_workflow_handle(child).describe()
    summary = await desc.static_summary()
    assert summary == escape(description)
    assert commonmark(summary).text == description
    assert (await careful.check_task(child)).description == description
    await careful.cancel_task(task_id, wait=True, timeout=CEILING)


async def test_a_spawned_tasks_summary_shows_its_description_literally(
    client: SubagentClient,
) -> None:
    description = "check __init__ in *.py"
    task_id = await client.spawn_task("explore", "x", description=description, model="scripted")
    desc = await client.temporal.get_workflow_handle(task_id).describe()
    try:
        assert commonmark(await desc.static_summary() or "").text == description
    finally:
        await client.cancel_task(task_id, wait=False)


async def test_the_details_name_the_rules_that_pause_and_the_workspace(
    careful: SubagentClient, worker: None, workspace: Path
) -> None:
    """`general --ask bash`: the details say which rule makes it pause, and where it works."""
    (workspace / "sub").mkdir()
    model = script(bash("wc -l *.py"), {"text": "done"})
    asks = await careful.spawn_task(
        "general", "count", model=model, permissions=[PermissionRule(tool="bash", action="ask")]
    )
    own = await careful.spawn_task(
        "careful",
        "count",
        model=model,
        workspace="sub",
        permissions=[PermissionRule(tool="read_file", pattern="secrets/*", action="deny")],
    )
    details = {}
    for task_id in (asks, own):
        desc = await careful.temporal.get_workflow_handle(task_id).describe()
        details[task_id] = commonmark(await desc.static_details() or "")
        await careful.cancel_task(task_id, wait=False)
    # (the text without its code spans, and the code spans, as markdown-it reads them)
    assert details[asks].text == (
        "Subagent · task Model · max turns 50 Tools read_file, list_files, grep, write_file, "
        "edit_file, bash · mode dont_ask Spawn rules Workspace the worker's root (its ) Prompt"
    )
    assert details[asks].codes == [
        "general", asks, "scripted", "bash: ask", "--workspace", "count"
    ]  # fmt: skip
    assert details[own].text == (
        "Subagent · task Model · max turns 50 Tools bash, read_file · mode default Rules "
        "Spawn rules Workspace (in the worker's root) Prompt"
    )
    assert details[own].codes == [
        "careful", own, "scripted", "bash: ask", "read_file secrets/*: deny", "sub", "count"
    ]  # fmt: skip


async def test_a_pause_is_a_running_timer_named_for_it(
    careful: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """The Web UI's Timeline, its default view, draws a running timer up to now with its
    name: a pause shows there as "Waiting for approval", for as long as it lasts."""
    model = script(bash("wc -l inventory/*.py", "ls"), {"text": "done"})
    task_id = await careful.spawn_task("careful", "count", model=model)
    paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    converter = temporal_client.data_converter.payload_converter

    async def timers() -> list[tuple[str, str]]:
        found = []
        async for e in temporal_client.get_workflow_handle(task_id).fetch_history_events():
            if e.HasField("timer_started_event_attributes"):
                name = converter.from_payload(e.user_metadata.summary, str)
                found.append((name, "started"))
            elif e.HasField("timer_canceled_event_attributes"):
                found.append(("", "cancelled"))
        return found

    assert await timers() == [
        (
            f"Waiting for approval (pause {paused.pause_id}): bash · wc -l inventory/*.py "
            "and 1 more call",
            "started",
        )
    ]
    await careful.approve(task_id)
    done = await careful.check_task(
        task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
    )
    assert done.status == TaskStatus.COMPLETED
    assert [kind for _, kind in await timers()] == ["started", "cancelled"]
