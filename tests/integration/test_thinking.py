"""Anthropic extended thinking: signed thinking blocks kept whole and sent back as the API
requires, across a killed worker, follow-up runs and compaction; shown apart from the
answer.

A real worker (in process, or a ``subagents worker`` process that is SIGKILLed) on the
real Temporal server; the real ``anthropic`` SDK against ``FakeAnthropicServer``, which
signs every thinking block it sends and answers a block that comes back changed, out of
order or missing with the API's 400.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from anthropic import AsyncAnthropic, BadRequestError
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import create_tracer_provider

from bench.bench_faults import WorkerProcess
from durable_subagents import AgentSpec, SubagentClient, TaskEvent, TaskStatus, connect_client
from durable_subagents.client._live_turn import RESTARTED
from durable_subagents.config import Settings
from durable_subagents.context._context import SUMMARY_PROMPT
from durable_subagents.providers import clear_provider_cache, close_providers
from durable_subagents.providers._thinking import (
    INTERLEAVED_BETA,
    THINKING_BUDGETS,
)
from durable_subagents.telemetry._telemetry import MODEL_TURN_SPAN
from durable_subagents.testing import DevServer, FakeAnthropicServer, FakeReply
from durable_subagents.testing.fake_anthropic import REDACTED
from durable_subagents.worker import create_worker

from ..helpers.cli import CLI, _env
from ..helpers.processes import worker_process

MANUAL = "anthropic:claude-haiku-4-5"
ADAPTIVE = "anthropic:claude-opus-4-6"


@contextlib.asynccontextmanager
async def anthropic_api(
    monkeypatch: pytest.MonkeyPatch, **options: Any
) -> AsyncIterator[FakeAnthropicServer]:
    """A fake Messages API this process's workers call."""
    async with FakeAnthropicServer(**options) as srv:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.base_url)
        clear_provider_cache()
        try:
            yield srv
        finally:
            await close_providers()


def read(path: str) -> dict[str, Any]:
    return {"name": "read_file", "arguments": {"path": path}}


def reasoning(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A Messages API message's thinking and redacted thinking blocks."""
    content = message["content"]
    if not isinstance(content, list):
        return []
    return [b for b in content if b.get("type") in ("thinking", "redacted_thinking")]


async def history_bytes(temporal: Client, task_id: str) -> bytes:
    """Every event of every run of the task, serialized (payloads included)."""
    out = b""
    async for execution in temporal.list_workflows(f"WorkflowId = '{task_id}'"):
        handle = temporal.get_workflow_handle(task_id, run_id=execution.run_id)
        out += b"".join([e.SerializeToString() async for e in handle.fetch_history_events()])
    return out


# ---------------------------------------------------------------- a tool loop, a worker killed


async def test_thinking_in_a_tool_loop_survives_a_worker_killed_mid_task(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    """Every turn sends the earlier turns' signed blocks back unchanged, a redacted one
    too; the turn retried on a new worker after SIGKILL sends the same request, read
    from the blob store; no request is refused and the answer holds no thinking."""
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "b.txt").write_text("beta\n")
    answer = "a.txt holds alpha and b.txt holds beta."
    workers: list[WorkerProcess] = []
    async with FakeAnthropicServer() as srv:
        srv.add_reply(tool_calls=[read("a.txt")], thinking=["THOUGHT-1: start with a.txt."])
        srv.add_reply(
            text="Now b.txt.",
            tool_calls=[read("b.txt")],
            thinking=["THOUGHT-2: a.txt said alpha.", REDACTED],
        )
        srv.add_reply(text="never finished", hang=True)
        srv.add_reply(text=answer, thinking=["THOUGHT-3: both read; answer."])

        def worker() -> WorkerProcess:
            env = {"ANTHROPIC_BASE_URL": srv.base_url, "ANTHROPIC_API_KEY": "sk-fake"}
            workers.append(worker_process(settings, workspace, tmp_path / "worker.log", env))
            return workers[-1]

        try:
            await worker().start()
            task_id = await client.spawn_task(
                "explore",
                "What do a.txt and b.txt hold?",
                model=MANUAL,
                reasoning_effort="medium",
                max_turns=10,
            )
            await asyncio.wait_for(srv.hanging.wait(), 60)
            workers[0].kill()  # in the middle of the third turn's model call
            await worker().start()
            info = await client.check_task(task_id, wait=True, timeout=90)
        finally:
            for w in workers:
                w.close()
    assert info.status == TaskStatus.COMPLETED, info.error
    assert srv.outcomes == ["200", "200", "hang", "200"]  # nothing refused
    assert info.result == answer
    first, second, cut, retried = srv.requests
    for body in srv.requests:
        assert body["thinking"] == {"type": "enabled", "budget_tokens": THINKING_BUDGETS["medium"]}
        assert body["max_tokens"] == 8192 + THINKING_BUDGETS["medium"]
        assert "temperature" not in body and "tool_choice" not in body
    assert {h.get("anthropic-beta") for h in srv.request_headers} == {INTERLEAVED_BETA}
    # the retry on the new worker sent what the killed one had sent, byte for byte
    assert json.dumps(cut, sort_keys=True) == json.dumps(retried, sort_keys=True)
    assistants = [m for m in retried["messages"] if m["role"] == "assistant"]
    assert [[b["type"] for b in reasoning(m)] for m in assistants] == [
        ["thinking"],
        ["thinking", "redacted_thinking"],
    ]
    assert assistants[0]["content"][0]["thinking"] == "THOUGHT-1: start with a.txt."
    assert all(m["content"][0]["type"] == "thinking" for m in assistants)  # thinking first
    assert reasoning(second["messages"][1]) == reasoning(assistants[0])
    assert "thinking" not in json.dumps(first["messages"])
    # the durable record keeps it; the history, the memo and the result never do
    transcript = await client.get_transcript(task_id)
    thoughts = [m.thinking for m in transcript if m.role == "assistant"]
    assert [t.split(":")[0] for t in thoughts] == ["THOUGHT-1", "THOUGHT-2", "THOUGHT-3"]
    assert transcript[-1].content == answer and "THOUGHT" not in transcript[-1].content
    assert b"THOUGHT-" not in await history_bytes(temporal_client, task_id)
    reported = sum(u["output_tokens_details"]["thinking_tokens"] for u in srv.usages)
    assert info.usage.reasoning_tokens == reported > 0


async def test_a_tool_loop_that_began_without_thinking_goes_on_without_it(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
) -> None:
    """An answer recorded with no thinking block (before thinking was turned on, or by a
    model that did not think) cannot continue its tool loop under manual thinking: the
    API would refuse it. That request goes without thinking; the next loop thinks."""
    (workspace / "a.txt").write_text("alpha\n")
    async with anthropic_api(monkeypatch) as srv:
        srv.add_reply(tool_calls=[read("a.txt")], thinking=[])
        srv.add_reply(text="alpha.")
        srv.add_reply(text="still alpha.", thinking=["A second look."])
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "explore", "What is in a.txt?", model=MANUAL, reasoning_effort="low"
            )
            info = await client.check_task(task_id, wait=True, timeout=60)
            assert info.status == TaskStatus.COMPLETED, info.error
            await client.send_input(task_id, "Sure?")
            info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.result == "still alpha.", info.error
    assert srv.outcomes == ["200", "200", "200"], srv.outcomes
    first, loop, follow_up = srv.requests
    assert "thinking" in first and "thinking" not in loop
    assert loop["max_tokens"] == 8192  # the budget's room only when thinking
    assert follow_up["thinking"]["type"] == "enabled"  # a user message starts a new loop


# ---------------------------------------------------------------- follow-ups, answers, compaction


async def test_a_follow_up_run_sends_the_first_runs_thinking_back(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "b.txt").write_text("beta\n")
    async with anthropic_api(monkeypatch) as srv:
        srv.add_reply(tool_calls=[read("a.txt")], thinking=["T1", REDACTED])
        srv.add_reply(text="alpha.", thinking=["T2"])
        srv.add_reply(tool_calls=[read("b.txt")], thinking=["T3"])
        srv.add_reply(text="beta.", thinking=["T4"])
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "explore", "What is in a.txt?", model=ADAPTIVE, reasoning_effort="high"
            )
            done = await client.check_task(task_id, wait=True, timeout=60)
            assert done.result == "alpha.", done.error
            await client.send_input(task_id, "And b.txt?")
            info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED and info.result == "beta.", info.error
    assert srv.outcomes == ["200"] * 4
    for body in srv.requests:
        assert body["thinking"] == {"type": "adaptive"}
        assert body["output_config"] == {"effort": "high"}
        assert body["max_tokens"] == 8192 + THINKING_BUDGETS["high"]
    follow_up = srv.requests[2]["messages"]
    sent = [[b.get("thinking", "<redacted>") for b in reasoning(m)] for m in follow_up]
    assert [s for s in sent if s] == [["T1", "<redacted>"], ["T2"]]
    assert "T2" not in (info.result or "") and "T4" not in (info.result or "")


async def test_a_structured_answer_with_thinking_offers_its_tool_without_forcing_it(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API refuses thinking with a forced tool: ``final_answer`` is offered, never
    forced, and an invalid answer's error continues the loop with its thinking."""
    schema = {
        "type": "object",
        "properties": {"verdict": {"enum": ["pass", "fail"]}},
        "required": ["verdict"],
    }
    async with anthropic_api(monkeypatch) as srv:
        srv.add_reply(
            tool_calls=[{"name": "final_answer", "arguments": {"verdict": "maybe"}}],
            thinking=["Unsure."],
        )
        srv.add_reply(
            tool_calls=[{"name": "final_answer", "arguments": {"verdict": "pass"}}],
            thinking=["It passes."],
        )
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "explore", "Pass or fail?", model=MANUAL, reasoning_effort="low",
                output_schema=schema,
            )  # fmt: skip
            info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.output == {"verdict": "pass"}
    assert srv.outcomes == ["200", "200"]
    for body in srv.requests:
        assert "tool_choice" not in body and body["thinking"]["type"] == "enabled"
        assert "final_answer" in [t["name"] for t in body["tools"]]
    assert reasoning(srv.requests[1]["messages"][1])[0]["thinking"] == "Unsure."
    assert "Unsure" not in (info.result or "") and "passes" not in (info.result or "")


SUMMARY_CALL = json.dumps(SUMMARY_PROMPT)[1:-1]


async def test_a_compaction_keeps_thinking_whole_and_its_summary_call_thinks_not(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
) -> None:
    """A thinking agent whose reads pass its window: tool results become notes and old
    turns a summary; the summary call asks for no thinking and reads none, and every
    turn after it still thinks and sends its loop's blocks back unchanged."""
    files = 8
    for i in range(files):
        (workspace / f"f{i}.txt").write_text(f"FACT-{i}\n" + "filler line of the file\n" * 90)
    client.agents["reader"] = AgentSpec(
        name="reader",
        description="Reads.",
        system_prompt="Read the files you are asked to read.",
        tools=["read_file"],
        permission_mode="plan",
        reasoning_effort="medium",
        temperature=0.3,  # the API takes none with thinking: it is left out
        context_window=4_096,
    )
    musing = " ".join(f"musing{n}" for n in range(150))  # ~1.3 KB of thinking a turn

    def respond(body: dict[str, Any]) -> FakeReply:
        if SUMMARY_CALL in json.dumps(body.get("system") or ""):
            return FakeReply(text="The agent read some files; each has one FACT line.")
        results = [
            b["content"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
        found = re.search(r"FACT-(\d+)", results[-1]) if results else None
        i = int(found.group(1)) + 1 if found else 0
        thought = [f"Next is f{i}.txt. {musing}"]
        if i == files:
            return FakeReply(text="Read them all.", thinking=thought)
        return FakeReply(
            text=f"Reading f{i}.txt.", tool_calls=[read(f"f{i}.txt")], thinking=thought
        )

    async with anthropic_api(monkeypatch, responder=respond) as srv:
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "reader", "Read f0.txt to f7.txt, in order.", model=MANUAL, max_turns=20
            )
            info = await client.check_task(task_id, wait=True, timeout=120)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "Read them all."
    assert "400" not in srv.outcomes
    transcript = await client.get_transcript(task_id)
    marks = [m.compaction for m in transcript if m.compaction is not None]
    assert info.compactions >= 1 and sum(m.model_calls for m in marks) >= 1
    summaries = [b for b in srv.requests if SUMMARY_CALL in json.dumps(b.get("system") or "")]
    turns = [b for b in srv.requests if b not in summaries]
    assert summaries and len(turns) == info.turns
    for body in summaries:
        assert "thinking" not in body and "musing" not in json.dumps(body)
    after = turns[-1]  # after the compactions: the view's answers are thinking still
    assert after["thinking"]["type"] == "enabled"
    kept = [m for m in after["messages"] if m["role"] == "assistant"]
    assert kept and all(reasoning(m) and m["content"][0]["type"] == "thinking" for m in kept)
    assert len(kept) < files  # older answers were summarized away
    assert all(m.thinking.startswith("Next is") for m in transcript if m.role == "assistant")


async def test_spans_count_thinking_tokens_and_carry_no_thinking(
    dev_server: DevServer,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = create_tracer_provider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # this test's global only
    temporal = await connect_client(dev_server.address, dev_server.namespace, tracing=True)
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    try:
        async with anthropic_api(monkeypatch) as srv:
            srv.add_reply(
                tool_calls=[{"name": "list_files", "arguments": {}}],
                thinking=["SECRET-PLAN one", REDACTED],
            )
            srv.add_reply(text="done", thinking=["SECRET-PLAN two"])
            async with create_worker(temporal, settings, tracer_provider=provider):
                task_id = await client.spawn_task(
                    "explore", "go", model=MANUAL, reasoning_effort="low"
                )
                info = await client.check_task(task_id, wait=True, timeout=60)
        spans = list(exporter.get_finished_spans())
    finally:
        provider.shutdown()
    assert info.status == TaskStatus.COMPLETED, info.error
    turns = [dict(s.attributes or {}) for s in spans if s.name == MODEL_TURN_SPAN]
    assert len(turns) == 2
    assert sum(int(t["gen_ai.usage.output_tokens"]) for t in turns) == info.usage.output_tokens
    assert info.usage.reasoning_tokens > 0
    values = [str(v) for s in spans for v in (s.attributes or {}).values()]
    events = [str(e.attributes) for s in spans for e in s.events]
    assert not [v for v in values + events if "SECRET-PLAN" in v]


# ---------------------------------------------------------------- watch


async def test_watch_shows_thinking_apart_from_the_text_live_and_replayed(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thought = " ".join(f"idea{n}" for n in range(30)) + "."
    async with anthropic_api(monkeypatch) as srv:
        srv.add_reply(
            text="Listing first.",
            tool_calls=[{"name": "list_files", "arguments": {}}],
            thinking=[thought, REDACTED, "Then list."],
            chunk_delay=0.1,
        )
        srv.add_reply(text="Done.", thinking=["Quick."])
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MANUAL, reasoning_effort="low")
            events: list[TaskEvent] = []
            live = False
            async for event in client.watch(task_id):
                if event.kind == "thinking" and not live:
                    desc = await temporal_client.get_workflow_handle(task_id).describe()
                    live = bool(desc.raw_description.pending_activities)
                events.append(event)
    assert live, "no thinking arrived while the model streamed"

    def joined(kind: str, turn: int) -> str:
        return "".join(e.text or "" for e in events if e.kind == kind and e.turn == turn)

    for turn, thinking, text in (
        (1, thought + "\n\nThen list.", "Listing first."),
        (2, "Quick.", "Done."),
    ):
        kinds = [e.kind for e in events if e.turn == turn and e.kind in ("thinking", "text")]
        assert kinds == sorted(kinds, key=lambda k: k != "thinking"), kinds  # thinking first
        assert joined("thinking", turn) == thinking and joined("text", turn) == text
    assert not any(e.summary == RESTARTED for e in events)
    assert not any("idea" in (e.text or "") for e in events if e.kind == "text")
    # a finished task's events replay it, one piece a turn, from the transcript
    replayed = [
        (e.kind, e.turn, e.text) async for e in client.watch(task_id) if e.kind == "thinking"
    ]
    assert replayed == [("thinking", 1, thought + "\n\nThen list."), ("thinking", 2, "Quick.")]


HOSTILE = "plan \x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J\x1b[1A \u202eevil\u202c \x9b31m end"


async def test_subagents_watch_shows_hostile_thinking_as_inert_text(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Thinking is model text: clipboard, screen-clearing and cursor escapes, a bidi
    override and a C1 CSI arrive as visible escapes, in the text view and in ``--json``."""
    async with anthropic_api(monkeypatch) as srv:
        srv.add_reply(text="ok", thinking=[HOSTILE])
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MANUAL, reasoning_effort="low")
            await client.check_task(task_id, wait=True, timeout=60)
    assert settings.blob_dir is not None
    env = _env(
        tmp_path,
        TEMPORAL_ADDRESS=settings.address,
        SUBAGENTS_TASK_QUEUE=settings.task_queue,
        SUBAGENTS_BLOB_DIR=str(settings.blob_dir),
    )
    outputs = []
    for extra in ([], ["--json"]):
        proc = await asyncio.create_subprocess_exec(
            *CLI, "watch", task_id, *extra, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        outputs.append(out.decode())
    text, as_json = outputs
    for shown in outputs:
        assert not any(c in shown for c in "\x1b\x07\u202e\u202c\x9b"), repr(shown)
    line = next(line for line in text.splitlines() if line.split()[1:2] == ["thinking"])
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in line and "\\u202eevil" in line
    assert "\\x9b31m end" in line
    thinking = [json.loads(x) for x in as_json.splitlines() if '"thinking"' in x]
    assert [e["text"] for e in thinking] == [HOSTILE]  # the same string, once parsed


async def test_the_fake_api_holds_thinking_blocks_to_the_real_apis_rules() -> None:
    """Through the SDK's own stream parser: the blocks it assembles pass; any change to
    them, a block dropped or moved, and thinking with a temperature, a forced tool or a
    budget out of bounds get the API's 400."""
    tools = [{"name": "ls", "description": "List.", "input_schema": {"type": "object"}}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    async with FakeAnthropicServer() as srv:
        api = AsyncAnthropic(base_url=srv.base_url, api_key="k", max_retries=0)
        srv.add_reply(tool_calls=[{"name": "ls", "arguments": {}}], thinking=["a", REDACTED, "b"])
        async with api.messages.stream(
            model="claude-haiku-4-5", max_tokens=4096, thinking=thinking, tools=tools,
            messages=[{"role": "user", "content": "go"}],
        ) as stream:  # fmt: skip
            message = await stream.get_final_message()
        blocks = [b.model_dump(exclude_none=True) for b in message.content]
        assert [b["type"] for b in blocks] == [
            "thinking",
            "redacted_thinking",
            "thinking",
            "tool_use",
        ]
        assert blocks[0]["signature"] and blocks[0]["thinking"] == "a"
        assert message.usage.output_tokens_details is not None
        result = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": blocks[3]["id"], "content": "x"}],
        }

        async def send(content: list[dict[str, Any]], **options: Any) -> str:
            request = {
                "model": "claude-haiku-4-5", "max_tokens": 4096, "tools": tools,
                "thinking": thinking,
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": content},
                    result,
                ],
                **options,
            }  # fmt: skip
            try:
                await api.messages.create(**request)
            except BadRequestError as err:
                return str(err)
            return "ok"

        a, redacted, b, use = blocks
        assert await send(blocks) == "ok"
        changed = {**a, "thinking": "a!"}
        assert "messages.1.content.0: Invalid `signature` in `thinking` block" in await send(
            [changed, redacted, b, use]
        )
        assert "Invalid `signature`" in await send(
            [{**a, "signature": "x" + a["signature"]}, redacted, b, use]
        )
        assert "messages.1.content.0: Invalid `signature`" in await send([b, redacted, a, use])
        assert "Invalid `data` in `redacted_thinking`" in await send(
            [a, {**redacted, "data": redacted["data"][:-8] + "AAAAAAA="}, b, use]
        )
        dropped = await send([use])
        expected = "Expected `thinking` or `redacted_thinking`, but found `tool_use`"
        assert f"messages.1.content.0.type: {expected}" in dropped
        assert "`temperature` may only be set to 1" in await send(
            blocks, extra_body={"temperature": 0.5}
        )
        assert await send(blocks, extra_body={"temperature": 1}) == "ok"
        assert "tool_choice forces tool use" in await send(blocks, tool_choice={"type": "any"})
        assert "greater than or equal to 1024" in await send(
            blocks, thinking={"type": "enabled", "budget_tokens": 1000}
        )
        over = {"type": "enabled", "budget_tokens": 4096}
        assert "`max_tokens` must be greater than `thinking.budget_tokens`" in await send(
            blocks, thinking=over
        )
        assert (
            await send(blocks, thinking=over, extra_headers={"anthropic-beta": INTERLEAVED_BETA})
            == "ok"
        )
        assert "When thinking is disabled" in await send(blocks, thinking={"type": "disabled"})
        assert await send([use], thinking={"type": "disabled"}) == "ok"
        await api.close()
