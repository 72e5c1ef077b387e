"""``openai-responses:`` tasks on a real worker and Temporal server.

Reasoning items are kept in the transcript and sent back unchanged on every later turn,
across a SIGKILLed worker and a compaction; summaries stream to ``watch`` as thinking;
usage counts cached and reasoning tokens; structured answers and context-length
refusals work as on the other wires. The real ``openai`` SDK talks to
``FakeOpenAIResponsesServer``, which answers reasoning that comes back altered or
missing with OpenAI's 400.
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
from temporalio.client import Client

from bench.bench_faults import WorkerProcess
from durable_subagents import AgentSpec, SubagentClient, TaskEvent, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.context._context import SUMMARY_PROMPT
from durable_subagents.providers import clear_provider_cache, close_providers
from durable_subagents.testing import FakeOpenAIResponsesServer, FakeReply
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.processes import worker_process

MODEL = "openai-responses:gpt-5-mini"


@contextlib.asynccontextmanager
async def responses_api(
    monkeypatch: pytest.MonkeyPatch, **options: Any
) -> AsyncIterator[FakeOpenAIResponsesServer]:
    """A fake Responses API this process's workers call."""
    async with FakeOpenAIResponsesServer(**options) as srv:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        clear_provider_cache()
        try:
            yield srv
        finally:
            await close_providers()


def read(path: str) -> dict[str, Any]:
    return {"name": "read_file", "arguments": {"path": path}}


def reasoning(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A request's reasoning items, in order."""
    return [i for i in body["input"] if i.get("type") == "reasoning"]


async def history_bytes(temporal: Client, task_id: str) -> bytes:
    """Every event of every run of the task, serialized (payloads included)."""
    out = b""
    async for execution in temporal.list_workflows(f"WorkflowId = '{task_id}'"):
        handle = temporal.get_workflow_handle(task_id, run_id=execution.run_id)
        out += b"".join([e.SerializeToString() async for e in handle.fetch_history_events()])
    return out


async def test_reasoning_in_a_tool_loop_survives_a_worker_killed_mid_turn(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    """Every turn sends the earlier turns' reasoning items back as they came; the turn
    retried on a new worker after SIGKILL sends the same request, read from the blob
    store; nothing is refused, and no reasoning reaches the history or the answer."""
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "b.txt").write_text("beta\n")
    answer = "a.txt holds alpha and b.txt holds beta."
    workers: list[WorkerProcess] = []
    async with FakeOpenAIResponsesServer() as srv:
        srv.add_reply(tool_calls=[read("a.txt")], thinking=["THOUGHT-1: start with a.txt."])
        srv.add_reply(
            text="Now b.txt.",
            tool_calls=[read("b.txt")],
            thinking=["THOUGHT-2: a.txt said alpha.", None],
        )
        srv.add_reply(text="never finished", hang=True)
        srv.add_reply(text=answer, thinking=["THOUGHT-3: both read; answer."])

        def worker() -> WorkerProcess:
            env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-fake"}
            workers.append(worker_process(settings, workspace, tmp_path / "worker.log", env))
            return workers[-1]

        try:
            await worker().start()
            task_id = await client.spawn_task(
                "explore",
                "What do a.txt and b.txt hold?",
                model=MODEL,
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
        assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
        assert body["reasoning"] == {"effort": "medium", "summary": "auto"}
    # the retry on the new worker sent what the killed one had sent, byte for byte
    assert json.dumps(cut, sort_keys=True) == json.dumps(retried, sort_keys=True)
    issued = list(srv.issued_reasoning.values())
    assert reasoning(first) == []
    assert reasoning(second) == issued[:1]
    assert reasoning(retried) == issued[:3]  # one, then two (one without a summary)
    # each answer's reasoning comes right before what the model said after it
    kinds = [i["type"] for i in retried["input"]]
    assert kinds == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    # the durable record keeps it; the history, the memo and the result never do
    transcript = await client.get_transcript(task_id)
    thoughts = [m.thinking for m in transcript if m.role == "assistant"]
    assert [t.split(":")[0] for t in thoughts] == ["THOUGHT-1", "THOUGHT-2", "THOUGHT-3"]
    assert transcript[-1].content == answer and "THOUGHT" not in transcript[-1].content
    history = await history_bytes(temporal_client, task_id)
    assert b"THOUGHT-" not in history
    assert not [i for i in issued if i["encrypted_content"].encode() in history]
    reported = sum(u["output_tokens_details"]["reasoning_tokens"] for u in srv.usages)
    assert info.usage.reasoning_tokens == reported > 0


async def test_a_follow_up_run_sends_the_first_runs_reasoning_back(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reasoning kept from a finished run goes back in the follow-up, before its answer."""
    async with responses_api(monkeypatch) as srv:
        srv.add_reply(text="Forty-two.", thinking=["It is 6 times 7."])
        srv.add_reply(text="Yes, 42.", thinking=["Still 42."])
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "explore", "What is 6 x 7?", model=MODEL, reasoning_effort="low"
            )
            info = await client.check_task(task_id, wait=True, timeout=60)
            assert info.status == TaskStatus.COMPLETED, info.error
            await client.send_input(task_id, "Sure?")
            info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.result == "Yes, 42.", info.error
    assert srv.outcomes == ["200", "200"]
    follow_up = srv.requests[1]["input"]
    assert [i.get("role", i["type"]) for i in follow_up] == [
        "user",
        "reasoning",
        "assistant",
        "user",
    ]
    assert follow_up[1] == next(iter(srv.issued_reasoning.values()))


async def test_watch_shows_reasoning_summaries_apart_from_the_text(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thought = " ".join(f"idea{n}" for n in range(30)) + "."
    async with responses_api(monkeypatch) as srv:
        srv.add_reply(
            text="Listing first.",
            tool_calls=[{"name": "list_files", "arguments": {}}],
            thinking=[thought, None, "Then list."],
            chunk_delay=0.1,
        )
        srv.add_reply(text="Done.", thinking=["Quick."])
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MODEL, reasoning_effort="low")
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
    assert not any("idea" in (e.text or "") for e in events if e.kind == "text")
    replayed = [
        (e.kind, e.turn, e.text) async for e in client.watch(task_id) if e.kind == "thinking"
    ]
    assert replayed == [("thinking", 1, thought + "\n\nThen list."), ("thinking", 2, "Quick.")]


async def test_a_structured_answer_and_usage_with_cached_and_reasoning_tokens(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The answer's text is held to the schema (``text.format``) and the
    ``final_answer`` tool is offered too: an invalid call's error continues the loop
    with its reasoning, and a JSON text is the answer. The second request reads the
    first one's prefix from OpenAI's prompt cache."""
    schema = {
        "type": "object",
        "properties": {"verdict": {"enum": ["pass", "fail"]}},
        "required": ["verdict"],
    }
    client.agents["judge"] = AgentSpec(
        name="judge",
        description="Judges.",
        system_prompt="Judge carefully. " * 400,  # past the 1,024 tokens OpenAI caches
        tools=[],
        permission_mode="plan",
    )
    async with responses_api(monkeypatch) as srv:
        srv.add_reply(
            tool_calls=[{"name": "final_answer", "arguments": {"verdict": "maybe"}}],
            thinking=["Unsure."],
        )
        srv.add_reply(text='{"verdict": "pass"}', thinking=["It passes."])
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "judge", "Pass or fail?", model=MODEL, reasoning_effort="low",
                output_schema=schema,
            )  # fmt: skip
            info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.output == {"verdict": "pass"}
    assert srv.outcomes == ["200", "200"]
    for body in srv.requests:
        assert "final_answer" in [t["name"] for t in body["tools"]]
        answer_format = {"type": "json_schema", "name": "final_answer", "strict": False}
        assert body["text"]["format"] == {**answer_format, "schema": schema}
    assert reasoning(srv.requests[1])[0]["summary"][0]["text"] == "Unsure."
    assert "Unsure" not in (info.result or "")
    cached = sum(u["input_tokens_details"]["cached_tokens"] for u in srv.usages)
    assert info.usage.cache_read_tokens == cached >= 1024
    assert info.usage.input_tokens == sum(u["input_tokens"] for u in srv.usages)
    assert info.usage.reasoning_tokens == sum(
        u["output_tokens_details"]["reasoning_tokens"] for u in srv.usages
    )
    assert info.usage.reasoning_tokens > 0


SUMMARY_CALL = json.dumps(SUMMARY_PROMPT)[1:-1]


async def test_a_compaction_keeps_the_reasoning_of_the_turns_it_keeps(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
) -> None:
    """Reads that pass the window: old turns become a summary, and every turn after it
    still sends the reasoning of the answers it kept, unchanged (the server refuses
    any that is not)."""
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
        context_window=4_096,
    )
    musing = " ".join(f"musing{n}" for n in range(150))

    def respond(body: dict[str, Any]) -> FakeReply:
        if SUMMARY_CALL in json.dumps(body.get("instructions") or ""):
            return FakeReply(text="The agent read some files; each has one FACT line.")
        outputs = [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
        found = re.search(r"FACT-(\d+)", outputs[-1]) if outputs else None
        i = int(found.group(1)) + 1 if found else 0
        thought = [f"Next is f{i}.txt. {musing}"]
        if i == files:
            return FakeReply(text="Read them all.", thinking=thought)
        return FakeReply(
            text=f"Reading f{i}.txt.", tool_calls=[read(f"f{i}.txt")], thinking=thought
        )

    async with responses_api(monkeypatch, responder=respond) as srv:
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "reader", "Read f0.txt to f7.txt, in order.", model=MODEL, max_turns=20
            )
            info = await client.check_task(task_id, wait=True, timeout=120)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "Read them all."
    assert set(srv.outcomes) == {"200"}, srv.outcomes
    transcript = await client.get_transcript(task_id)
    assert info.compactions >= 1
    summaries = [b for b in srv.requests if SUMMARY_CALL in json.dumps(b.get("instructions"))]
    turns = [b for b in srv.requests if b not in summaries]
    assert len(turns) == info.turns
    after = turns[-1]
    kept = reasoning(after)
    calls = [i for i in after["input"] if i.get("type") == "function_call"]
    assert kept and len(kept) == len(calls) < files  # older answers were summarized away
    assert all(srv.issued_reasoning[i["id"]] == i for i in kept)
    assert all(m.thinking.startswith("Next is") for m in transcript if m.role == "assistant")


async def test_a_context_length_refusal_compacts_and_the_task_goes_on(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
) -> None:
    """No window is known for the model: the API's ``context_length_exceeded`` is the
    first word of it, and the task compacts instead of failing."""
    (workspace / "big.txt").write_text("BIG-FACT\n" + "a long line of the big file\n" * 400)

    def respond(body: dict[str, Any]) -> FakeReply | None:
        if SUMMARY_CALL in json.dumps(body.get("instructions") or ""):
            return FakeReply(text="The agent read big.txt; it starts with BIG-FACT.")
        return None

    async with responses_api(monkeypatch, responder=respond, context_window=3_000) as srv:
        srv.add_reply(tool_calls=[read("big.txt")], thinking=["Read it."])
        srv.add_reply(text="big.txt starts with BIG-FACT.", thinking=["Answer."])
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "explore", "What does big.txt start with?", model="openai-responses:new-model",
                reasoning_effort="low",
            )  # fmt: skip
            info = await client.check_task(task_id, wait=True, timeout=120)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "big.txt starts with BIG-FACT."
    assert "400" in srv.outcomes and srv.outcomes[-1] == "200"
    assert info.compactions >= 1


async def test_a_lead_on_the_responses_api_spawns_a_child_there_too(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A subagent's child runs on its parent's provider: its requests carry their own
    reasoning, none of the parent's, and the parent's reasoning goes on unchanged."""
    client.agents["lead"] = AgentSpec(name="lead", tools=["list_files"], may_spawn=True)
    spawn = {"agent": "explore", "prompt": "look around", "model": MODEL}
    wait = {"name": "wait_subagents", "arguments": {}}

    def respond(body: dict[str, Any]) -> FakeReply:
        prompt = body["input"][0]["content"]
        if prompt == "look around":
            return FakeReply(text="the child's answer", thinking=["CHILD thinks."])
        calls = [i for i in body["input"] if i.get("type") == "function_call"]
        if not calls:
            return FakeReply(tool_calls=[{"name": "spawn_subagent", "arguments": spawn}])
        if len(calls) == 1:
            return FakeReply(tool_calls=[wait], thinking=["LEAD waits."])
        return FakeReply(text="lead done", thinking=["LEAD ends."])

    async with responses_api(monkeypatch, responder=respond) as srv:
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task(
                "lead", "split the work", model=MODEL, reasoning_effort="low"
            )
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "lead done" and set(srv.outcomes) == {"200"}
    [child] = await client.list_tasks(parent_id=task_id)
    assert child.status == TaskStatus.COMPLETED and child.result == "the child's answer"
    child_bodies = [b for b in srv.requests if b["input"][0]["content"] == "look around"]
    lead_bodies = [b for b in srv.requests if b not in child_bodies]
    assert len(child_bodies) == 1 and len(lead_bodies) == 3
    assert child_bodies[0]["reasoning"]["effort"] == "low"  # no harder than its parent
    assert len(reasoning(lead_bodies[-1])) == 2  # the lead's own two turns' reasoning
    assert "CHILD" not in json.dumps(lead_bodies)
