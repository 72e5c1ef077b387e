"""Trees deeper than two: depth limits, the agents a tree may spawn, its task count.

A task that may spawn gets ``max_depth`` levels below it (default 3, at most the
worker's ``SUBAGENTS_MAX_DEPTH``, default 5); every child has one fewer, spawns from the
agents its parent could (any agent its client knew, not only the built-ins), and the top
task counts the tree's tasks (``max_tasks``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from durable_subagents import (
    AgentSpec,
    InvalidRequest,
    PermissionRule,
    SubagentClient,
    TaskStatus,
)
from durable_subagents.cli.inbox._access import Grant, Role
from durable_subagents.cli.inbox._inbox import Inbox
from durable_subagents.config import Settings
from durable_subagents.testing import FakeReply
from durable_subagents.types import Message
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.cli import _env, arun, ok
from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.providers import MODELS, PROVIDERS, model_api
from ..helpers.tasks import script

SLEEP_3911 = unique_sleep(3911)
SLEEP_3912 = unique_sleep(3912)
WAIT = {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]}


def spawn(agent: str, prompt: str, model: str | None = None) -> dict[str, Any]:
    arguments = {"agent": agent, "prompt": prompt}
    if model is not None:
        arguments["model"] = model
    return {"tool_calls": [{"name": "spawn_subagent", "arguments": arguments}]}


@pytest.fixture
def leads(client: SubagentClient) -> SubagentClient:
    """Agents of the client's own (not built-ins) that spawn."""
    client.agents["lead"] = AgentSpec(
        name="lead", description="Splits work", tools=["read_file", "grep"], may_spawn=True
    )
    client.agents["lead-ask"] = AgentSpec(
        name="lead-ask",
        description="Splits work; commands ask",
        tools=["bash", "read_file"],
        permissions=[PermissionRule(tool="bash", action="ask")],
        may_spawn=True,
    )
    client.agents["lead-bash"] = AgentSpec(
        name="lead-bash",
        description="Splits work; runs commands",
        tools=["bash"],
        permission_mode="dont_ask",
        may_spawn=True,
    )
    client.agents["scout"] = AgentSpec(
        name="scout",
        description="Looks around",
        tools=["read_file"],
        may_spawn=True,
        spawnable=["explore"],
    )
    return client


async def chain(client: SubagentClient, root: str) -> list[str]:
    """The tasks of a tree that is one line: the root, its child, its child's child..."""
    ids = [root]
    while children := await client.list_tasks(parent_id=ids[-1]):
        assert len(children) == 1, children
        ids.append(children[0].id)
    return ids


def tool_results(transcript: list[Message]) -> list[Message]:
    return [m for m in transcript if m.role == "tool"]


async def test_a_tree_grows_five_levels_deep_and_no_deeper(
    leads: SubagentClient, worker: None
) -> None:
    # The deepest task tries a sixth level anyway: a tool error, no task.
    model = script(
        spawn("lead", "level 6", script({"text": "level 6 ran"})),
        {"text": "level 5: {last_tool_result}"},
    )
    for level in range(4, -1, -1):
        model = script(spawn("lead", f"level {level + 1}", model), WAIT, {"text": f"L{level}"})
    # Asked for 6: the worker's SUBAGENTS_MAX_DEPTH (5) keeps it at 5.
    root = await leads.spawn_task("lead", "go deep", model=model, max_depth=6)
    info = await leads.check_task(root, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "L0"
    tree = await chain(leads, root)
    assert len(tree) == 6  # the root and five levels below it
    for task_id in tree:
        assert (await leads.check_task(task_id)).status == TaskStatus.COMPLETED
    deepest = await leads.check_task(tree[-1])
    assert "as deep as its spawn allows" in (deepest.result or ""), deepest.result
    [refused] = tool_results(await leads.get_transcript(tree[-1]))
    assert refused.is_error and refused.tool_name == "spawn_subagent"


async def test_a_child_spawns_only_the_agents_its_parent_could(
    leads: SubagentClient, worker: None
) -> None:
    child = script(spawn("general", "edit things"), spawn("explore", "look"), WAIT, {"text": "ok"})
    model = script(spawn("scout", "scout", child), WAIT, {"text": "root done"})
    root = await leads.spawn_task("lead", "delegate", model=model)
    info = await leads.check_task(root, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    tree = await chain(leads, root)
    assert len(tree) == 3
    scout = tool_results(await leads.get_transcript(tree[1]))
    assert scout[0].is_error
    assert "unknown agent 'general'; this task may spawn: explore" in scout[0].content
    assert (await leads.check_task(tree[2])).agent == "explore"


async def test_the_top_task_counts_the_whole_trees_tasks(
    leads: SubagentClient, worker: None
) -> None:
    two = {
        "tool_calls": [
            {"name": "spawn_subagent", "arguments": {"agent": "explore", "prompt": "a"}},
            {"name": "spawn_subagent", "arguments": {"agent": "explore", "prompt": "b"}},
        ]
    }
    child = script(two, WAIT, {"text": "child: {last_tool_result}"})
    model = script(spawn("lead", "split", child), WAIT, {"text": "root done"})
    root = await leads.spawn_task("lead", "delegate", model=model, max_tasks=3)
    info = await leads.check_task(root, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    [middle] = await leads.list_tasks(parent_id=root)
    below = await leads.list_tasks(parent_id=middle.id)
    assert len(below) == 1  # the root, the middle and one: three
    spawned = tool_results(await leads.get_transcript(middle.id))[:2]
    refusals = [m for m in spawned if m.is_error]
    assert len(refusals) == 1
    assert "holds 3 tasks, the most its spawn allows (max_tasks)" in refusals[0].content


@pytest.mark.parametrize("decided_at", ["top", "grandchild"])
async def test_a_pause_two_levels_down_is_seen_at_the_top_and_decided_there_or_below(
    decided_at: str,
    leads: SubagentClient,
    worker: None,
    workspace: Path,
    settings: Settings,
    tmp_path: Path,
) -> None:
    grandchild = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo deep > d.txt"}}]},
        {"text": "wrote it"},
    )
    child = script(spawn("general", "write d.txt", grandchild), WAIT, WAIT, {"text": "child ok"})
    model = script(spawn("lead-ask", "delegate", child), WAIT, WAIT, {"text": "root ok"})
    root = await leads.spawn_task("lead-ask", "delegate", model=model)
    paused = await leads.check_task(root, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused
    tree = await chain(leads, root)
    assert len(tree) == 3
    [pending] = paused.pending_approvals
    # <child>/<its pause>/<grandchild>/<its pause>/<call>: the path down to the call
    assert pending.call_id.startswith(f"{tree[1]}/")
    assert f"/{tree[2]}/" in pending.call_id
    assert pending.arguments_preview.startswith("bash · echo deep")
    assert not (workspace / "d.txt").exists()

    assert list(paused.paused_tasks) == [tree[2]]  # who waits, found from the top
    env = _env(
        tmp_path, TEMPORAL_ADDRESS=settings.address, SUBAGENTS_TASK_QUEUE=settings.task_queue
    )
    shown = ok(await arun("check", root, env=env)).out
    assert f"in subagent {tree[2]} (pause {paused.paused_tasks[tree[2]]})" in shown, shown
    # The approval inbox lists the pause once, under the tree's top task.
    inbox = Inbox(leads, task_queue=settings.task_queue, poll=0)
    [entry] = (await inbox.view(Grant("ops", Role.VIEWER))).entries
    assert entry.task.id == root and [c.call_id for c in entry.calls] == [pending.call_id]
    if decided_at == "top":
        await leads.approve(root)  # routed to the child, and by it to the grandchild
    else:
        await leads.approve(tree[2], pause_id=paused.paused_tasks[tree[2]])
    done = await leads.check_task(root, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED, done
    assert (workspace / "d.txt").read_text() == "deep\n"


async def test_cancelling_the_top_stops_the_commands_of_every_level(
    leads: SubagentClient, temporal_client: Client, worker: None
) -> None:
    sleeper = {"tool_calls": [{"name": "bash", "arguments": {"command": SLEEP_3911}}]}
    model = script(sleeper)
    for _ in range(3):
        model = script(spawn("lead-bash", "go on", model), WAIT)
    root = await leads.spawn_task("lead-bash", "delegate", model=model)
    await wait_for(lambda: bool(processes_matching(SLEEP_3911)), what="the deepest command")
    info = await leads.cancel_task(root, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.CANCELLED
    tree = await chain(leads, root)
    assert len(tree) == 4
    for task_id in tree[1:]:
        desc = await temporal_client.get_workflow_handle(task_id).describe()
        assert desc.status == WorkflowExecutionStatus.CANCELED, task_id
    assert not processes_matching(SLEEP_3911)


async def test_depth_and_tree_size_are_checked_at_the_spawn(leads: SubagentClient) -> None:
    with pytest.raises(InvalidRequest, match="max_depth must be an integer from 0 to 10"):
        await leads.spawn_task("lead", "x", max_depth=11)
    with pytest.raises(InvalidRequest, match="max_tasks must be an integer from 1 to 1000"):
        await leads.spawn_task("lead", "x", max_tasks=0)
    with pytest.raises(InvalidRequest, match="spawns no subagents"):
        await leads.spawn_task("explore", "x", max_depth=2)


async def test_a_worker_killed_four_levels_down_loses_nothing(
    leads: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    sleeper = {"tool_calls": [{"name": "bash", "arguments": {"command": SLEEP_3912}}]}
    model = script(sleeper, {"text": "deepest: {last_tool_result}"})
    for level in range(3, -1, -1):
        model = script(spawn("lead-bash", f"level {level + 1}", model), WAIT, {"text": f"L{level}"})
    worker_log = tmp_path / "worker.log"
    log = worker_log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_subagents", "worker", "--address", settings.address,
         "--task-queue", settings.task_queue, "--workspace", str(workspace)],
        env={**os.environ, "SUBAGENTS_BLOB_DIR": str(settings.resolved_blob_dir)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        root = await leads.spawn_task("lead-bash", "go deep", model=model, max_depth=4)
        try:
            await wait_for(lambda: bool(processes_matching(SLEEP_3912)), what="the deepest command")
        except AssertionError as err:
            state = await leads.check_task(root)
            raise AssertionError(
                f"{err}; {state!r}; the worker said:\n{worker_log.read_text()}"
            ) from None
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        await wait_for(lambda: not processes_matching(SLEEP_3912), what="the command to die")
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    async with create_worker(temporal_client, settings):
        info = await leads.check_task(root, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "L0"
    tree = await chain(leads, root)  # one child a level: no spawn ran twice
    assert len(tree) == 5
    deepest = await leads.check_task(tree[-1])
    assert deepest.status == TaskStatus.COMPLETED
    # The cut-off command is reported to its model, not run again unseen.
    assert "interrupted" in (deepest.result or ""), deepest.result


def three_levels(body: dict[str, Any]) -> FakeReply:
    """A model three levels deep: each task spawns the next until level 3, then waits.

    Which task asks is the ``level N`` its first message names; what it asks for is
    how many results its conversation holds (OpenAI's ``tool`` messages, Anthropic's
    ``tool_result`` blocks).
    """
    messages = body.get("messages") or []
    level = int(re.search(r"level (\d)", json.dumps(messages[0]))[1])  # type: ignore[index]
    results = sum(
        m.get("role") == "tool"
        or (isinstance(m.get("content"), list)
            and any(b.get("type") == "tool_result" for b in m["content"]))
        for m in messages
    )  # fmt: skip
    if level == 3:
        return FakeReply(text="leaf done")
    if results == 0:
        spawn = {"agent": "lead", "prompt": f"level {level + 1}"}
        return FakeReply(tool_calls=[{"name": "spawn_subagent", "arguments": spawn}])
    if results == 1:
        return FakeReply(tool_calls=[{"name": "wait_subagents", "arguments": {}}])
    return FakeReply(text=f"L{level} done")


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_a_tree_three_levels_deep_through_each_wire(
    kind: str,
    leads: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with model_api(monkeypatch, kind, responder=three_levels):
        async with create_worker(temporal_client, settings):
            root = await leads.spawn_task("lead", "level 0", model=MODELS[kind])
            info = await leads.check_task(root, wait=True, timeout=CEILING)
            assert info.status == TaskStatus.COMPLETED, info.error
            tree = await chain(leads, root)
    assert info.result == "L0 done"
    assert len(tree) == 4
    assert (await leads.check_task(tree[-1])).result == "leaf done"


async def test_an_approval_timeout_two_levels_down_rejects_as_at_the_top(
    leads: SubagentClient, worker: None, workspace: Path
) -> None:
    grandchild = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo late > t.txt"}}]},
        {"text": "grandchild: {last_tool_result}"},
    )
    child = script(
        spawn("general", "write", grandchild), WAIT, WAIT, {"text": "{last_tool_result}"}
    )
    model = script(spawn("lead-ask", "delegate", child), WAIT, WAIT, {"text": "{last_tool_result}"})
    # The spawn's approval timeout flows down with every other limit.
    root = await leads.spawn_task("lead-ask", "delegate", model=model, approval_timeout=1)
    info = await leads.check_task(root, wait=True, timeout=CEILING)
    while info.status == TaskStatus.PAUSED:  # the pause surfaces before it times out
        info = await leads.check_task(root, wait=True, timeout=CEILING, after_pause=info.pause_id)
    assert info.status == TaskStatus.COMPLETED, info
    tree = await chain(leads, root)
    [result] = tool_results(await leads.get_transcript(tree[2]))
    assert result.is_error and "approval timed out after 1s" in result.content, result.content
    assert not (workspace / "t.txt").exists()


def lead_then_text(text: str) -> Any:
    """A lead that spawns ``claude-helper``, waits, and answers with what it read."""

    def reply(body: dict[str, Any]) -> FakeReply:
        results = [m for m in body.get("messages") or [] if m.get("role") == "tool"]
        if not results:
            spawn = {"agent": "claude-helper", "prompt": "answer"}
            return FakeReply(tool_calls=[{"name": "spawn_subagent", "arguments": spawn}])
        if len(results) == 1:
            return FakeReply(tool_calls=[{"name": "wait_subagents", "arguments": {}}])
        return FakeReply(text=f"{text}: {results[-1]['content']}")

    return reply


@pytest.mark.parametrize("allowed", [True, False])
async def test_a_child_runs_on_its_agents_own_model_of_another_provider(
    allowed: bool,
    leads: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    leads.agents["claude-helper"] = AgentSpec(
        name="claude-helper", description="Answers", model=MODELS["anthropic"], tools=[]
    )
    # The worker allows what its SUBAGENTS_MODELS says: here both, or OpenAI's alone.
    models = "openai:*,anthropic:*" if allowed else "openai:*"
    worker_settings = settings.model_copy(update={"model": MODELS["openai"], "models": models})
    async with model_api(monkeypatch, "openai", responder=lead_then_text("lead read")):
        async with model_api(
            monkeypatch, "anthropic", responder=lambda _: FakeReply(text="from claude")
        ) as claude:
            async with create_worker(temporal_client, worker_settings):
                root = await leads.spawn_task("lead", "delegate", model=MODELS["openai"])
                info = await leads.check_task(root, wait=True, timeout=CEILING)
            answered = len(claude.outcomes)
    assert info.status == TaskStatus.COMPLETED, info.error
    [child] = await leads.list_tasks(parent_id=root)
    child_info = await leads.check_task(child.id)
    if allowed:
        assert child_info.status == TaskStatus.COMPLETED, child_info.error
        assert child_info.result == "from claude" and child_info.model == MODELS["anthropic"]
        assert "from claude" in (info.result or "") and answered == 1
    else:
        assert child_info.status == TaskStatus.FAILED
        assert "SUBAGENTS_MODELS" in (child_info.error or ""), child_info.error
        assert answered == 0  # never called: the worker does not pay for it
        assert "failed" in (info.result or "")
