"""Only the models a worker allows, on a real worker and dev server.

A worker's model turns go to the fake OpenAI server, which counts what it was asked: a
refused model never reaches it. The suite's workers run any model and the scripted one
(``TEST_MODELS``); these tests give theirs less.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from durable_subagents import InvalidRequest, SubagentClient, SubagentsPlugin, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.errors import ModelNotAllowed
from durable_subagents.testing import FakeOpenAIServer, free_port
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.cli import arun
from ..helpers.providers import fake_provider
from ..helpers.tasks import script


async def failure_type(temporal: Client, task_id: str) -> str:
    """The type of the error the task's workflow failed with."""
    handle = temporal.get_workflow_handle(task_id)
    async for e in handle.fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            return e.activity_task_failed_event_attributes.failure.application_failure_info.type
    return ""


async def test_a_worker_runs_the_models_its_patterns_allow_and_refuses_the_others(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker_settings = settings.model_copy(
        update={"model": "openai:gpt-4.1-mini", "models": "openai:gpt-4.1*"}
    )
    async with fake_provider(monkeypatch, FakeOpenAIServer(), "OPENAI") as srv:
        srv.add_reply(text="allowed")
        async with create_worker(temporal_client, worker_settings):
            refused = await client.spawn_task("explore", "go", model="openai:gpt-5")
            info = await client.check_task(refused, wait=True, timeout=CEILING)
            assert srv.requests == []  # never sent: the worker would pay for it
            allowed = await client.spawn_task("explore", "go", model="openai:gpt-4.1-nano")
            done = await client.check_task(allowed, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.FAILED
    assert info.error is not None
    assert "model 'openai:gpt-5' is not allowed: SUBAGENTS_MODELS allows openai:gpt-4.1*" in (
        info.error
    )
    assert await failure_type(temporal_client, refused) == "ModelNotAllowed"
    assert done.status == TaskStatus.COMPLETED, done.error
    assert done.result == "allowed"
    [request] = srv.requests
    assert request["model"] == "gpt-4.1-nano"


async def test_the_scripted_model_runs_only_on_a_worker_that_enables_it(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker_settings = settings.model_copy(
        update={"model": "openai:gpt-4.1-mini", "models": "*", "allow_scripted": False}
    )
    async with (
        fake_provider(monkeypatch, FakeOpenAIServer(), "OPENAI"),
        create_worker(temporal_client, worker_settings),
    ):
        task_id = await client.spawn_task("explore", "go", model=script({"text": "free"}))
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.FAILED
    assert "the offline scripted model runs only where it is enabled" in (info.error or "")
    assert "free" not in (info.error or "")
    assert await failure_type(temporal_client, task_id) == "ModelNotAllowed"


async def test_a_client_told_the_workers_models_refuses_another_before_it_starts(
    temporal_client: Client, settings: Settings, tmp_path: Path
) -> None:
    told = settings.model_copy(update={"models": "anthropic:*", "allow_scripted": False})
    client = await SubagentClient.connect(settings=told, agents_dir=tmp_path)
    with pytest.raises(ModelNotAllowed, match="SUBAGENTS_MODELS allows anthropic:\\*"):
        await client.spawn_task("explore", "go", model="openai:gpt-5", task_id="refused-1")
    with pytest.raises(ModelNotAllowed, match="runs only where it is enabled"):
        await client.spawn_task("explore", "go", model="scripted", task_id="refused-2")
    for task_id in ("refused-1", "refused-2"):
        assert [t async for t in temporal_client.list_workflows(f"WorkflowId = '{task_id}'")] == []


async def test_a_worker_without_a_model_it_can_run_refuses_to_start_in_one_line(
    env: dict[str, str],
) -> None:
    bare = {**env, "SUBAGENTS_ALLOW_SCRIPTED": "false", "SUBAGENTS_MODELS": ""}
    result = await arun("worker", env=bare)
    assert result.code != 0
    assert result.err.strip().splitlines() == [
        "error: this worker has no model: set SUBAGENTS_MODEL (for example "
        "openai:gpt-4.1-mini or anthropic:claude-haiku-4-5), or SUBAGENTS_ALLOW_SCRIPTED=true "
        "to serve the offline scripted model"
    ]
    result = await arun("dev", "--port", str(free_port()), env={**bare, "SUBAGENTS_MODEL": "foo"})
    assert result.code != 0
    [line] = result.err.strip().splitlines()
    assert line.startswith("error: SUBAGENTS_MODEL=foo: unknown model 'foo'"), line
    assert "ready" not in result.out
    outside = {
        "SUBAGENTS_MODEL": "openai:gpt-5",
        "OPENAI_API_KEY": "k",
        "SUBAGENTS_MODELS": "anthropic:*",
    }
    result = await arun("demo", "--port", str(free_port()), env={**bare, **outside})
    assert result.code != 0
    assert result.err.strip().splitlines() == [
        "error: SUBAGENTS_MODEL=openai:gpt-5 is not among SUBAGENTS_MODELS (anthropic:*): add "
        "it there, or change SUBAGENTS_MODEL"
    ]


async def test_a_plugins_worker_without_a_model_it_can_run_is_refused(
    temporal_client: Client, settings: Settings
) -> None:
    bare = settings.model_copy(update={"model": None, "allow_scripted": False})
    with pytest.raises(InvalidRequest, match=r"^this worker has no model: set SUBAGENTS_MODEL"):
        Worker(temporal_client, task_queue=settings.task_queue, plugins=[SubagentsPlugin(bare)])
    tools_only = bare.model_copy(update={"worker_role": "tools"})
    create_worker(temporal_client, tools_only)  # runs no model: not checked
