"""Strings a model sends are carried, never retried forever: lone surrogates become U+FFFD.

JSON lets a model API send ``\\ud800``, which Python decodes to a code point UTF-8
cannot encode. Each test sends such escapes where a model's output arrives (text
deltas, tool-call ids, names and argument deltas, stop reasons, error messages), over
both wire protocols through the real SDKs and through the scripted model, and checks
that the task goes on with U+FFFD in their place, each model turn in one attempt.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from durable_subagents import SubagentClient, TaskEvent, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.providers import ModelProvider, clear_provider_cache
from durable_subagents.providers._text import encodable
from durable_subagents.testing import FakeAnthropicServer, FakeModelServer, FakeOpenAIServer
from durable_subagents.types import Message, ModelRequest
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.providers import (
    MODELS,
    PROVIDERS,
    activity_runs,
    model_api,
    recorded_failure,
    turn_text,
)
from ..helpers.tasks import script

LONE = "\ud800"
R = "\ufffd"
PAIR = "\U0001f600"  # one code point; JSON sends it as two escapes, \ud83d\ude00
WORDS = " ".join(f"word{i}" for i in range(1, 20)) + "."


def carried(value: Any) -> bool:
    """Whether the payload converter encodes ``value`` (what a turn's result needs)."""
    pydantic_data_converter.payload_converter.to_payloads([value])
    return True


@pytest.fixture(params=PROVIDERS)
async def wire(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[ModelProvider, FakeModelServer, str]]:
    """A provider built by the worker's resolver, speaking to a fake API of its kind."""
    from durable_subagents.providers import close_providers, resolve_provider

    kind: str = request.param
    server = FakeOpenAIServer() if kind == "openai" else FakeAnthropicServer()
    async with server as srv:
        monkeypatch.setenv(f"{kind.upper()}_API_KEY", "k")
        monkeypatch.setenv(f"{kind.upper()}_BASE_URL", srv.base_url)
        clear_provider_cache()
        provider, _, name = resolve_provider(MODELS[kind])
        yield provider, srv, name
        await close_providers()


# ------------------------------------------------------------------ provider boundary


async def test_both_wires_replace_lone_surrogates_in_all_a_model_sends(
    wire: tuple[ModelProvider, FakeModelServer, str],
) -> None:
    provider, srv, name = wire
    srv.add_reply(
        deltas=["Reading ", f"{LONE}the ", f"{PAIR} ", "\ud83d", "\ude00", " file"],
        tool_calls=[
            {
                "id": f"call_{LONE}1",
                "name": f"read{LONE}_file",
                # dumped as JSON: the escape is inside the arguments' own JSON text
                "arguments": {f"pa{LONE}th": f"notes{LONE}.txt", "list": [LONE, {"k": LONE}]},
            },
            # sent verbatim: the surrogate travels as an escape of the event's JSON
            {"id": "call_2", "name": "grep", "arguments": f'{{"pattern": "def{LONE}"}}'},
            # not JSON at all: kept as _raw, and carried too
            {"id": "call_3", "name": "grep", "arguments": f'{{"pattern": "{LONE}'},
        ],
        stop_reason=f"tool_calls{LONE}",
    )
    pieces: list[str] = []
    response = await provider.complete(
        ModelRequest(model=name, messages=[Message(role="user", content="go")]),
        on_text=pieces.append,
    )
    assert response.text == f"Reading {R}the {PAIR} {R}{R} file"
    assert "".join(pieces) == response.text
    assert all(encodable(p) == p for p in pieces)
    first, second, third = response.tool_calls
    assert (first.id, first.name) == (f"call_{R}1", f"read{R}_file")
    assert first.arguments == {f"pa{R}th": f"notes{R}.txt", "list": [R, {"k": R}]}
    assert second.arguments == {"pattern": f"def{R}"}
    assert third.arguments == {"_raw": f'{{"pattern": "{R}'}
    assert response.stop_reason == f"tool_calls{R}"
    assert carried(response)


async def test_a_server_error_message_with_a_lone_surrogate_is_recorded(
    wire: tuple[ModelProvider, FakeModelServer, str],
) -> None:
    provider, srv, name = wire
    srv.add_error(400, body={"error": {"type": "invalid_request_error", "message": f"no {LONE}"}})
    with pytest.raises(ApplicationError) as caught:
        await provider.complete(
            ModelRequest(model=name, messages=[Message(role="user", content="x")])
        )
    assert caught.value.non_retryable
    assert f"no {R}" in caught.value.message
    assert f"no {R}" in recorded_failure(caught.value)  # what history keeps of it


# ------------------------------------------------------------------ whole tasks


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_a_task_goes_on_over_both_wires_with_the_replacement(
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
) -> None:
    """Text, a tool call's id, name and arguments, and live text with lone surrogates:
    the task completes, every model turn in its first attempt."""
    assert settings.workspace is not None
    (settings.workspace / f"notes{R}.txt").write_text("the answer is 42\n")
    async with model_api(monkeypatch, kind) as srv:
        srv.add_reply(
            text=f"Reading {LONE}",
            tool_calls=[
                {
                    "id": f"call{LONE}",
                    "name": "read_file",
                    "arguments": {"path": f"notes{LONE}.txt"},
                },
                {"name": f"grep{LONE}", "arguments": {"pattern": "x"}},
            ],
        )
        final = f"{LONE} {WORDS}"
        srv.add_reply(text=final, chunk_delay=0.15)  # heartbeats carry it while it streams
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MODELS[kind])
            events: list[TaskEvent] = [e async for e in client.watch(task_id)]
        info = await client.check_task(task_id)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == final.replace(LONE, R)
    runs = await activity_runs(temporal_client, task_id)
    assert [(r.activity, r.attempt) for r in runs if r.activity == "model_turn"] == [
        ("model_turn", 1),
        ("model_turn", 1),
    ], runs
    # the file tool ran with the replaced path and read the file of that name
    transcript = await client.get_transcript(task_id)
    results = [m.content for m in transcript if m.role == "tool"]
    assert "the answer is 42" in results[0]
    assert results[1].startswith(f"unknown tool 'grep{R}'")
    # the live text streamed in pieces and adds up to the answer
    assert sum(1 for e in events if e.kind == "text" and e.turn == 2) >= 2
    assert turn_text(events, 2) == info.result
    # what the model is sent back holds the replacement, never a surrogate
    assert f"Reading {R}" in json.dumps(srv.requests[1], ensure_ascii=False)


async def test_the_scripted_model_is_carried_the_same_way(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    model = script(
        {
            "text": f"odd {LONE}",
            "tool_calls": [
                {"id": f"c{LONE}", "name": f"list{LONE}_files", "arguments": {"p": LONE}},
                {"name": "list_files", "arguments": {"pattern": f"*{LONE}"}},
            ],
        },
        {"text": f"done {LONE}", "stream": 1.5},
    )
    task_id = await client.spawn_task("explore", "go", model=model)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == f"done {R}"
    runs = await activity_runs(temporal_client, task_id)
    assert [r.attempt for r in runs if r.activity == "model_turn"] == [1, 1]
    transcript = await client.get_transcript(task_id)
    [answer] = [m for m in transcript if m.role == "assistant" and m.tool_calls]
    assert answer.content == f"odd {R}"
    assert [c.name for c in answer.tool_calls] == [f"list{R}_files", "list_files"]
    assert answer.tool_calls[1].arguments == {"pattern": f"*{R}"}
    results = [m.content for m in transcript if m.role == "tool"]
    assert results[0].startswith(f"unknown tool 'list{R}_files'")


async def test_a_lone_surrogate_from_a_caller_is_refused_with_a_typed_error(
    client: SubagentClient, worker: None
) -> None:
    """An orchestrating model's text reaches the client too: a prompt, a rule's pattern,
    metadata, input or a reason with a lone surrogate is an ``InvalidRequest`` naming
    where it is (it was an encoder's traceback), through the client and through the
    orchestrator tools; nothing starts and the task it targets is unchanged."""
    from durable_subagents import InvalidRequest
    from durable_subagents.client import SubagentTools

    spawns: list[dict[str, Any]] = [
        {"prompt": f"fix {LONE} this"},
        {"prompt": "x", "description": f"d{LONE}"},
        {"prompt": "x", "metadata": {"k": f"v{LONE}"}},
        {
            "prompt": "x",
            "permissions": [{"tool": "bash", "pattern": f"rm{LONE}*", "action": "deny"}],
        },
    ]
    # the session's server holds other tests' tasks: these are told apart by parent
    parent = f"surrogates-{uuid.uuid4().hex[:8]}"
    for options in spawns:
        with pytest.raises(InvalidRequest, match="lone surrogate"):
            await client.spawn_task("general", parent_id=parent, **options)
    tools = SubagentTools(client, parent_id=parent)
    answer = json.loads(
        await tools.call("spawn_subagent", {"agent": "general", "prompt": f"x{LONE}"})
    )
    assert "lone surrogate" in answer["error"] and "prompt" in answer["error"]
    assert await client.list_tasks(parent_id=parent) == []

    task_id = await client.spawn_task(
        "general",
        "x",
        model=script({"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}),
        permission_mode="default",
    )
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    with pytest.raises(InvalidRequest, match="input holds a lone surrogate"):
        await client.send_input(task_id, f"steer {LONE}")
    with pytest.raises(InvalidRequest, match="reason holds a lone surrogate"):
        await client.reject(task_id, reason=f"no {LONE}")
    assert (await client.check_task(task_id)).pause_id == paused.pause_id
    await client.cancel_task(task_id)
