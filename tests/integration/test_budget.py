"""A tree's spend ledger in money: ``spawn_task(budget_usd=...)``.

The top task counts what its tree spends (each task's turns, priced by the worker);
when the tree has spent its budget no task of it starts another model turn, and the
top task pauses on ``raise_budget`` until a person raises the budget or rejects it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError

from durable_subagents import AgentSpec, SubagentClient, SubagentTools, TaskStatus
from durable_subagents.cli.inbox._access import Grant, Role
from durable_subagents.cli.inbox._inbox import CallRef, DecisionRequest, Inbox
from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest, WrongTaskState
from durable_subagents.wire._ledger import SPEND_UPDATE, SpendReport, TreeBudget
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.cli import arun, failed, ok
from ..helpers.tasks import model_turn_started, script

PRICES = "[scripted]\ninput = 2\noutput = 8\n"
"""USD per million tokens: 100,000 input tokens cost $0.20."""


def turn(dollars: float, **reply: Any) -> dict[str, Any]:
    """A scripted turn whose usage costs ``dollars`` (input tokens at $2 per million)."""
    return {**reply, "usage": {"input_tokens": round(dollars * 500_000), "output_tokens": 0}}


def spawn(agent: str, prompt: str, model: str) -> dict[str, Any]:
    arguments = {"agent": agent, "prompt": prompt, "model": model}
    return {"name": "spawn_subagent", "arguments": arguments}


WAIT = [{"name": "wait_subagents", "arguments": {}}]
LIST = [{"name": "list_files", "arguments": {"path": "."}}]


async def first_budget_event(client: SubagentClient, task_id: str) -> str:
    async for event in client.watch(task_id):
        if event.kind == "budget":
            assert event.summary is not None
            return event.summary
    raise AssertionError(f"{task_id} closed without a budget event")


@pytest.fixture
def priced(settings: Settings, tmp_path: Path) -> Settings:
    path = tmp_path / "prices.toml"
    path.write_text(PRICES)
    return settings.model_copy(update={"prices": path})


@pytest.fixture
def lead(client: SubagentClient) -> SubagentClient:
    client.agents["lead"] = AgentSpec(name="lead", tools=["list_files"], may_spawn=True)
    return client


def tree(child_turns: int = 3) -> tuple[str, str]:
    """A lead ($0.20 a turn) that spawns one explore child ($0.40 a turn) and waits."""
    child = script(
        *(turn(0.40, tool_calls=LIST) for _ in range(child_turns - 1)),
        turn(0.40, text="child done"),
    )
    lead = script(
        turn(0.20, tool_calls=[spawn("explore", "look", child)]),
        turn(0.20, tool_calls=WAIT),
        turn(0.20, tool_calls=WAIT),
        turn(0.20, text="lead done"),
    )
    return lead, child


async def test_a_tree_that_spends_its_budget_pauses_is_raised_and_completes(
    lead: SubagentClient, temporal_client: Client, priced: Settings
) -> None:
    client = lead
    model, _ = tree()
    async with create_worker(temporal_client, priced):
        task_id = await client.spawn_task("lead", "split", model=model, budget_usd=1.0)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED, paused.error
        [ask] = paused.pending_approvals
        assert ask.tool_name == "raise_budget"
        # the child was held after its second turn, which spent the budget
        [child_id] = [t for t in paused.spend_by_task if t != task_id]
        assert paused.spend_by_task[child_id] == pytest.approx(0.80)
        assert paused.budget_usd == 1.0
        assert paused.spent_usd is not None and paused.spent_usd >= 1.0
        assert paused.spent_usd == pytest.approx(sum(paused.spend_by_task.values()))
        assert (await client.check_task(child_id)).status == TaskStatus.RUNNING
        # watch says so: the top task spent its budget, the child waits
        said = await first_budget_event(client, task_id)
        assert said.startswith("spent 1.") and said.endswith(" of 1.0 USD"), said
        said = await first_budget_event(client, child_id)
        assert said == "the tree's budget is spent: waiting until it is raised"
        # a budget that does not pass what was spent is refused, and decides nothing
        with pytest.raises(InvalidRequest, match="does not pass what the tree has spent"):
            await client.raise_budget(task_id, 0.5)
        await client.raise_budget(task_id, 3.0, pause_id=paused.pause_id)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.stop_reason == "end_turn" and info.result == "lead done"
    assert info.budget_usd == 3.0
    # four lead turns and three child turns: every turn counted once
    assert info.spent_usd == pytest.approx(2.0)
    assert info.spend_by_task == {task_id: pytest.approx(0.8), child_id: pytest.approx(1.2)}
    assert info.tree_cost_usd == pytest.approx(info.spent_usd)


async def test_a_rejected_raise_stops_the_tree(
    lead: SubagentClient, temporal_client: Client, priced: Settings
) -> None:
    client = lead
    model, _ = tree()
    async with create_worker(temporal_client, priced):
        task_id = await client.spawn_task("lead", "split", model=model, budget_usd=1.0)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert [p.tool_name for p in paused.pending_approvals] == ["raise_budget"]
        [child_id] = [t for t in paused.spend_by_task if t != task_id]
        await client.reject(task_id, reason="too dear")
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        child = await client.check_task(child_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED and info.stop_reason == "budget"
    assert child.status == TaskStatus.CANCELLED and child.turns == 2


async def test_a_spawn_the_budget_cannot_cover_is_a_tool_error_the_model_reads(
    lead: SubagentClient, temporal_client: Client, priced: Settings
) -> None:
    client = lead
    child = script(turn(0.05, text="child done"))
    model = script(
        turn(0.40, tool_calls=[spawn("explore", "one", child)]),
        turn(0.40, tool_calls=WAIT),
        # $0.85 spent of $1.00 over four turns, the lead's counted: a turn costs $0.2125
        # on average, more than is left (the child's own turn alone would fit)
        turn(0.0, tool_calls=[spawn("explore", "two", child)]),
        turn(0.0, text="lead done"),
    )
    async with create_worker(temporal_client, priced):
        task_id = await client.spawn_task("lead", "split", model=model, budget_usd=1.0)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert len(info.spend_by_task) == 2  # the second child never started
    results = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    refused = results[-1]
    assert refused.is_error
    assert "has spent $0.85 of its $1.00 budget" in refused.content, refused.content
    assert "needs about $0.2125 for a turn" in refused.content, refused.content


async def test_budget_errors_are_typed(
    lead: SubagentClient, temporal_client: Client, priced: Settings
) -> None:
    client = lead
    for bad in (0, -1, float("nan"), float("inf"), 2_000_000, "5", True):
        with pytest.raises(InvalidRequest, match="budget_usd must be a number of US dollars"):
            await client.spawn_task("lead", "x", model=script({"text": "x"}), budget_usd=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="budget_warn_at needs budget_usd"):
        await client.spawn_task("lead", "x", model=script({"text": "x"}), budget_warn_at=0.5)
    with pytest.raises(InvalidRequest, match="budget_warn_at must be a share"):
        await client.spawn_task(
            "lead", "x", model=script({"text": "x"}), budget_usd=1, budget_warn_at=1.5
        )
    async with create_worker(temporal_client, priced):
        task_id = await client.spawn_task("lead", "x", model=script({"text": "x"}))
        await client.check_task(task_id, wait=True, timeout=CEILING)
    with pytest.raises(WrongTaskState):
        await client.raise_budget(task_id, 5.0)


async def test_people_raise_a_budget_where_they_look_and_the_model_cannot(
    lead: SubagentClient,
    temporal_client: Client,
    priced: Settings,
    env: dict[str, str],
) -> None:
    client = lead
    model, _ = tree()
    async with create_worker(temporal_client, priced):
        task_id = await client.spawn_task("lead", "split", model=model, budget_usd=1.0)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        [ask] = paused.pending_approvals
        assert ask.tool_name == "raise_budget"
        # the orchestrating model reads the pause, and may not raise what limits it
        tools = SubagentTools(client, default_wait=0)
        view = json.loads(await tools.call("check_subagent", {"task_id": task_id}))
        assert view["budget_usd"] == 1.0 and view["spent_usd"] >= 1.0
        for arguments in ({"task_id": task_id}, {"task_id": task_id, "call_ids": [ask.call_id]}):
            refused = json.loads(await tools.call("approve_tool_calls", arguments))
            assert "a person raises a task tree's budget" in refused["error"], refused
        assert (await client.check_task(task_id)).pause_id == paused.pause_id
        # the inbox lists the pause, and raises the budget to 1.5
        inbox = Inbox(client, task_queue=priced.task_queue, poll=0)
        grant = Grant("ops", Role.APPROVER)
        [entry] = (await inbox.view(grant)).entries
        assert entry.task.id == task_id and [c.tool_name for c in entry.calls] == ["raise_budget"]
        assert paused.pause_id is not None
        request = DecisionRequest(
            pause_id=paused.pause_id,
            calls=[
                CallRef(
                    call_id=ask.call_id, tool_name=ask.tool_name, arguments_hash=ask.arguments_hash
                )
            ],
            budget_usd=1.5,
        )
        await inbox.decide(grant, task_id, request, approved=True)
        # $1.50 is spent again before the tree is done: the CLI raises it to $3
        again = await client.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
        )
        assert again.status == TaskStatus.PAUSED and again.budget_usd == 1.5, again
        assert again.spent_usd is not None and again.spent_usd >= 1.5
        shown = ok(await arun("check", task_id, env=env)).out
        assert "budget $1.50 · spent $1." in shown and "this task $0." in shown, shown
        raised = ok(await arun("budget", task_id, "--usd", "3", env=env)).out
        assert f"raised the budget of {task_id}'s tree to 3 USD" in raised, raised
        info = await client.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=again.pause_id
        )
        shown = ok(await arun("check", task_id, env=env)).out
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.budget_usd == 3.0 and info.spent_usd == pytest.approx(2.0)
    assert "budget $3.00 · spent $2.00" in shown, shown
    checked = json.loads(ok(await arun("check", task_id, "--json", env=env)).out)
    assert checked["spent_usd"] == pytest.approx(2.0) and len(checked["spend_by_task"]) == 2
    # the CLI's own mistakes are one line each
    bad = await arun("budget", task_id, "--usd", "0", env=env)
    assert bad.code == 2 and "budget_usd must be a number of US dollars" in bad.err
    bad = failed(await arun("budget", task_id, "--usd", "5", env=env))
    assert "is completed, not paused; there is nothing to decide" in bad.err, bad.err
    bad = await arun("spawn", "general", "x", "--budget-usd", "nan", env=env)
    assert bad.code == 2 and "budget_usd must be a number" in bad.err, bad.err
    assert "Traceback" not in bad.err


async def test_a_report_sent_again_counts_once_and_a_strangers_is_refused(
    lead: SubagentClient, temporal_client: Client, priced: Settings
) -> None:
    """What a worker's death between a child's turn and its report leads to: the report's
    local activity runs again and sends the same total; the top task counts it once."""
    client = lead
    model, _ = tree()
    async with create_worker(temporal_client, priced):
        task_id = await client.spawn_task("lead", "split", model=model, budget_usd=1.0)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        [child_id] = [t for t in paused.spend_by_task if t != task_id]
        handle = temporal_client.get_workflow_handle(task_id)
        events_before = len([e async for e in handle.fetch_history_events()])
        for again in (SpendReport(task_id=child_id, cost_usd=0.8, turns=2),
                      SpendReport(task_id=child_id, cost_usd=0.4, turns=1)):  # fmt: skip
            word = await handle.execute_update(SPEND_UPDATE, again, result_type=TreeBudget)
            assert word.held  # the tree holds until its budget is raised
        # a stranger's report, or one that is no sum of money, is refused before the history
        for forged in (SpendReport(task_id="subagent-x-0123456789ab", cost_usd=50.0),
                       SpendReport(task_id=child_id, cost_usd=-5.0),
                       SpendReport(task_id=child_id, cost_usd=float("inf"))):  # fmt: skip
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update(SPEND_UPDATE, forged, result_type=TreeBudget)
        now = await client.check_task(task_id)
        assert now.spend_by_task == paused.spend_by_task
        assert now.spent_usd == paused.spent_usd
        history = [e async for e in handle.fetch_history_events()][events_before:]
        # the two accepted updates are in the history, the three refused ones are not
        accepted = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        assert sum(e.event_type == accepted for e in history) == 2, history
        await client.raise_budget(task_id, 3.0)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.spend_by_task == {task_id: pytest.approx(0.8), child_id: pytest.approx(1.2)}


async def test_a_worker_killed_mid_turn_loses_and_doubles_no_spend(
    lead: SubagentClient,
    temporal_client: Client,
    priced: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    client = lead
    child = script(
        turn(0.40, tool_calls=LIST),
        turn(0.40, tool_calls=LIST, delay=3),  # the worker dies while it runs
        turn(0.40, text="child done"),
    )
    model = script(
        turn(0.20, tool_calls=[spawn("explore", "look", child)]),
        turn(0.20, tool_calls=WAIT),
        turn(0.20, tool_calls=WAIT),
        turn(0.20, text="lead done"),
    )
    worker_log = tmp_path / "worker.log"
    log = worker_log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_subagents", "worker", "--address", priced.address,
         "--task-queue", priced.task_queue, "--workspace", str(workspace)],
        env={**os.environ, "SUBAGENTS_BLOB_DIR": str(priced.resolved_blob_dir),
             "SUBAGENTS_PRICES": str(priced.prices)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        task_id = await client.spawn_task("lead", "split", model=model, budget_usd=1.0)
        child_id = ""

        async def second_turn_runs() -> bool:
            nonlocal child_id
            spent = (await client.check_task(task_id)).spend_by_task
            child_id = next((t for t in spent if t != task_id), "")
            return bool(child_id) and await model_turn_started(temporal_client, child_id)

        deadline = asyncio.get_running_loop().time() + CEILING
        while not await second_turn_runs():
            assert asyncio.get_running_loop().time() < deadline, worker_log.read_text()
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    async with create_worker(temporal_client, priced):
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert [p.tool_name for p in paused.pending_approvals] == ["raise_budget"], paused
        await client.raise_budget(task_id, 3.0)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    child_info = await client.check_task(child_id)
    # each task's ledger entry is what its own turns cost, exactly: none lost, none twice
    assert info.spend_by_task == {
        task_id: info.usage.cost_usd,
        child_id: child_info.usage.cost_usd,
    }
    assert child_info.usage.cost_usd == pytest.approx(1.2)
    assert info.spent_usd == pytest.approx(2.0) == info.tree_cost_usd


async def test_a_task_busy_when_the_budget_runs_out_starts_no_turn_until_it_is_raised(
    lead: SubagentClient, temporal_client: Client, priced: Settings, workspace: Path
) -> None:
    """The tree holds every task, not only the one whose turn spent the budget: a task in
    a long command when another spends the rest hears it before its next turn."""
    client = lead
    client.agents["lead"] = AgentSpec(
        name="lead", tools=["bash", "list_files"], may_spawn=True, permission_mode="dont_ask"
    )
    client.agents["runner"] = AgentSpec(name="runner", tools=["bash"], permission_mode="dont_ask")
    marker = workspace / "spent.marker"
    # the busy child's command ends once the spender's turn has spent the budget
    command = f"while [ ! -e {marker.name} ]; do sleep 0.05; done; echo free"
    busy = script(
        turn(0.1, tool_calls=[{"name": "bash", "arguments": {"command": command}}]),
        turn(0.1, text="busy done"),
    )
    spender = script(turn(0.9, tool_calls=LIST), turn(0.1, text="spender done"))
    model = script(
        turn(0.0, tool_calls=[spawn("runner", "wait for the marker", busy)]),
        turn(0.0, tool_calls=[spawn("explore", "spend", spender)]),
        turn(0.0, tool_calls=WAIT),
        turn(0.0, tool_calls=WAIT),
        turn(0.0, text="lead done"),
    )
    async with create_worker(temporal_client, priced.model_copy(update={"tool_sandbox": "none"})):
        task_id = await client.spawn_task("lead", "split", model=model, budget_usd=1.0)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert [p.tool_name for p in paused.pending_approvals] == ["raise_budget"], paused
        ids = list(paused.spend_by_task)
        busy_id = next(t for t in ids if t.startswith("subagent-runner-"))
        marker.write_text("")  # the command ends now; the busy child must not go on
        said = await first_budget_event(client, busy_id)
        assert said == "the tree's budget is spent: waiting until it is raised"
        held = await client.check_task(task_id)
        assert held.spend_by_task[busy_id] == pytest.approx(0.1)  # its first turn only
        await client.raise_budget(task_id, 2.0)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.spend_by_task[busy_id] == pytest.approx(0.2)
    busy_info = await client.check_task(busy_id)
    assert busy_info.result == "busy done"


async def test_a_model_without_a_price_cannot_run_in_a_budgeted_tree(
    lead: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    client = lead
    async with create_worker(temporal_client, settings):  # no price for scripted models
        task_id = await client.spawn_task(
            "lead", "x", model=script(turn(0.2, text="x")), budget_usd=1.0
        )
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.FAILED
    assert info.error is not None and "has no price" in info.error
    assert "SUBAGENTS_PRICES" in info.error


async def test_a_spawn_below_the_top_is_refused_by_the_tops_ledger(
    lead: SubagentClient, temporal_client: Client, priced: Settings
) -> None:
    """A task below the top asks the top task before it starts a child: the top's
    ledger refuses a spawn its budget cannot cover, and the model reads why."""
    client = lead
    grandchild = script(turn(0.1, text="never"))
    child = script(
        turn(0.8, tool_calls=LIST),
        turn(0.0, tool_calls=[spawn("explore", "deeper", grandchild)]),
        turn(0.0, text="child done"),
    )
    model = script(
        turn(0.0, tool_calls=[spawn("lead", "split again", child)]),
        turn(0.0, tool_calls=WAIT),
        turn(0.0, text="lead done"),
    )
    async with create_worker(temporal_client, priced):
        task_id = await client.spawn_task("lead", "split", model=model, budget_usd=1.0)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    [child_id] = [t for t in info.spend_by_task if t != task_id]
    assert await client.list_tasks(parent_id=child_id) == []  # no grandchild started
    results = [m for m in await client.get_transcript(child_id) if m.role == "tool"]
    assert results[-1].is_error
    assert "has spent $0.8 of its $1.00 budget" in results[-1].content, results[-1].content
