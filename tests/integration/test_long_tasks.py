"""Long tasks and the model: context windows, compaction and prompt caching, end to end.

A real worker on the real Temporal server, the real ``openai`` and ``anthropic`` SDKs
against the fake servers, which answer as the APIs do: a context window refused with
each API's own error body, and prompt caching by each API's rules. The model is a
responder that reads what it is sent: it notes the fact of each file it reads, and its
final answer lists the notes it can still see, so a compaction that lost one shows.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.opentelemetry import create_tracer_provider

from bench.bench_faults import WorkerProcess
from durable_subagents import (
    AgentSpec,
    InvalidRequest,
    SubagentClient,
    TaskStatus,
    connect_client,
)
from durable_subagents.agents import load_agent_file
from durable_subagents.config import Settings
from durable_subagents.context._context import SUMMARY_PROMPT
from durable_subagents.telemetry._telemetry import COMPACTION_SPAN, MODEL_TURN_SPAN
from durable_subagents.testing import DevServer, FakeAnthropicServer, FakeOpenAIServer, FakeReply
from durable_subagents.types import Usage
from durable_subagents.wire._payloads import COMPACT_ACTIVITY, MODEL_TURN_ACTIVITY, model_queue
from durable_subagents.worker import create_worker

from ..helpers.processes import worker_process
from ..helpers.providers import fake_provider
from ..helpers.tasks import TEST_MODELS, script

FILES = 30
FILE_BYTES = 16 * 1024
WINDOW = 32_000
ANALYSIS = " ".join(f"observation{n}" for n in range(120))
"""What the model writes besides its note each turn (about 1.6 KB): turns add up, so
notes alone are not enough and older turns get summarized."""
_NOTE = re.compile(r"NOTE: (FACT-\d\d = \w+)")
_FACT = re.compile(r"(FACT-(\d\d) = \w+)")


def write_files(workspace: Path, count: int = FILES) -> dict[int, str]:
    """``count`` files of about 16 KB, each with one fact in its middle."""
    facts = {}
    for i in range(count):
        value = "v" + hashlib.sha256(str(i).encode()).hexdigest()[:10]
        facts[i] = f"FACT-{i:02d} = {value}"
        lines = [f"file {i:02d} line {n:03d}: " + "lorem ipsum dolor " * 3 for n in range(220)]
        lines[110] = f"The fact of this file: {facts[i]}"
        text = "\n".join(lines) + "\n"
        assert len(text) >= FILE_BYTES - 1024
        (workspace / f"f{i:02d}.txt").write_text(text)
    return facts


def openai_wire(body: dict[str, Any]) -> tuple[bool, str]:
    """Whether a Chat Completions request is a summary call, and its last tool result."""
    messages = body["messages"]
    summary = not body.get("tools") and any(
        m["role"] == "system" and SUMMARY_PROMPT in m["content"] for m in messages
    )
    results = [m["content"] for m in messages if m["role"] == "tool"]
    return summary, results[-1] if results else ""


def anthropic_wire(body: dict[str, Any]) -> tuple[bool, str]:
    """The same for a Messages request."""
    system = json.dumps(body.get("system") or "")
    summary = not body.get("tools") and json.dumps(SUMMARY_PROMPT)[1:-1] in system
    results = [
        block["content"]
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "tool_result"
    ]
    return summary, results[-1] if results else ""


def reading_model(
    wire: Callable[[dict[str, Any]], tuple[bool, str]], files: int = FILES
) -> Callable[[dict[str, Any]], FakeReply]:
    """A model that reads f00..f<files-1>, noting each file's fact, then lists its notes.

    Its summaries keep every note they are given; its final answer is every note it
    can see in what it is sent (its own turns, or a summary of them).
    """

    def respond(body: dict[str, Any]) -> FakeReply:
        summary, last = wire(body)
        notes = sorted(set(_NOTE.findall(json.dumps(body))))
        if summary:
            return FakeReply(text="The agent noted:\n" + "\n".join(f"NOTE: {n}" for n in notes))
        found = _FACT.search(last)
        if found is None:
            return FakeReply(tool_calls=[read("f00.txt")])
        i = int(found.group(2))
        if i == files - 1:
            seen = sorted({*notes, found.group(1)})
            return FakeReply(text="All the facts:\n" + "\n".join(seen))
        return FakeReply(
            text=f"NOTE: {found.group(1)}. {ANALYSIS}", tool_calls=[read(f"f{i + 1:02d}.txt")]
        )

    return respond


def read(path: str) -> dict[str, Any]:
    return {"name": "read_file", "arguments": {"path": path}}


def reported(usages: list[dict[str, Any]], anthropic: bool) -> Usage:
    """What a server reported in ``usages``, summed as ``Usage`` counts it."""
    total = Usage()
    for u in usages:
        if anthropic:
            read, write = u["cache_read_input_tokens"], u["cache_creation_input_tokens"]
            total += Usage(
                input_tokens=u["input_tokens"] + read + write,
                output_tokens=u["output_tokens"],
                cache_read_tokens=read,
                cache_write_tokens=write,
            )
        else:
            total += Usage(
                input_tokens=u["prompt_tokens"],
                output_tokens=u["completion_tokens"],
                cache_read_tokens=u["prompt_tokens_details"]["cached_tokens"],
            )
    return total


async def model_call_queues(temporal_client: Client, task_id: str) -> dict[str, list[str]]:
    """The task queue each model turn and compaction was scheduled on, in order."""
    queues: dict[str, list[str]] = {MODEL_TURN_ACTIVITY: [], COMPACT_ACTIVITY: []}
    handle = temporal_client.get_workflow_handle(task_id)
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name in queues:
                queues[attrs.activity_type.name].append(attrs.task_queue.name)
    return queues


WIRES = {
    "openai": (FakeOpenAIServer, "OPENAI", "openai:fake-32k", openai_wire),
    "anthropic": (FakeAnthropicServer, "ANTHROPIC", "anthropic:claude-fake-32k", anthropic_wire),
}


@pytest.mark.parametrize("wire", list(WIRES))
async def test_a_30_file_read_outlives_a_32k_window(
    wire: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_class, prefix, model, parse = WIRES[wire]
    facts = write_files(workspace)
    server = server_class(context_window=WINDOW, responder=reading_model(parse))
    # OpenAI's turns and compactions go through a rate-limited queue of their own (a
    # rate no run reaches); Anthropic's stay on the task queue
    limits = "openai=1000" if wire == "openai" else ""
    worker_settings = settings.model_copy(update={"model_rate_limits": limits})
    async with fake_provider(monkeypatch, server, prefix) as srv:
        async with create_worker(temporal_client, worker_settings):
            task_id = await client.spawn_task(
                "explore",
                "Read f00.txt to f29.txt; note each file's fact.",
                model=model,
                max_turns=40,
            )
            events = []

            async def watch() -> None:
                async for event in client.watch(task_id):
                    events.append(event)

            watching = asyncio.create_task(watch())
            info = await client.check_task(task_id, wait=True, timeout=170)
            await asyncio.wait_for(watching, 30)
    assert info.status == TaskStatus.COMPLETED, info.error
    queues = await model_call_queues(temporal_client, task_id)
    expected = model_queue(settings.task_queue, "openai") if limits else settings.task_queue
    assert set(queues[COMPACT_ACTIVITY]) == {expected}, queues
    assert set(queues[MODEL_TURN_ACTIVITY][1:]) == {expected}, queues
    # every fact the model noted along the way is in its answer
    assert info.result is not None
    assert sorted(_FACT.findall(info.result)) == sorted(
        (fact, f"{i:02d}") for i, fact in facts.items()
    )
    # it did not fit: the provider refused once (its real error), then the worker kept it
    # under the window it learned, with notes and summaries
    assert srv.outcomes.count("400") == 1, srv.outcomes
    answered = [
        b for b, outcome in zip(srv.requests, srv.outcomes, strict=True) if outcome == "200"
    ]
    assert max(srv.prompt_tokens(body) for body in answered) <= WINDOW
    summaries = [b for b in srv.requests if parse(b)[0]]
    assert summaries, "older turns were never summarized"
    assert info.compactions >= 3
    compactions = [e for e in events if e.kind == "compaction"]
    assert len(compactions) == info.compactions, [e.summary for e in compactions]
    assert all(e.summary and "tokens" in e.summary for e in compactions)
    # the record is whole: every file in full, and the compaction points marked
    transcript = await client.get_transcript(task_id)
    results = [m.content for m in transcript if m.role == "tool"]
    assert len(results) == FILES
    for i in range(FILES):
        lines = (workspace / f"f{i:02d}.txt").read_text().splitlines()
        assert all(line in results[i] for line in lines), f"f{i:02d}.txt is not whole"
    points = [m for m in transcript if m.compaction is not None]
    assert [p.compaction.number for p in points if p.compaction] == list(
        range(1, info.compactions + 1)
    )
    # usage is what the server reported, summary calls included
    assert info.usage == reported(srv.usages, wire == "anthropic")
    if wire == "anthropic":
        return
    # a follow-up run goes on from the compacted conversation
    sent = len(srv.requests)
    async with fake_provider(monkeypatch, srv, prefix), create_worker(temporal_client, settings):
        await client.send_input(task_id, "Which facts did you note?")
        again = await client.check_task(task_id, wait=True, timeout=60)
    assert again.status == TaskStatus.COMPLETED, again.error
    assert again.result is not None and all(fact in again.result for fact in facts.values())
    assert again.compactions == info.compactions
    follow_up = srv.requests[sent]
    assert srv.prompt_tokens(follow_up) < WINDOW // 2
    assert "[compacted:" in json.dumps(follow_up)


@pytest.mark.parametrize("wire", list(WIRES))
async def test_twenty_turns_read_their_prefix_from_the_cache(
    wire: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_class, prefix, _, parse = WIRES[wire]
    model = "openai:gpt-4.1-mini" if wire == "openai" else "anthropic:claude-sonnet-4-6"
    facts = write_files(workspace, 19)
    server = server_class(responder=reading_model(parse, files=19))
    async with fake_provider(monkeypatch, server, prefix) as srv:
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "Read f00.txt to f18.txt.", model=model)
            info = await client.check_task(task_id, wait=True, timeout=120)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.turns == 20 and info.result is not None
    assert all(fact in info.result for fact in facts.values())
    # the usage is what the server reported, turn by turn summed (its cost: test_costs)
    assert info.usage.model_copy(update={"cost_usd": None}) == reported(
        srv.usages, wire == "anthropic"
    )
    # every request begins with the one before, byte for byte (cache markers aside)
    bodies = [
        json.loads(json.dumps(b).replace(', "cache_control": {"type": "ephemeral"}', ""))
        for b in srv.requests
    ]
    for before, after in itertools.pairwise(bodies):
        assert after["messages"][: len(before["messages"])] == before["messages"]
        assert (after.get("tools"), after.get("system")) == (
            before.get("tools"),
            before.get("system"),
        )
    later = reported(srv.usages[2:], wire == "anthropic")
    share = later.cache_read_tokens / later.input_tokens
    print(f"{wire}: {share:.0%} of the input from turn 3 on was read from the cache")
    assert share >= 0.7
    if wire == "openai":
        assert {b.get("prompt_cache_key") for b in srv.requests} == {None}  # a custom URL


@pytest.mark.parametrize("wire", list(WIRES))
async def test_a_worker_killed_mid_compaction_repeats_only_the_summary_call(
    wire: str, client: SubagentClient, settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    server_class, prefix, model_name, parse = WIRES[wire]
    facts = write_files(workspace)
    model = reading_model(parse)
    hung: list[int] = []

    def respond(body: dict[str, Any]) -> FakeReply:
        if parse(body)[0] and not hung:
            hung.append(len(srv.requests))
            return FakeReply(text="never finished", hang=True)
        return model(body)

    workers: list[WorkerProcess] = []
    async with server_class(context_window=WINDOW, responder=respond) as srv:

        def worker() -> WorkerProcess:
            env = {f"{prefix}_BASE_URL": srv.base_url, f"{prefix}_API_KEY": "sk-fake"}
            workers.append(worker_process(settings, workspace, tmp_path / "worker.log", env))
            return workers[-1]

        try:
            await worker().start()
            task_id = await client.spawn_task(
                "explore", "Read f00.txt to f29.txt.", model=model_name, max_turns=40
            )
            await asyncio.wait_for(srv.hanging.wait(), 120)
            workers[0].kill()  # in the middle of the compaction's summary call
            await worker().start()
            info = await client.check_task(task_id, wait=True, timeout=150)
        finally:
            for w in workers:
                w.close()
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result is not None and all(fact in info.result for fact in facts.values())
    transcript = await client.get_transcript(task_id)
    points = [m.compaction for m in transcript if m.compaction is not None]
    summaries = sum(p.model_calls for p in points)
    assert summaries >= 1 and len(points) == info.compactions
    # the summary call the kill cut short was made once more; nothing else was repeated
    calls = [parse(b)[0] for b in srv.requests]
    assert calls.count(True) == summaries + 1
    assert calls.count(False) == info.turns + srv.outcomes.count("400")
    assert len([m for m in transcript if m.role == "tool"]) == FILES


async def test_a_summary_call_that_asks_for_tools_runs_none(
    client: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("a line of the notes file\n" * 120)  # ~3 KB
    attack = [
        {"name": "bash", "arguments": {"command": "touch pwned-by-bash"}},
        {"name": "write_file", "arguments": {"path": "pwned.txt", "content": "x"}},
    ]
    turn = {
        "text": "NOTE: read the notes again. " + "thinking " * 150,
        "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
    }
    model = "scripted:" + json.dumps(
        {
            "turns": [turn],
            "repeat": 8,
            "final": "done",
            "summary": {"tool_calls": attack},
        }
    )
    small = settings.model_copy(update={"context_window": 2048})
    async with create_worker(temporal_client, small):
        task_id = await client.spawn_task(
            "general", "read the notes", model=model, permission_mode="dont_ask"
        )
        info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "done" and info.compactions >= 1
    # the summary call offered no tools; what it asked for anyway never ran
    assert not (workspace / "pwned.txt").exists()
    assert not (workspace / "pwned-by-bash").exists()
    transcript = await client.get_transcript(task_id)
    called = {c.name for m in transcript for c in m.tool_calls}
    assert called == {"read_file"}
    # with no text, the summary is the agent's own words, each turn's beginning kept
    summaries = [m for m in transcript if m.compaction and m.compaction.model_calls]
    assert summaries and all("The model wrote no summary" in m.content for m in summaries)
    counts = [m.content.count("NOTE: read the notes again.") for m in summaries]
    assert counts == sorted(counts) and counts[-1] > counts[0], counts  # none lost


async def test_a_prompt_that_cannot_fit_fails_at_once_naming_both_sizes(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prompt = "Summarize this: " + "lorem ipsum dolor sit amet " * 1500  # ~40 KB
    async with fake_provider(monkeypatch, FakeOpenAIServer(), "OPENAI") as srv:
        async with create_worker(temporal_client, settings):
            # gpt-4's window of 8,192 tokens is known: refused before any request
            task_id = await client.spawn_task("explore", prompt, model="openai:gpt-4")
            info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.FAILED
    assert info.error is not None
    assert "prompt alone" in info.error and "8,192 tokens" in info.error, info.error
    assert re.search(r"about \d{1,3},\d{3} tokens", info.error)
    assert srv.requests == []
    failures = []
    async for event in temporal_client.get_workflow_handle(task_id).fetch_history_events():
        if event.HasField("activity_task_failed_event_attributes"):
            failures.append(event.activity_task_failed_event_attributes.failure)
    assert len(failures) == 1 and failures[0].application_failure_info.non_retryable


async def test_a_prompt_the_provider_refuses_alone_fails_naming_both_sizes(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prompt = "Summarize this: " + "lorem ipsum dolor sit amet " * 400  # ~11 KB
    server = FakeAnthropicServer(context_window=1500)
    async with fake_provider(monkeypatch, server, "ANTHROPIC") as srv:
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", prompt, model="anthropic:claude-x")
            info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.FAILED
    assert info.error is not None and "1,500 tokens" in info.error, info.error
    assert srv.outcomes == ["400"]  # asked once; the window it named was kept


async def test_compactions_and_cache_counts_are_on_the_spans_without_model_text(
    dev_server: DevServer,
    settings: Settings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = create_tracer_provider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # this test's global only
    write_files(workspace, 8)
    server = FakeAnthropicServer(context_window=16_000, responder=reading_model(anthropic_wire, 8))
    temporal = await connect_client(dev_server.address, dev_server.namespace, tracing=True)
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    try:
        async with fake_provider(monkeypatch, server, "ANTHROPIC"):
            async with create_worker(temporal, settings, tracer_provider=provider):
                task_id = await client.spawn_task(
                    "explore", "Read f00.txt to f07.txt.", model="anthropic:claude-sonnet-4-6"
                )
                info = await client.check_task(task_id, wait=True, timeout=60)
        spans = list(exporter.get_finished_spans())
    finally:
        provider.shutdown()
    assert info.status == TaskStatus.COMPLETED, info.error
    compactions = [s for s in spans if s.name == COMPACTION_SPAN]
    assert info.compactions >= 1 and len(compactions) >= info.compactions
    for span in compactions:
        attributes = dict(span.attributes or {})
        assert attributes["subagent.task_id"] == task_id
        assert attributes["subagent.compaction.window"] <= 16_000
        assert (
            attributes["subagent.compaction.tokens_after"]
            <= attributes["subagent.compaction.tokens_before"]
        )
    turns = [dict(s.attributes or {}) for s in spans if s.name == MODEL_TURN_SPAN]
    assert sum(t["gen_ai.usage.cache_read.input_tokens"] for t in turns) == (
        info.usage.cache_read_tokens
        - sum(
            int((s.attributes or {})["gen_ai.usage.cache_read.input_tokens"]) for s in compactions
        )
    )
    assert any(t["gen_ai.usage.cache_creation.input_tokens"] for t in turns)
    # names and numbers only: no note, fact or summary the model wrote
    values = [str(v) for s in spans for v in (s.attributes or {}).values()]
    assert not [v for v in values if "FACT-" in v or "NOTE" in v or "noted" in v]


async def test_check_ls_and_watch_show_cached_tokens_and_compactions(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_files(workspace, 8)
    server = FakeAnthropicServer(context_window=16_000, responder=reading_model(anthropic_wire, 8))
    async with fake_provider(monkeypatch, server, "ANTHROPIC"):
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "explore", "Read f00.txt to f07.txt.", model="anthropic:claude-sonnet-4-6"
            )
            info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.compactions >= 1 and info.usage.cache_read_tokens > 0
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SUBAGENTS_", "TEMPORAL_"))},
        **TEST_MODELS,
        "TEMPORAL_ADDRESS": settings.address,
        "SUBAGENTS_TASK_QUEUE": settings.task_queue,
        "SUBAGENTS_BLOB_DIR": str(settings.resolved_blob_dir),
        "SUBAGENTS_DATA_DIR": str(tmp_path / "cli-data"),
        "COLUMNS": "200",
    }

    async def cli(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "durable_subagents", *args, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        return out.decode()

    usage = info.usage
    cached = f"cached {usage.cache_read_tokens:,} · written {usage.cache_write_tokens:,}"
    check = await cli("check", task_id)
    assert f"tokens in {usage.input_tokens:,} ({cached}) / out {usage.output_tokens:,}" in check
    times = "once" if info.compactions == 1 else f"{info.compactions} times"
    assert f"compacted {times}" in check
    as_json = json.loads(await cli("check", task_id, "--json"))
    assert as_json["compactions"] == info.compactions
    assert as_json["usage"]["cache_read_tokens"] == usage.cache_read_tokens
    listed = json.loads(await cli("ls", "--json"))
    row = next(entry for entry in listed if entry["id"] == task_id)
    assert row["usage"]["cache_read_tokens"] == usage.cache_read_tokens
    assert row["usage"]["input_tokens"] == usage.input_tokens
    watched = await cli("watch", task_id)
    compactions = [line for line in watched.splitlines() if " compaction " in line]
    assert len(compactions) == info.compactions and "tokens" in compactions[0]
    turns = [line for line in watched.splitlines() if " turn " in line]
    assert len(turns) == info.turns and all("tokens in" in line for line in turns)


async def test_an_agents_context_window_compacts_and_agent_files_set_it(
    client: SubagentClient, worker: None, workspace: Path, tmp_path: Path
) -> None:
    agent_file = tmp_path / ".claude" / "agents" / "small.md"
    agent_file.parent.mkdir(parents=True)
    agent_file.write_text(
        "---\nname: small\ndescription: reads in a small window\ntools: Read\n"
        "context_window: 2048\n---\nYou read files."
    )
    spec = load_agent_file(agent_file)
    assert spec.context_window == 2048
    agent_file.write_text(agent_file.read_text().replace("2048", "lots"))
    with pytest.raises(InvalidRequest, match="'context_window' must be a number of tokens"):
        load_agent_file(agent_file)

    client.agents["small"] = spec
    (workspace / "notes.txt").write_text("a line of the notes file\n" * 120)
    turn = {
        "text": "reading the notes",
        "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
    }
    # scripted models have no window of their own: the agent's is the only one
    task_id = await client.spawn_task("small", "read", model=script(turn, repeat=6, final="done"))
    info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED and info.result == "done", info.error
    assert info.compactions >= 1
    points = [m.compaction for m in await client.get_transcript(task_id) if m.compaction]
    assert all(p.window == 2048 and p.tokens_after < p.tokens_before for p in points)


async def test_a_tree_sums_the_usage_of_its_finished_subagents(
    client: SubagentClient, worker: None
) -> None:
    client.agents["lead"] = AgentSpec(name="lead", tools=["read_file"], may_spawn=True)
    child = script({"text": "child done", "usage": {"input_tokens": 700, "output_tokens": 300}})
    calls = [
        {"name": "spawn_subagent", "arguments": {"agent": "explore", "prompt": f"part {i}"}}
        for i in range(2)
    ]
    for call in calls:
        call["arguments"]["model"] = child
    wait = {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]}
    lead = script(
        {"tool_calls": calls, "usage": {"input_tokens": 50, "output_tokens": 5}},
        {**wait, "usage": {"input_tokens": 60, "output_tokens": 6}},
        {"text": "lead done", "usage": {"input_tokens": 70, "output_tokens": 7}},
    )
    task_id = await client.spawn_task("lead", "split", model=lead)
    info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.usage == Usage(input_tokens=180, output_tokens=18)
    assert info.tree_usage == Usage(input_tokens=180 + 1400, output_tokens=18 + 600)
    # the memo has it too (what check shows while the task runs)
    memo = await (await client.temporal.get_workflow_handle(task_id).describe()).memo()
    assert memo["tree_usage"]["input_tokens"] == 1580
    children = await client.list_tasks(parent_id=task_id)
    assert [c.tree_usage for c in children] == [None, None]
    # the model's report of its subagents has no usage in it
    transcript = await client.get_transcript(task_id)
    report = next(m for m in transcript if m.tool_name == "wait_subagents")
    assert "usage" not in json.loads(report.content)[0]


async def test_prompt_caching_can_be_turned_off(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_files(workspace, 4)
    server = FakeAnthropicServer(responder=reading_model(anthropic_wire, 4))
    off = settings.model_copy(update={"prompt_cache": False})
    async with fake_provider(monkeypatch, server, "ANTHROPIC") as srv:
        async with create_worker(temporal_client, off):
            task_id = await client.spawn_task(
                "explore", "Read f00.txt to f03.txt.", model="anthropic:claude-sonnet-4-6"
            )
            info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert len(srv.requests) == 5 and "cache_control" not in json.dumps(srv.requests)
    assert info.usage.cache_read_tokens == info.usage.cache_write_tokens == 0
    assert info.usage == reported(srv.usages, anthropic=True)
