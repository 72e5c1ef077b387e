"""OpenTelemetry: one trace per task, our spans inside the activities, nothing when off."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.opentelemetry import (
    OpenTelemetryPlugin,
    create_tracer_provider,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer

from durable_subagents import AgentSpec, SubagentClient, TaskInfo, TaskStatus, connect_client
from durable_subagents.activities import SubagentActivities
from durable_subagents.config import Settings
from durable_subagents.errors import SubagentError
from durable_subagents.telemetry._telemetry import (
    MODEL_TURN_SPAN,
    TOOL_SPAN,
    UNKNOWN_TOOL,
    ActivityTelemetry,
    client_traced,
    text_hash,
    tracing_enabled,
)
from durable_subagents.testing import DevServer, FakeOpenAIServer, FakeReply, free_port
from durable_subagents.types import Message, ToolCall
from durable_subagents.wire._payloads import ModelTurnInput, ToolCallInput
from durable_subagents.worker import create_worker
from durable_subagents.worker._worker import workflow_runner
from durable_subagents.workflows import SubagentWorkflow

from ..helpers import CEILING
from ..helpers.metrics import get, running_worker, samples, value
from ..helpers.tasks import script
from ..helpers.telemetry import Otel, all_attribute_values, in_memory_spans

SECRET = "sk-test-telemetry-0123456789abcdef"
NOTES = "the answer is 42\n"


@pytest.fixture
def otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Otel]:
    """Spans in memory, the provider global for this test only (``in_memory_spans``)."""
    with in_memory_spans(monkeypatch) as spans:
        yield spans


def finished(otel: Otel) -> list[ReadableSpan]:
    return list(otel.exporter.get_finished_spans())


async def run_task(
    temporal: Client,
    settings: Settings,
    tracer_provider: trace.TracerProvider | None = None,
) -> tuple[TaskInfo, list[Any]]:
    """A 2-turn task with one ``read_file`` call, run to the end on a fresh worker."""
    assert settings.workspace is not None
    (settings.workspace / "notes.txt").write_text(NOTES)
    model = script(
        {
            "text": "reading",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
        },
        {"text": "Found: {last_tool_result}"},
    )
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    async with create_worker(temporal, settings, tracer_provider=tracer_provider):
        task_id = await client.spawn_task("explore", "What is the answer?", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED
    events = [e async for e in temporal.get_workflow_handle(task_id).fetch_history_events()]
    return info, events


def attr(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {})[key]


async def test_a_task_is_one_trace_with_turn_and_tool_spans(
    otel: Otel,
    dev_server: DevServer,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # on the worker: must reach no span
    temporal = await connect_client(dev_server.address, dev_server.namespace, tracing=True)
    assert client_traced(temporal)
    info, _ = await run_task(temporal, settings, tracer_provider=otel.provider)
    spans = finished(otel)
    names = [s.name for s in spans]

    assert "StartWorkflow:SubagentWorkflow" in names
    assert "RunWorkflow:SubagentWorkflow" in names
    assert names.count("RunActivity:model_turn") == 2
    assert names.count("RunActivity:run_tool") == 0  # the read ran within its turn

    turns = sorted(
        (s for s in spans if s.name == MODEL_TURN_SPAN),
        key=lambda s: attr(s, "subagent.turn"),
    )
    assert [attr(t, "subagent.turn") for t in turns] == [1, 2]
    for turn in turns:
        attrs = turn.attributes or {}
        assert attrs["subagent.task_id"] == info.id
        assert attrs["subagent.agent"] == "explore"
        assert attrs["gen_ai.system"] == "scripted"
        assert attrs["gen_ai.request.model"] == "scripted"
        assert turn.status.status_code != StatusCode.ERROR
    assert [attr(t, "subagent.tool_calls") for t in turns] == [1, 0]
    assert sum(attr(t, "gen_ai.usage.input_tokens") for t in turns) == (info.usage.input_tokens)
    assert sum(attr(t, "gen_ai.usage.output_tokens") for t in turns) == (info.usage.output_tokens)
    assert info.usage.input_tokens > 0 and info.usage.output_tokens > 0

    [tool] = [s for s in spans if s.name == TOOL_SPAN]
    tool_attrs = tool.attributes or {}
    assert tool_attrs["subagent.tool.name"] == "read_file"
    assert tool_attrs["subagent.tool.is_error"] is False
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    [tool_message] = [m for m in await client.get_transcript(info.id) if m.role == "tool"]
    assert NOTES.strip() in tool_message.content
    assert tool_attrs["subagent.tool.output_size"] == len(tool_message.content)
    assert tool_attrs["subagent.task_id"] == info.id

    # one trace per task, and the tool span hangs under the turn that ran it
    assert len({s.context.trace_id for s in spans}) == 1
    by_id = {s.context.span_id: s for s in spans}
    chain = [tool.name]
    span: ReadableSpan | None = tool
    while span is not None and span.parent is not None:
        span = by_id.get(span.parent.span_id)
        chain.append(span.name if span else "?")
    assert chain[:5] == [
        TOOL_SPAN,
        MODEL_TURN_SPAN,
        "RunActivity:model_turn",
        "StartActivity:model_turn",
        "RunWorkflow:SubagentWorkflow",
    ]
    assert tool.parent is not None and by_id[tool.parent.span_id] is turns[0]
    assert chain[-1] == "StartWorkflow:SubagentWorkflow"
    for turn in turns:
        assert turn.parent is not None
        assert by_id[turn.parent.span_id].name == "RunActivity:model_turn"

    # sizes and names only: no key, no prompt, no tool output
    values = all_attribute_values(spans)
    assert not any(SECRET in v for v in values)
    assert not any("What is the answer?" in v or "the answer is 42" in v for v in values)


async def test_tracing_off_makes_no_spans_and_the_same_history(
    otel: Otel, dev_server: DevServer, settings: Settings
) -> None:
    plain = await connect_client(dev_server.address, dev_server.namespace, tracing=False)
    assert not client_traced(plain)
    _, untraced = await run_task(plain, settings)
    assert finished(otel) == []

    traced = await connect_client(dev_server.address, dev_server.namespace, tracing=True)
    _, traced_events = await run_task(traced, settings)
    assert finished(otel)
    # the plugin adds headers, never events (memo writes of progress alone depend on
    # how fast the turns went: at most one a second)
    memo = EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED
    assert [e.event_type for e in traced_events if e.event_type != memo] == [
        e.event_type for e in untraced if e.event_type != memo
    ]
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in traced_events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert all("_tracer-data" in a.header.fields for a in scheduled)


async def test_a_traced_history_replays_without_exporting(
    otel: Otel, dev_server: DevServer, settings: Settings
) -> None:
    temporal = await connect_client(dev_server.address, dev_server.namespace, tracing=True)
    info, _ = await run_task(temporal, settings)
    history = await temporal.get_workflow_handle(info.id).fetch_history()
    exported = len(finished(otel))
    for plugins in ([], [OpenTelemetryPlugin(add_temporal_spans=True)]):
        replayer = Replayer(
            workflows=[SubagentWorkflow],
            data_converter=pydantic_data_converter,
            workflow_runner=workflow_runner(),
            plugins=plugins,
        )
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, result.replay_failure
    assert len(finished(otel)) == exported  # replay ends no spans


async def test_auto_mode_follows_the_global_provider(
    dev_server: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not tracing_enabled(None)  # the default proxy: off
    auto = await connect_client(dev_server.address, dev_server.namespace)
    assert not client_traced(auto)
    tp = create_tracer_provider(shutdown_on_exit=False)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", tp)
    assert tracing_enabled(None)
    assert not tracing_enabled(False)
    auto = await connect_client(dev_server.address, dev_server.namespace)
    assert client_traced(auto)


async def test_a_traced_worker_needs_a_replay_safe_provider(
    dev_server: DevServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", TracerProvider(shutdown_on_exit=False))
    traced = await connect_client(dev_server.address, dev_server.namespace, tracing=True)
    with pytest.raises(SubagentError, match="create_tracer_provider"):
        create_worker(traced, settings)


# ------------------------------------------------------------------ model-chosen text

HOSTILE = "PWNED"
"""In every id, name, argument and answer the hostile model chooses: in no span."""


def text_in_spans(spans: list[ReadableSpan]) -> str:
    """Every name, attribute, event, link and status text of the spans, as one text."""
    parts: list[str] = []
    for span in spans:
        parts += [span.name, span.status.description or ""]
        mappings = [span.attributes or {}, span.resource.attributes]
        for event in span.events:
            parts.append(event.name)
            mappings.append(event.attributes or {})
        mappings += [link.attributes or {} for link in span.links]
        for mapping in mappings:
            parts += [f"{k}={v}" for k, v in mapping.items()]
    return "\n".join(parts)


async def test_no_span_carries_what_a_hostile_model_chose(
    otel: Otel, dev_server: DevServer, settings: Settings
) -> None:
    """Call ids, tool names, arguments, answers and tool output stay out of the trace."""
    assert settings.workspace is not None
    (settings.workspace / f"{HOSTILE}-notes.txt").write_text(f"{HOSTILE} secret output\n")
    model = script(
        {
            "text": f"{HOSTILE} thinking out loud",
            "tool_calls": [
                # a valid id, kept as the model sent it
                {
                    "id": f"call_{HOSTILE}_exfil_0123",
                    "name": "read_file",
                    "arguments": {"path": f"{HOSTILE}-notes.txt"},
                },
                # an id that is replaced, and arguments a tool refuses
                {
                    "id": f"{HOSTILE} ignore previous instructions",
                    "name": "grep",
                    "arguments": {"pattern": f"{HOSTILE}(", "path": f"{HOSTILE}/missing"},
                },
                # a tool the agent lacks: refused by the workflow, never run
                {"id": f"call_{HOSTILE}_2", "name": f"{HOSTILE}_tool", "arguments": {"x": HOSTILE}},
            ],
        },
        {"text": f"{HOSTILE} final answer"},
    )
    temporal = await connect_client(dev_server.address, dev_server.namespace, tracing=True)
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    async with create_worker(temporal, settings, tracer_provider=otel.provider):
        task_id = await client.spawn_task("explore", "look", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == f"{HOSTILE} final answer"
    spans = finished(otel)
    tools = sorted(
        (s for s in spans if s.name == TOOL_SPAN), key=lambda s: attr(s, "subagent.tool.name")
    )
    assert [attr(s, "subagent.tool.name") for s in tools] == ["grep", "read_file"]
    text = text_in_spans(spans)
    assert HOSTILE not in text, [line for line in text.splitlines() if HOSTILE in line]
    assert HOSTILE.lower() not in text.lower()
    # the call ids are there as hashes, so a call in the transcript finds its span
    [call_message] = [m for m in await client.get_transcript(task_id) if m.tool_calls]
    ids = {c.name: c.id for c in call_message.tool_calls}
    assert ids["read_file"] == f"call_{HOSTILE}_exfil_0123"
    for span in tools:
        name = attr(span, "subagent.tool.name")
        assert attr(span, "subagent.tool.call_id_hash") == text_hash(ids[name])
        assert "gen_ai.tool.call.id" not in (span.attributes or {})
        assert attr(span, "gen_ai.tool.name") == name


def activity_environment() -> ActivityEnvironment:
    """Runs an activity method in-process; its attempt started just now (not stale)."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, current_attempt_scheduled_time=datetime.now(UTC))
    return env


async def test_an_unknown_tool_and_an_error_quoting_a_call_id_are_hashed(
    tmp_path: Path, settings: Settings
) -> None:
    """The activities themselves, run directly: a tool this worker lacks (a tool worker
    with other tools) is named ``unknown``, and a failure whose message quotes a
    model's call id has it replaced in the span's exception event and status."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider(shutdown_on_exit=False)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    activities = SubagentActivities(
        settings.blob_store(), workspace_root=tmp_path, telemetry=ActivityTelemetry(tp)
    )
    env = activity_environment()
    call = ToolCall(id=f"call_{HOSTILE}_9", name=f"{HOSTILE}_tool", arguments={"a": HOSTILE})
    result = await env.run(activities.run_tool, ToolCallInput(task_id="t-1", call=call))
    assert result.is_error
    call_id = f"call_{HOSTILE}_missing"
    turn = ModelTurnInput(
        task_id="t-1",
        head=None,
        new_messages=[Message(role="tool", tool_call_id=call_id, tool_name="grep")],
        result_records={call_id: f"call-{call_id}-0123"},
        model="scripted",
        turn=2,
    )
    with pytest.raises(ApplicationError, match=call_id):  # history keeps it, as the model's
        await env.run(activities.model_turn, turn)
    tool, model_turn = sorted(exporter.get_finished_spans(), key=lambda s: s.name, reverse=True)
    assert tool.name == TOOL_SPAN
    assert attr(tool, "subagent.tool.name") == UNKNOWN_TOOL
    assert attr(tool, "subagent.tool.name_hash") == text_hash(call.name)
    assert "gen_ai.tool.name" not in (tool.attributes or {})
    assert tool.status.status_code == StatusCode.ERROR
    assert model_turn.name == MODEL_TURN_SPAN
    assert model_turn.status.status_code == StatusCode.ERROR
    assert f"[model text {text_hash(call_id)}]" in (model_turn.status.description or "")
    assert HOSTILE not in text_in_spans([tool, model_turn])


# ------------------------------------------------------------------ model names

LEAKED = "sk-live-4f3c2a1b9e8d7c6b"
"""A secret the parent model read, put in the name of its subagent's model."""


async def test_a_model_name_a_model_chose_is_no_metric_label_and_no_span_attribute(
    otel: Otel,
    settings: Settings,
    client: SubagentClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """llama.cpp's server and many proxies answer to any model name: a parent model
    spawns a child on ``openai:exfil-<secret>``, which the server answers. Only the
    worker's own model is named; the child's is ``openai:other`` in the metrics and
    ``other`` in the spans."""
    child_model = f"openai:exfil-{LEAKED}"

    def answer(body: dict[str, Any]) -> FakeReply:
        if body["model"] != "gpt-4.1-mini":
            return FakeReply(text="child done")
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if not results:
            spawn = {"agent": "general", "prompt": "go", "model": child_model}
            return FakeReply(tool_calls=[{"name": "spawn_subagent", "arguments": spawn}])
        if "child done" not in str(results[-1].get("content")):
            return FakeReply(tool_calls=[{"name": "wait_subagents", "arguments": {}}])
        return FakeReply(text="lead done")

    client.agents["lead"] = AgentSpec(name="lead", may_spawn=True)
    async with FakeOpenAIServer(responder=answer) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-telemetry")
        config = settings.model_copy(
            update={"model": "openai:gpt-4.1-mini", "metrics_port": free_port()}
        )
        async with running_worker(config) as base:
            task_id = await client.spawn_task("lead", "delegate")
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
            status, text = await asyncio.to_thread(get, f"{base}/metrics")
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "lead done"
    assert {r["model"] for r in srv.requests} == {"gpt-4.1-mini", f"exfil-{LEAKED}"}

    assert status == 200
    assert LEAKED not in text and "exfil" not in text
    scraped = samples(text)
    turns = "subagents_model_turn_seconds_count"
    assert value(scraped, turns, model="openai:gpt-4.1-mini", outcome="ok") >= 3
    assert value(scraped, turns, model="openai:other", outcome="ok") >= 1

    spans = finished(otel)
    in_spans = text_in_spans(spans)
    assert LEAKED not in in_spans and "exfil" not in in_spans
    named = {attr(s, "gen_ai.request.model") for s in spans if s.name == MODEL_TURN_SPAN}
    assert named == {"gpt-4.1-mini", "other"}
