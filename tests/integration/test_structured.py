"""Structured answers: a spawn's output schema, the final_answer tool, and hostile answers.

Real worker, real dev server; the model is the scripted one (the hostile answers) or
the real openai/anthropic SDKs against the fake servers (both wires).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError

from durable_subagents import InvalidRequest, PayloadTooLarge, SubagentClient, TaskStatus
from durable_subagents.client import SubagentTools
from durable_subagents.config import Settings
from durable_subagents.context._output_schema import (
    ANSWER_RETRIES,
    FINAL_ANSWER_TOOL,
    MAX_ANSWER_BYTES,
    MAX_SCHEMA_BYTES,
)
from durable_subagents.providers import clear_provider_cache, close_providers
from durable_subagents.testing import FakeAnthropicServer, FakeModelServer, FakeOpenAIServer
from durable_subagents.wire._payloads import ModelTurnInput
from durable_subagents.worker import create_worker

from ..helpers.tasks import script
from ..parent_workflows import StructuredChildWorkflow

VERDICT = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["pass", "fail"]},
        "files": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    },
    "required": ["verdict", "files"],
    "additionalProperties": False,
}
GOOD = {"verdict": "pass", "files": ["inventory/stock.py"]}
BAD = {"verdict": "maybe", "files": ["inventory/stock.py"]}
MODELS = {"openai": "openai:gpt-test", "anthropic": "anthropic:claude-test"}


class Review(BaseModel):
    """The review of a change."""

    verdict: str
    files: list[str]


def answer(arguments: Any, *more: dict[str, Any]) -> dict[str, Any]:
    """A scripted turn that gives ``arguments`` as the final answer (and other calls)."""
    return {"tool_calls": [{"name": FINAL_ANSWER_TOOL, "arguments": arguments}, *more]}


async def model_turns(temporal: Client, task_id: str) -> list[int]:
    """The attempt that ended each model-turn activity of the task (its latest run)."""
    attempts = []
    async for e in temporal.get_workflow_handle(task_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attempts.append(e.activity_task_started_event_attributes.attempt)
    return attempts


async def run(client: SubagentClient, model: str, **options: Any) -> Any:
    task_id = await client.spawn_task(
        "explore", "review the change", model=model, output_schema=VERDICT, **options
    )
    return await client.check_task(task_id, wait=True, timeout=60)


@contextlib.asynccontextmanager
async def model_api(monkeypatch: pytest.MonkeyPatch, kind: str) -> AsyncIterator[FakeModelServer]:
    """A fake ``kind`` API this process's workers call."""
    server: FakeModelServer = FakeOpenAIServer() if kind == "openai" else FakeAnthropicServer()
    async with server as srv:
        monkeypatch.setenv(f"{kind.upper()}_API_KEY", "k")
        monkeypatch.setenv(f"{kind.upper()}_BASE_URL", srv.base_url)
        clear_provider_cache()
        try:
            yield srv
        finally:
            await close_providers()


def tools_sent(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tools a request offered, by name, with their parameters (either wire)."""
    out = {}
    for tool in body.get("tools", []):
        if "function" in tool:
            out[tool["function"]["name"]] = tool["function"]["parameters"]
        else:
            out[tool["name"]] = tool["input_schema"]
    return out


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results a request carries (either wire)."""
    out = []
    for message in body["messages"]:
        if message["role"] == "tool":
            out.append(message["content"])
        elif isinstance(message["content"], list):
            out += [b["content"] for b in message["content"] if b["type"] == "tool_result"]
    return out


# ------------------------------------------------------------------ bad schemas at spawn

BAD_SCHEMAS = [
    pytest.param(
        {"type": "array", "items": {"type": "string"}}, "describe a JSON object", id="array"
    ),
    pytest.param({"properties": {"a": {"type": "string"}}}, "describe a JSON object", id="no-type"),
    pytest.param("an object please", "must be a JSON Schema", id="text"),
    pytest.param(
        {"type": "object", "properties": {"a": {"type": "strin"}}},
        "not a valid JSON Schema",
        id="invalid",
    ),
    pytest.param(
        {"type": "object", "required": "a"}, "not a valid JSON Schema", id="required-not-list"
    ),
    pytest.param(
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
        "does not resolve",
        id="dangling-ref",
    ),
    pytest.param(
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
        "never fetched",
        id="remote-ref",
    ),
    pytest.param(
        {"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}},
        "does not resolve",
        id="relative-ref",
    ),
    pytest.param(
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)b"}}},
        "RE2",
        id="lookahead",
    ),
    pytest.param(
        {"type": "object", "$schema": "http://json-schema.org/draft-04/schema#"},
        "dialect",
        id="draft-04",
    ),
    pytest.param(
        {"type": "object", "description": "x" * MAX_SCHEMA_BYTES},
        "over the 32768-byte limit",
        id="too-large",
    ),
    pytest.param({"type": "object", "default": float("nan")}, "must be JSON data", id="nan"),
]


@pytest.mark.parametrize(("schema", "message"), BAD_SCHEMAS)
async def test_a_bad_schema_is_refused_at_spawn_and_nothing_starts(
    client: SubagentClient, temporal_client: Client, schema: Any, message: str
) -> None:
    task_id = f"bad-schema-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InvalidRequest) as caught:
        await client.spawn_task("explore", "go", output_schema=schema, task_id=task_id)
    assert message in str(caught.value)
    assert str(caught.value).startswith("output_schema")
    if "limit" in message:
        assert isinstance(caught.value, PayloadTooLarge)
    with pytest.raises(RPCError):
        await temporal_client.get_workflow_handle(task_id).describe()


async def test_a_bad_schema_is_an_error_the_orchestrating_model_reads(
    client: SubagentClient,
) -> None:
    tools = SubagentTools(client, parent_id="orch-bad-schema")
    out = json.loads(
        await tools.call(
            "spawn_subagent",
            {"agent": "explore", "prompt": "go", "output_schema": {"type": "array"}},
        )
    )
    assert set(out) == {"error"} and "describe a JSON object" in out["error"]


# ------------------------------------------------------------------ the scripted model


async def test_an_answer_that_matches_is_the_output_and_its_json_the_result(
    client: SubagentClient, worker: None
) -> None:
    info = await run(client, script(answer(GOOD)))
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.output == GOOD
    assert json.loads(info.result) == GOOD
    assert info.stop_reason == "end_turn" and info.turns == 1


async def test_a_pydantic_model_class_is_taken_as_its_schema(
    client: SubagentClient, worker: None
) -> None:
    task_id = await client.spawn_task(
        "explore",
        "review",
        model=script(answer({"verdict": 3, "files": []}), answer(GOOD)),
        output_schema=Review,
    )
    info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.output == GOOD
    assert Review.model_validate(info.output).verdict == "pass"
    transcript = await client.get_transcript(task_id)
    [told] = [m.content for m in transcript if m.role == "tool" and m.is_error]
    assert "$.verdict: 3 is not of type 'string'" in told


async def test_an_invalid_answer_goes_back_with_the_errors_then_a_valid_one_ends_the_task(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    info = await run(client, script(answer(BAD), answer(GOOD)))
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.output == GOOD and info.turns == 2
    transcript = await client.get_transcript(info.id)
    [told] = [m for m in transcript if m.role == "tool"]
    assert told.is_error and told.tool_name == FINAL_ANSWER_TOOL
    assert "Your answer does not match the output schema" in told.content
    assert "$.verdict: 'maybe' is not one of ['pass', 'fail']" in told.content
    assert f"{ANSWER_RETRIES} more tries" in told.content
    assert await model_turns(temporal_client, info.id) == [1, 1]


async def test_a_plain_text_answer_is_taken_when_it_is_matching_json(
    client: SubagentClient, worker: None
) -> None:
    fenced = "Here it is:\n```json\n" + json.dumps(GOOD) + "\n```"
    info = await run(
        client, script({"text": fenced}, {"text": "```json\n" + json.dumps(GOOD) + "\n```"})
    )
    assert info.output == GOOD and info.turns == 2
    transcript = await client.get_transcript(info.id)
    told = [m.content for m in transcript if m.role == "user"][-1]
    assert "That reply was not taken as your answer: the reply was text" in told
    assert f"call the {FINAL_ANSWER_TOOL} tool" in told.lower()


async def test_an_answer_that_keeps_failing_fails_the_task_naming_the_failure(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    info = await run(client, script(answer(BAD), repeat=10))
    assert info.status == TaskStatus.FAILED
    assert info.output is None
    assert info.error is not None
    assert f"did not match the output schema {ANSWER_RETRIES + 1} times" in info.error
    assert "'maybe' is not one of ['pass', 'fail']" in info.error
    assert info.turns == ANSWER_RETRIES + 1  # no retry loop: one turn per answer, then done
    assert await model_turns(temporal_client, info.id) == [1] * (ANSWER_RETRIES + 1)


async def test_a_runs_history_holds_the_schema_once_however_many_turns_it_takes(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    listing = {"tool_calls": [{"name": "list_files", "arguments": {}}]}
    info = await run(client, script(listing, listing, listing, answer(GOOD)))
    assert info.output == GOOD and info.turns == 4
    inputs = []
    converter = temporal_client.data_converter
    async for e in temporal_client.get_workflow_handle(info.id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = e.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "model_turn":
                [turn] = await converter.decode(attrs.input.payloads, [ModelTurnInput])
                inputs.append(turn)
    assert [t.output_schema for t in inputs] == [VERDICT, None, None, None]
    refs = {t.output_schema_ref for t in inputs[1:]}
    assert len(refs) == 1 and None not in refs


async def test_a_users_workflow_starts_a_subagent_with_a_schema(
    temporal_client: Client, settings: Settings
) -> None:
    """``start_subagent`` checks the schema in workflow code, and the result has the output."""
    model = script(answer(BAD), answer(GOOD))
    async with create_worker(temporal_client, settings, workflows=[StructuredChildWorkflow]):
        done = await temporal_client.execute_workflow(
            StructuredChildWorkflow.run,
            {"model": model, "schema": VERDICT},
            id=f"structured-{uuid.uuid4().hex[:6]}",
            task_queue=settings.task_queue,
        )
        refused = await temporal_client.execute_workflow(
            StructuredChildWorkflow.run,
            {"model": model, "schema": {"type": "object", "required": "verdict"}},
            id=f"structured-{uuid.uuid4().hex[:6]}",
            task_queue=settings.task_queue,
        )
    assert done == {
        "status": "completed",
        "output": GOOD,
        "result": json.dumps(GOOD, separators=(",", ":")),
    }
    assert refused["error"].startswith("InvalidRequest: output_schema is not a valid JSON Schema")


# ------------------------------------------------------------------ a hostile model's answers

DEEP: Any = "bottom"
for _ in range(200):
    DEEP = {"files": DEEP}

HOSTILE = [
    pytest.param(
        {"text": "The verdict is pass, files: stock.py"},
        "the reply was text, not a JSON object",
        id="prose",
    ),
    pytest.param(
        {"text": '{"verdict": "pass", "files": [}'},
        "the reply was not valid JSON",
        id="broken-json",
    ),
    pytest.param(
        {"text": '{"verdict": "pass", "files": [], "n": NaN}'}, "not valid JSON", id="nan-text"
    ),
    pytest.param(
        {"text": '{"verdict": "pass", "files": [], "n": 1e999}'}, "not valid JSON", id="overflow"
    ),
    pytest.param({"text": "[" * 5000 + "]" * 5000}, "not a JSON object", id="deep-text-array"),
    pytest.param(
        {"text": '{"a":' * 5000 + "1" + "}" * 5000}, "not valid JSON", id="deep-text-object"
    ),
    pytest.param(answer(DEEP), "nested over 32 levels", id="deep-call"),
    pytest.param(
        answer({"verdict": "pass", "files": ["x" * MAX_ANSWER_BYTES]}),
        f"over the {MAX_ANSWER_BYTES}-byte limit",
        id="huge-call",
    ),
    pytest.param(
        {"text": json.dumps({"verdict": "pass", "files": ["x" * (MAX_ANSWER_BYTES * 3 // 2)]})},
        f"over the {MAX_ANSWER_BYTES}-byte limit",
        id="huge-text",
    ),
    pytest.param(
        answer({"verdict": "pass", "files": ["a"] * 50}), "is too long", id="too-many-files"
    ),
]


@pytest.mark.parametrize(("attack", "message"), HOSTILE)
async def test_a_hostile_answer_gets_a_clear_error_and_never_becomes_the_output(
    client: SubagentClient,
    temporal_client: Client,
    worker: None,
    attack: dict[str, Any],
    message: str,
) -> None:
    info = await run(client, script(attack, repeat=10))
    assert info.status == TaskStatus.FAILED, info
    assert info.output is None
    assert info.error is not None and message in info.error, info.error
    assert len(info.error) < 3000
    assert await model_turns(temporal_client, info.id) == [1] * (ANSWER_RETRIES + 1)


async def test_a_schema_and_answer_made_to_check_for_ever_are_cut_off(
    client: SubagentClient, worker: None
) -> None:
    """Nested ``anyOf`` over a deep answer takes exponential time; the check stops."""
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/e{i + 1}"}]}
        for i in range(25)
    }
    for i in range(1, 26):
        defs[f"e{i}"] = {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i}"}}}
    defs["d25"] = {"type": "object", "properties": {"a": {"type": "string"}}}
    schema = {"type": "object", "$defs": defs, "properties": {"a": {"$ref": "#/$defs/d0"}}}
    deep: Any = 1
    for _ in range(25):
        deep = {"a": deep}
    task_id = await client.spawn_task(
        "explore",
        "go",
        model=script(answer(deep), answer({"a": {}})),
        output_schema=schema,
    )
    info = await client.check_task(task_id, wait=True, timeout=120)
    assert info.output == {"a": {}}, info
    transcript = await client.get_transcript(task_id)
    [told] = [m.content for m in transcript if m.role == "tool" and m.is_error]
    assert "checking the answer against the schema took over 1 s" in told


async def test_patterns_and_unique_items_are_checked_in_linear_time(
    client: SubagentClient, worker: None
) -> None:
    """A backtracking regex and an all-pairs uniqueItems would hold the worker for hours."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^(a+)+$"},
            "rows": {"type": "array", "uniqueItems": True},
        },
    }
    redos = {"name": "a" * 30_000 + "!"}
    rows = {"rows": [{"n": i} for i in range(6_000)] + [{"n": 5.0}]}
    task_id = await client.spawn_task(
        "explore",
        "go",
        model=script(answer(redos), answer(rows), answer({"name": "aaa"})),
        output_schema=schema,
    )
    info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.output == {"name": "aaa"}, info
    told = [m.content for m in await client.get_transcript(task_id) if m.is_error]
    assert "does not match '^(a+)+$'" in told[0]
    assert "has non-unique elements (item 6000 repeats an earlier one)" in told[1]


async def test_calls_made_beside_a_valid_answer_never_run(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    write = {"name": "write_file", "arguments": {"path": "planted.txt", "content": "x"}}
    task_id = await client.spawn_task(
        "general",
        "go",
        model=script(answer(GOOD, write)),
        output_schema=VERDICT,
        permission_mode="dont_ask",
    )
    info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.output == GOOD
    assert not (workspace / "planted.txt").exists()


async def test_an_invalid_answer_beside_other_calls_lets_them_run_and_the_model_retry(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("verdict: pass\n")
    read = {"name": "read_file", "arguments": {"path": "notes.txt"}}
    second = {"name": FINAL_ANSWER_TOOL, "arguments": GOOD}
    task_id = await client.spawn_task(
        "explore",
        "go",
        model=script(answer(BAD, read, second), answer(GOOD)),
        output_schema=VERDICT,
    )
    info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.output == GOOD and info.turns == 2
    results = {m.tool_name: m for m in await client.get_transcript(task_id) if m.role == "tool"}
    assert "verdict: pass" in results["read_file"].content
    first, extra = [
        m
        for m in await client.get_transcript(task_id)
        if m.tool_name == FINAL_ANSWER_TOOL and m.role == "tool"
    ]
    assert "'maybe' is not one of" in first.content
    assert "one final_answer call per turn is read" in extra.content


async def test_no_final_answer_tool_without_a_schema(client: SubagentClient, worker: None) -> None:
    task_id = await client.spawn_task("explore", "go", model=script(answer(GOOD), {"text": "done"}))
    info = await client.check_task(task_id, wait=True, timeout=60)
    assert info.output is None and info.result == "done"
    [told] = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert f"unknown tool '{FINAL_ANSWER_TOOL}'" in told


async def test_a_follow_up_keeps_the_schema(client: SubagentClient, worker: None) -> None:
    model = script(answer(GOOD), {"text": "now in prose"}, answer({"verdict": "fail", "files": []}))
    info = await run(client, model)
    assert info.output == GOOD
    await client.send_input(info.id, "look again")  # a new run: it starts before this returns
    info = await client.check_task(info.id, wait=True, timeout=60)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.output == {"verdict": "fail", "files": []}
    transcript = await client.get_transcript(info.id)
    assert next(m.content for m in transcript if m.role == "tool") == "Answer accepted."


# ------------------------------------------------------------------ both wires, real SDKs


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_structured_answer_after_one_invalid_attempt_on_the_wire(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with model_api(monkeypatch, kind) as srv:
        srv.add_reply(tool_calls=[{"name": FINAL_ANSWER_TOOL, "arguments": BAD}])
        srv.add_reply(text="Fixed.", tool_calls=[{"name": FINAL_ANSWER_TOOL, "arguments": GOOD}])
        async with create_worker(temporal_client, settings):
            info = await run(client, MODELS[kind])
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.output == GOOD and json.loads(info.result) == GOOD
    first, second = srv.requests
    for body in (first, second):
        sent = tools_sent(body)
        assert sent[FINAL_ANSWER_TOOL] == VERDICT
        assert "read_file" in sent
    system = first["system"] if kind == "anthropic" else first["messages"][0]["content"]
    if isinstance(system, list):  # Anthropic's blocks (a cache breakpoint on the last)
        system = "".join(block["text"] for block in system)
    assert f"call the {FINAL_ANSWER_TOOL} tool" in system
    [told] = tool_results(second)
    assert "'maybe' is not one of ['pass', 'fail']" in told


async def test_hostile_answer_arguments_on_the_wire_fail_the_task_clearly(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Arguments as a hostile model sends them: not JSON, not an object, NaN, too deep."""
    raw = ['{"verdict": "pass", "files": [', "[1, 2]", '{"verdict": NaN, "files": []}']
    async with model_api(monkeypatch, "openai") as srv:
        for arguments in raw:
            srv.add_reply(tool_calls=[{"name": FINAL_ANSWER_TOOL, "arguments": arguments}])
        async with create_worker(temporal_client, settings):
            info = await run(client, MODELS["openai"])
    assert info.status == TaskStatus.FAILED and info.output is None
    assert info.error is not None and "not finite" in info.error
    told = [tool_results(body)[-1] for body in srv.requests[1:]]
    assert [("not a JSON object" in t) for t in told] == [True, True]
    assert len(srv.requests) == ANSWER_RETRIES + 1


async def test_the_cli_spawns_with_a_schema_file_and_shows_the_output(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    schema_file = tmp_path / "verdict.json"
    schema_file.write_text(json.dumps(VERDICT, indent=2))
    env = {
        "PATH": "/usr/bin:/bin",
        "TEMPORAL_ADDRESS": settings.address,
        "SUBAGENTS_TASK_QUEUE": settings.task_queue,
        "SUBAGENTS_DATA_DIR": str(tmp_path / "cli-data"),
        "SUBAGENTS_BLOB_DIR": str(settings.resolved_blob_dir),
    }
    async with model_api(monkeypatch, "openai") as srv:
        srv.add_reply(tool_calls=[{"name": FINAL_ANSWER_TOOL, "arguments": BAD}])
        srv.add_reply(tool_calls=[{"name": FINAL_ANSWER_TOOL, "arguments": GOOD}])
        async with create_worker(temporal_client, settings):
            code, out, err = await cli(
                "spawn", "explore", "review", "--model", "openai:gpt-test",
                "--output-schema", str(schema_file), "--wait", "--json", env=env,
            )  # fmt: skip
            assert code == 0, err
            info = json.loads(out)
            assert info["status"] == "completed" and info["output"] == GOOD
            assert json.loads(info["result"]) == GOOD
            code, out, err = await cli("check", info["id"], env=env)
    assert code == 0, err
    assert '"verdict": "pass"' in out  # shown as indented JSON
    assert tools_sent(srv.requests[0])[FINAL_ANSWER_TOOL] == VERDICT

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path, message in ((broken, "is not JSON"), (tmp_path / "missing.json", "cannot read")):
        code, out, err = await cli(
            "spawn", "explore", "review", "--output-schema", str(path), env=env
        )
        # a value wrong in itself: a usage error, told before anything connects
        assert code == 2 and out == "" and "Traceback" not in err
        assert "Invalid value for --output-schema" in err and message in " ".join(err.split())
    array = tmp_path / "array.json"
    array.write_text('{"type": "array"}')
    code, out, err = await cli("spawn", "explore", "review", "--output-schema", str(array), env=env)
    assert code == 2 and "describe a JSON object" in " ".join(err.split())


async def cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "durable_subagents", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_orchestrator_tools_report_the_output_as_json(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = SubagentTools(client, parent_id=f"orch-{uuid.uuid4().hex[:8]}", default_wait=30)
    async with model_api(monkeypatch, "anthropic") as srv:
        srv.add_reply(tool_calls=[{"name": FINAL_ANSWER_TOOL, "arguments": BAD}])
        srv.add_reply(tool_calls=[{"name": FINAL_ANSWER_TOOL, "arguments": GOOD}])
        async with create_worker(temporal_client, settings):
            spawned = json.loads(
                await tools.call(
                    "spawn_subagent",
                    json.dumps(
                        {
                            "agent": "explore",
                            "prompt": "review",
                            "model": MODELS["anthropic"],
                            "output_schema": VERDICT,
                        }
                    ),
                )
            )
            report = json.loads(
                await tools.call(
                    "wait_subagents", {"task_ids": [spawned["task_id"]], "mode": "all"}
                )
            )
    [view] = report["tasks"]
    assert view["status"] == "completed"
    assert view["output"] == GOOD  # JSON, not a string to parse
    assert "result" not in view
    assert tools_sent(srv.requests[0])[FINAL_ANSWER_TOOL] == VERDICT
