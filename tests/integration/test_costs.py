"""What tasks cost: each turn priced by the worker, a task's and a tree's sums.

The fake servers report usage as the APIs do (OpenAI's cached and reasoning tokens,
Anthropic's cache reads and writes apart from ``input_tokens``), through the real SDKs;
the worker prices each turn with the prices of docs/models.md's snippet, and the test
prices what the servers reported by hand, exactly.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.cli.inbox import Grant, Inbox, Role
from durable_subagents.config import Settings
from durable_subagents.testing import FakeAnthropicServer, FakeOpenAIServer, free_port
from durable_subagents.wire._payloads import MODEL_TURN_ACTIVITY, ModelTurnResult
from durable_subagents.worker import create_worker

from ..helpers import CEILING, eventually
from ..helpers.cli import arun, ok
from ..helpers.metrics import running_worker, scrape, value
from ..helpers.providers import fake_provider
from ..helpers.tasks import script

DOCS = Path(__file__).parents[2] / "docs" / "models.md"
MILLION = 1_000_000
SCRIPTED = {"input": "2", "cached_input": "0.5", "output": "8"}
"""The scripted model's price in the tree tests (USD per million tokens)."""


def docs_prices(tmp_path: Path) -> Path:
    """docs/models.md's JSON price file, written where a worker's SUBAGENTS_PRICES names it."""
    section = DOCS.read_text().split("\n## Prices\n", 1)[1]
    [snippet] = re.findall(r"^```json\n(.*?)^```", section, re.S | re.M)
    path = tmp_path / "prices.json"
    path.write_text(snippet)
    return path


def billed(usage: dict[str, Any], wire: str) -> Fraction:
    """What one reported usage costs at the docs' prices, as the providers bill it."""
    if wire == "openai":  # gpt-4.1-mini: 0.4 in, 0.1 cached, 1.6 out (reasoning too)
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        total = (
            (usage["prompt_tokens"] - cached) * Fraction("0.4")
            + cached * Fraction("0.1")
            + usage["completion_tokens"] * Fraction("1.6")
        )
    else:  # claude-sonnet-4-6: 3 in, 0.3 read, 3.75 written, 15 out
        total = (
            usage["input_tokens"] * 3
            + usage["cache_read_input_tokens"] * Fraction("0.3")
            + usage["cache_creation_input_tokens"] * Fraction("3.75")
            + usage["output_tokens"] * 15
        )
    return round(total / MILLION, 9)


async def turn_costs(temporal: Client, task_id: str) -> list[float | None]:
    """The cost each model turn recorded in the task's history, in order."""
    scheduled: dict[int, str] = {}
    costs = []
    async for event in temporal.get_workflow_handle(task_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            if scheduled[done.scheduled_event_id] != MODEL_TURN_ACTIVITY:
                continue
            [result] = await temporal.data_converter.decode(
                list(done.result.payloads), [ModelTurnResult]
            )
            costs.append(result.usage.cost_usd)
    return costs


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_each_turn_costs_what_the_server_reported_at_the_prices(
    wire: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for n in range(3):
        (workspace / f"f{n}.txt").write_text(f"part {n}: " + "lorem ipsum dolor sit amet " * 300)
    if wire == "openai":
        server: FakeOpenAIServer | FakeAnthropicServer = FakeOpenAIServer()
        prefix, model = "OPENAI", "openai:gpt-4.1-mini"
    else:
        server = FakeAnthropicServer()
        # priced by the file alone: without SUBAGENTS_PRICES it would cost nothing known
        prefix, model = "ANTHROPIC", "anthropic:claude-sonnet-4-6"
    priced = settings.model_copy(update={"prices": docs_prices(tmp_path)})
    async with fake_provider(monkeypatch, server, prefix) as srv:
        for n in range(3):
            read = {"name": "read_file", "arguments": {"path": f"f{n}.txt"}}
            srv.add_reply(text=f"Reading f{n}.", tool_calls=[read], reasoning_tokens=40 * n)
        srv.add_reply(text="All three read.", reasoning_tokens=25)
        async with create_worker(temporal_client, priced):
            task_id = await client.spawn_task("explore", "Read f0 to f2.", model=model)
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
        reported = list(srv.usages)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert len(reported) == 4 == info.turns
    # the caches were used: the test prices reads (and Anthropic's writes) apart
    assert info.usage.cache_read_tokens > 0
    if wire == "anthropic":
        assert info.usage.cache_write_tokens > 0
    else:
        assert info.usage.reasoning_tokens == 40 + 80 + 25
    per_call = [billed(u, wire) for u in reported]
    assert await turn_costs(temporal_client, task_id) == [float(c) for c in per_call]
    assert info.usage.cost_usd == float(sum(per_call)) > 0
    assert info.tree_cost_usd == info.usage.cost_usd  # no subagents: the task's own
    # every cached token billed at the full rate would cost more: the rates are applied
    full = info.usage.input_tokens * Fraction("0.4" if wire == "openai" else "3") / MILLION
    assert Fraction(info.usage.cost_usd) < full + info.usage.output_tokens * 15 / MILLION
    memo = await (await temporal_client.get_workflow_handle(task_id).describe()).memo()
    assert memo["usage"]["cost_usd"] == info.usage.cost_usd


async def test_a_model_without_a_price_costs_none_and_is_said_once(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = "openai:gpt-4.1-nano"  # no built-in price, and no prefix's (gpt-4.1's)
    async with fake_provider(monkeypatch, FakeOpenAIServer(), "OPENAI") as srv:
        for text in ("one", "two"):
            srv.add_reply(text=text)
        async with create_worker(temporal_client, settings):
            first = await client.spawn_task("explore", "a", model=model)
            done = await client.check_task(first, wait=True, timeout=CEILING)
            second = await client.spawn_task("explore", "b", model=model)
            infos = [done, await client.check_task(second, wait=True, timeout=CEILING)]
            scripted = await client.spawn_task("explore", "c", model=script({"text": "s"}))
            infos.append(await client.check_task(scripted, wait=True, timeout=CEILING))
    assert [i.status for i in infos] == [TaskStatus.COMPLETED] * 3
    assert infos[0].usage.input_tokens > 0
    assert [(i.usage.cost_usd, i.tree_cost_usd) for i in infos] == [(None, None)] * 3
    assert await turn_costs(temporal_client, first) == [None]
    said = [r.getMessage() for r in caplog.records if "has no price" in r.getMessage()]
    assert said == [
        "model openai:gpt-4.1-nano has no price: its usage is counted without a cost "
        "(SUBAGENTS_PRICES can give one; see docs/models.md#prices)"
    ]  # once, and never for a scripted model (it bills nothing)
    # unknown, it is left out of the recorded usage: as histories recorded before prices
    memo = await (await temporal_client.get_workflow_handle(first).describe()).memo()
    assert "cost_usd" not in memo["usage"]


# ---------------------------------------------------------------- trees


def scripted_cost(input_tokens: int, output_tokens: int) -> Fraction:
    return round(
        (input_tokens * Fraction(SCRIPTED["input"]) + output_tokens * Fraction(SCRIPTED["output"]))
        / MILLION,
        9,
    )


@pytest.fixture
def priced_settings(settings: Settings, tmp_path: Path) -> Settings:
    path = tmp_path / "prices.toml"
    path.write_text("[scripted]\n" + "".join(f"{k} = {v}\n" for k, v in SCRIPTED.items()))
    return settings.model_copy(update={"prices": path})


def spawn(agent: str, prompt: str, model: str) -> dict[str, Any]:
    return {
        "name": "spawn_subagent",
        "arguments": {"agent": agent, "prompt": prompt, "model": model},
    }


async def test_a_trees_cost_is_the_sum_of_its_tasks_costs(
    client: SubagentClient,
    temporal_client: Client,
    priced_settings: Settings,
    env: dict[str, str],
) -> None:
    client.agents["lead"] = AgentSpec(name="lead", tools=["read_file"], may_spawn=True)
    children = [
        script({"text": "child 0 done", "usage": {"input_tokens": 700, "output_tokens": 300}}),
        script(
            {"text": "child 1 done", "usage": {"input_tokens": 1_234_567, "output_tokens": 891}}
        ),
    ]
    wait = [{"name": "wait_subagents", "arguments": {}}]
    lead = script(
        {
            "tool_calls": [spawn("explore", f"part {i}", m) for i, m in enumerate(children)],
            "usage": {"input_tokens": 50, "output_tokens": 5},
        },
        {"tool_calls": wait, "usage": {"input_tokens": 60, "output_tokens": 6}},
        {"text": "lead done", "usage": {"input_tokens": 70, "output_tokens": 7}},
    )
    async with create_worker(temporal_client, priced_settings):
        task_id = await client.spawn_task("lead", "split", model=lead)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    own = scripted_cost(50, 5) + scripted_cost(60, 6) + scripted_cost(70, 7)
    theirs = [scripted_cost(700, 300), scripted_cost(1_234_567, 891)]
    assert info.usage.cost_usd == float(own)
    subagents = await client.list_tasks(parent_id=task_id)
    assert sorted(c.usage.cost_usd for c in subagents) == sorted(float(c) for c in theirs)
    assert [c.tree_cost_usd for c in subagents] == [c.usage.cost_usd for c in subagents]
    # the tree's cost is the sum of its tasks' costs, exactly
    assert info.tree_cost_usd == float(own + sum(theirs))
    parts = [info.usage.cost_usd, *(c.usage.cost_usd for c in subagents)]
    assert info.tree_cost_usd == round(sum(p or 0 for p in parts), 9)
    assert info.tree_usage is not None and info.tree_usage.cost_usd == info.tree_cost_usd
    # the model's report of its subagents has no cost in it
    transcript = await client.get_transcript(task_id)
    report = next(m for m in transcript if m.tool_name == "wait_subagents")
    assert "cost" not in report.content

    checked = json.loads(ok(await arun("check", task_id, "--json", env=env)).out)
    assert checked["tree_cost_usd"] == info.tree_cost_usd
    assert checked["usage"]["cost_usd"] == info.usage.cost_usd
    listed = ok(await arun("ls", "--parent", task_id, env=env)).out.splitlines()
    header = listed[0].split()
    costs = sorted(line.split()[header.index("cost")] for line in listed[1:])
    assert costs == ["$0.0038", "$2.48"], listed  # 3,800 and 2,476,262 millionths


async def test_a_running_trees_cost_counts_its_running_subagents(
    client: SubagentClient, temporal_client: Client, priced_settings: Settings
) -> None:
    client.agents["lead-ask"] = AgentSpec(
        name="lead-ask",
        tools=["bash", "read_file"],
        permissions=[PermissionRule(tool="bash", action="ask")],
        may_spawn=True,
    )
    child = script(
        {
            "tool_calls": [{"name": "bash", "arguments": {"command": "echo child"}}],
            "usage": {"input_tokens": 4_000, "output_tokens": 40},
        },
        {"text": "child done", "usage": {"input_tokens": 5_000, "output_tokens": 50}},
    )
    wait = [{"name": "wait_subagents", "arguments": {}}]
    lead = script(
        {"tool_calls": [spawn("general", "run it", child)], "usage": {"input_tokens": 300}},
        {"tool_calls": wait, "usage": {"input_tokens": 400}},
        {"tool_calls": wait, "usage": {"input_tokens": 500}},
        {"text": "lead done", "usage": {"input_tokens": 600}},
    )
    async with create_worker(temporal_client, priced_settings):
        task_id = await client.spawn_task("lead-ask", "delegate", model=lead)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED, paused.error
        child_id = paused.pending_approvals[0].call_id.split("/")[0]
        running = await client.check_task(child_id)
        assert running.status == TaskStatus.PAUSED
        assert running.usage.cost_usd == float(scripted_cost(4_000, 40))

        async def counted() -> bool:
            info = await client.check_task(task_id)
            # the parent's memo knows no running child's usage: check_task adds it
            return info.tree_cost_usd == round(
                (info.usage.cost_usd or 0) + (running.usage.cost_usd or 0), 9
            )

        await eventually(counted, "the running child's cost in its parent's tree")
        # the inbox shows the paused tree, its cost the same
        inbox = Inbox(client, task_queue=priced_settings.task_queue, poll=0)

        async def shown() -> bool:
            [entry] = (await inbox.view(Grant("person", Role.APPROVER))).entries
            tree = await client.check_task(task_id)
            return entry.task.id == task_id and entry.task.tree_cost_usd == tree.tree_cost_usd

        await eventually(shown, "the tree's cost on the inbox")
        await client.approve(task_id)
        done = await client.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
        )
    assert done.status == TaskStatus.COMPLETED, done.error
    child_done = await client.check_task(child_id)
    assert child_done.usage.cost_usd == float(scripted_cost(4_000, 40) + scripted_cost(5_000, 50))
    assert done.tree_cost_usd == round(
        (done.usage.cost_usd or 0) + (child_done.usage.cost_usd or 0), 9
    )
    assert done.usage.cost_usd == float(sum(scripted_cost(n, 0) for n in (300, 400, 500, 600)))


async def test_what_models_cost_is_a_metric_by_model_and_agent(
    client: SubagentClient, priced_settings: Settings
) -> None:
    config = priced_settings.model_copy(update={"metrics_port": free_port()})
    model = script(
        {
            "tool_calls": [{"name": "list_files", "arguments": {}}],
            "usage": {"input_tokens": 120, "output_tokens": 30},
        },
        {"text": "done", "usage": {"input_tokens": 200, "output_tokens": 5}},
    )
    async with running_worker(config) as base:
        before = await scrape(base)
        task_id = await client.spawn_task("explore", "look around", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        after = await scrape(base)
    assert info.status == TaskStatus.COMPLETED, info.error
    cost = scripted_cost(120, 30) + scripted_cost(200, 5)
    assert info.usage.cost_usd == float(cost)

    def delta(name: str) -> float:
        labels = {"model": "scripted", "agent": "explore"}
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("subagents_model_cost_usd_count") == 2
    assert delta("subagents_model_cost_usd_sum") == pytest.approx(float(cost), abs=1e-12)


async def test_a_failed_subagents_cost_counts_in_its_parents_tree(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child that fails after a turn still cost that turn: its parent's tree says so."""
    from durable_subagents.testing import FakeReply

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"openai:gpt-test": {"input": 2, "output": 8}}))
    client.agents["lead"] = AgentSpec(name="lead", tools=["list_files"], may_spawn=True)

    def respond(body: dict[str, Any]) -> FakeReply:
        messages = body["messages"]
        first = next(m for m in messages if m.get("role") == "user")
        child = "the child's part" in json.dumps(first)
        results = sum(m.get("role") == "tool" for m in messages)
        usage = (100_000, 0)
        if child and results == 0:
            listing = {"name": "list_files", "arguments": {"path": "."}}
            return FakeReply(tool_calls=[listing], usage=usage)
        if child:
            return FakeReply(status=400, body={"error": {"message": "bad request"}})
        if results == 0:
            spawn = {"agent": "explore", "prompt": "the child's part"}
            return FakeReply(
                tool_calls=[{"name": "spawn_subagent", "arguments": spawn}], usage=usage
            )
        if results == 1:
            wait = {"name": "wait_subagents", "arguments": {}}
            return FakeReply(tool_calls=[wait], usage=usage)
        return FakeReply(text="lead done", usage=usage)

    priced = settings.model_copy(update={"prices": prices})
    server = FakeOpenAIServer(responder=respond)
    async with fake_provider(monkeypatch, server, "OPENAI", "k"):
        async with create_worker(temporal_client, priced):
            task_id = await client.spawn_task("lead", "split", model="openai:gpt-test")
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    [child] = await client.list_tasks(parent_id=task_id)
    assert child.status == TaskStatus.FAILED and child.usage.cost_usd == pytest.approx(0.2)
    assert info.usage.cost_usd == pytest.approx(0.6)  # three turns of its own
    assert info.tree_cost_usd == pytest.approx(0.8)  # and the failed child's one
