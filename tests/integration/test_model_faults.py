"""Model faults end to end: a real workflow, real SDKs, a fake API that misbehaves.

Each test spawns a task against ``FakeOpenAIServer``/``FakeAnthropicServer`` with a
fault queued, and checks what the task, the history and the server saw.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from durable_subagents import SubagentClient, TaskInfo, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.testing import FakeModelServer
from durable_subagents.worker import create_worker

from ..helpers.providers import MODELS, PROVIDERS, activity_runs, model_api

KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def worker_with(client: Client, settings: Settings, **timeouts: float) -> Worker:
    """A subagent worker with other model timeouts (``Settings`` field names)."""
    return create_worker(client, settings.model_copy(update=timeouts))


async def run_task(
    client: SubagentClient, kind: str, agent: str = "explore", timeout: float = 30
) -> TaskInfo:
    task_id = await client.spawn_task(agent, "go", model=MODELS[kind])
    return await client.check_task(task_id, wait=True, timeout=timeout)


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results a model request carries (either API's wire shape)."""
    out = []
    for message in body["messages"]:
        if message["role"] == "tool":
            out.append(message["content"])
        elif isinstance(message["content"], list):
            out += [b["content"] for b in message["content"] if b["type"] == "tool_result"]
    return out


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 2) for a, b in itertools.pairwise(times)]


# ------------------------------------------------------------------ HTTP errors


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_429_waits_as_long_as_retry_after_says(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with model_api(monkeypatch, kind) as srv:
        srv.add_error(429, headers={"Retry-After": "3"})
        srv.add_reply(text="after the wait")
        async with create_worker(temporal_client, settings):
            info = await run_task(client, kind)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "after the wait"
    assert srv.outcomes == ["429", "200"]
    # the retry policy alone would have retried after 1 s
    [gap] = gaps(srv.request_times)
    assert 2.9 <= gap < 6, gap
    [turn] = await activity_runs(temporal_client, info.id)
    assert (turn.attempt, turn.last_failure_type) == (2, "ModelUnavailable")
    assert "HTTP 429" in turn.last_failure


@pytest.mark.parametrize(("kind", "statuses"), [("openai", [500, 503]), ("anthropic", [529, 500])])
async def test_5xx_are_retried_with_backoff_until_the_task_completes(
    kind: str,
    statuses: list[int],
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with model_api(monkeypatch, kind) as srv:
        for status in statuses:
            srv.add_error(status)
        srv.add_reply(text="third time lucky")
        async with create_worker(temporal_client, settings):
            info = await run_task(client, kind)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "third time lucky"
    assert srv.outcomes == [*map(str, statuses), "200"]
    first, second = gaps(srv.request_times)
    assert first >= 0.9 and second >= 1.9, (first, second)  # 1 s, then doubled
    [turn] = await activity_runs(temporal_client, info.id)
    assert turn.attempt == 3
    assert f"HTTP {statuses[-1]}" in turn.last_failure


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_401_fails_the_task_at_once_without_showing_the_key(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "sk-live-secret-4242424242424242"
    async with model_api(monkeypatch, kind, key=key) as srv:
        # real APIs echo part of a bad key; this one echoes all of it
        srv.add_error(401, body={"error": {"message": f"Incorrect API key provided: {key}"}})
        async with create_worker(temporal_client, settings):
            info = await run_task(client, kind)
    assert info.status == TaskStatus.FAILED
    assert info.error is not None
    assert "HTTP 401" in info.error and "authentication failed" in info.error
    assert f"check {KEY_ENV[kind]} on the worker" in info.error
    assert key not in info.error and "sk-live" not in info.error
    assert len(srv.requests) == 1  # no retry storm
    [turn] = await activity_runs(temporal_client, info.id)
    assert turn.attempt == 1


# ------------------------------------------------------------------ broken streams


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize(
    ("fault", "failure"),
    [
        ("reset", "connection lost during the response"),
        ("truncate", "the answer is incomplete"),
    ],
)
async def test_a_broken_stream_is_retried_and_only_the_full_answer_kept(
    kind: str,
    fault: Any,
    failure: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = "the complete answer, every single word of it"
    async with model_api(monkeypatch, kind) as srv:
        srv.add_fault(fault, after_chunks=4)  # a few words of the answer, then the fault
        srv.add_reply(text=answer)
        async with create_worker(temporal_client, settings):
            info = await run_task(client, kind)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == answer
    assert srv.outcomes == [fault, "200"]
    [turn] = await activity_runs(temporal_client, info.id)
    assert (turn.attempt, turn.last_failure_type) == (2, "ModelUnavailable")
    assert failure in turn.last_failure
    transcript = await client.get_transcript(info.id)
    assert [m.content for m in transcript if m.role == "assistant"] == [answer]


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_an_empty_answer_is_retried(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with model_api(monkeypatch, kind) as srv:
        srv.add_reply(text="")  # finishes normally, says nothing
        srv.add_reply(text="something to say")
        async with create_worker(temporal_client, settings):
            info = await run_task(client, kind)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "something to say"
    assert len(srv.requests) == 2
    [turn] = await activity_runs(temporal_client, info.id)
    assert turn.attempt == 2
    assert "the model returned an empty response" in turn.last_failure


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_a_hung_stream_is_abandoned_after_the_idle_timeout_and_retried(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with model_api(monkeypatch, kind) as srv:
        srv.add_fault("hang", after_chunks=2)  # two chunks, then nothing, connection open
        srv.add_reply(text="answer after the hang")
        async with worker_with(temporal_client, settings, model_idle_timeout=1.0):
            info = await run_task(client, kind, timeout=20)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "answer after the hang"
    assert srv.outcomes == ["hang", "200"]
    assert srv.disconnects == 1  # the worker closed the hung connection
    [turn] = await activity_runs(temporal_client, info.id)
    assert (turn.attempt, turn.last_failure_type) == (2, "ModelUnavailable")
    assert "no data from the model for 1s" in turn.last_failure
    # abandoned after ~1 s of silence, retried 1 s later: not after the 10-minute limit
    [gap] = gaps(srv.request_times)
    assert 1.9 <= gap < 5, gap


async def test_a_turn_that_streams_on_and_on_hits_the_turn_timeout(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with model_api(monkeypatch, "openai") as srv:
        srv.add_reply(text=" ".join(["word"] * 100), chunk_delay=0.1)  # ~10 s, never idle
        srv.add_reply(text="quick")
        options = {"model_idle_timeout": 1.0, "model_turn_timeout": 1.5}
        async with worker_with(temporal_client, settings, **options):
            info = await run_task(client, "openai", timeout=20)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "quick"
    assert srv.disconnects == 1
    [turn] = await activity_runs(temporal_client, info.id)
    assert turn.attempt == 2
    assert "the model turn took longer than 1.5s" in turn.last_failure


# ------------------------------------------------------------------ bad tool calls


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_malformed_tool_arguments_go_back_to_the_model_as_a_tool_error(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with model_api(monkeypatch, kind) as srv:
        srv.add_reply(tool_calls=[{"name": "grep", "arguments": '{"pattern": "def'}])
        srv.add_reply(text="sorry, fixed my JSON")
        async with create_worker(temporal_client, settings):
            info = await run_task(client, kind)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "sorry, fixed my JSON"
    [error] = tool_results(srv.requests[1])
    assert "the arguments were not valid JSON" in error
    runs = await activity_runs(temporal_client, info.id)
    assert [r.activity for r in runs] == ["model_turn", "model_turn"]  # grep never ran


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_tools_the_agent_lacks_are_refused_and_never_run(
    kind: str,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write = {"path": "marker.txt", "content": "should not exist"}
    async with model_api(monkeypatch, kind) as srv:
        srv.add_reply(
            tool_calls=[
                {"name": "write_file", "arguments": write},  # exists, but not for explore
                {"name": "launch_missiles", "arguments": {}},  # exists nowhere
            ]
        )
        srv.add_reply(text="understood")
        async with create_worker(temporal_client, settings):
            info = await run_task(client, kind, agent="explore")
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "understood"
    assert not (workspace / "marker.txt").exists()
    errors = tool_results(srv.requests[1])
    assert len(errors) == 2
    assert errors[0].startswith("unknown tool 'write_file'; available tools:")
    assert errors[1].startswith("unknown tool 'launch_missiles'; available tools:")
    assert "write_file" not in errors[0].split("available tools:")[1]
    runs = await activity_runs(temporal_client, info.id)
    assert [r.activity for r in runs] == ["model_turn", "model_turn"]
    offered = [t["function"]["name"] if "function" in t else t["name"] for t in _tools(srv)]
    assert "write_file" not in offered


def _tools(srv: FakeModelServer) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = srv.requests[0].get("tools", [])
    return tools


# ------------------------------------------------------------------ load-test chaos


async def test_random_5xx_failures_never_lose_or_repeat_a_turn(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (workspace / "a.py").write_text("def f(): pass\n")
    async with model_api(monkeypatch, "openai", fail_rate=0.5, seed=61) as srv:
        srv.add_reply(tool_calls=[{"name": "grep", "arguments": {"pattern": "def "}}])
        srv.add_reply(text="found f")
        async with create_worker(temporal_client, settings):
            info = await run_task(client, "openai")
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.result == "found f"
    assert info.turns == 2
    # this seed fails the first request of each turn; each retry got the queued reply
    assert srv.outcomes == ["500", "200", "503", "200"]
    [grep_result] = tool_results(srv.requests[-1])
    assert "a.py" in grep_result
    runs = await activity_runs(temporal_client, info.id)
    # grep reads only: the first turn ran it (once, in the attempt that was answered)
    assert [(r.activity, r.attempt, r.local) for r in runs] == [
        ("model_turn", 2, False),
        ("model_turn", 2, False),
    ]
