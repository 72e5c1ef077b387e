"""A cancel sent while the worker is dead: nothing runs again, and the task ends cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.activities import SubagentActivities
from durable_subagents.config import Settings
from durable_subagents.testing import FakeOpenAIServer
from durable_subagents.wire._payloads import tool_queue
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.providers import fake_provider
from ..helpers.tasks import script


@contextlib.asynccontextmanager
async def worker_killed_after(
    settings: Settings, workspace: Path, started: Callable[[], Awaitable[object]]
) -> AsyncIterator[None]:
    """Run ``subagents worker`` in a subprocess; SIGKILL it once ``started`` returned."""
    env = {**os.environ, "SUBAGENTS_BLOB_DIR": str(settings.resolved_blob_dir)}
    argv = [sys.executable, "-m", "durable_subagents", "worker", "--address", settings.address]
    argv += ["--task-queue", settings.task_queue, "--workspace", str(workspace)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
        await started()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


async def retry_failure(
    temporal_client: Client, settings: Settings, workspace: Path, task_id: str
) -> str:
    """The message of the first failed activity attempt, with only activities polling.

    The server retries the lost activity after its heartbeat timeout, before any
    workflow worker has seen the cancel request.
    """
    activities = SubagentActivities(settings.blob_store(), workspace_root=workspace)
    handle = temporal_client.get_workflow_handle(task_id)
    async with (
        Worker(temporal_client, task_queue=settings.task_queue, activities=activities.activities),
        Worker(
            temporal_client,
            task_queue=tool_queue(settings.task_queue),
            activities=activities.activities,
        ),
    ):
        for _ in range(300):
            async for e in handle.fetch_history_events():
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
                    return e.activity_task_failed_event_attributes.failure.message
            await asyncio.sleep(0.1)
    return ""


async def test_a_retried_tool_call_checks_for_a_cancel_first(
    client: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    sleep = unique_sleep(3501)
    # The first attempt sleeps until the worker dies; once the cancel is sent, the command
    # would end at once, and what it wrote would land.
    command = f"echo run >> attempts.txt; [ -f cancel-sent ] || {sleep}"
    model = script({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]})

    async def running() -> None:
        await wait_for(lambda: bool(processes_matching(sleep)), what="the command")

    async with worker_killed_after(settings, workspace, running):
        task_id = await client.spawn_task("general", "x", model=model)
    await client.cancel_task(task_id, wait=False)
    (workspace / "cancel-sent").touch()

    failure = await retry_failure(temporal_client, settings, workspace, task_id)
    assert "the task was cancelled; not running the tool call" in failure
    # the retry ran no command, and the killed attempt's write died with it
    assert not (workspace / "attempts.txt").exists()
    assert not processes_matching(sleep)

    async with create_worker(temporal_client, settings):
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.CANCELLED


async def test_a_retried_model_call_checks_for_a_cancel_first(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with fake_provider(monkeypatch, FakeOpenAIServer(), "OPENAI") as srv:
        srv.add_reply(text="never finished", hang=True)
        srv.add_reply(text="must not be asked for")

        async def hanging() -> None:
            await asyncio.wait_for(srv.hanging.wait(), CEILING)

        async with worker_killed_after(settings, workspace, hanging):
            task_id = await client.spawn_task("explore", "x", model="openai:gpt-test")
        await client.cancel_task(task_id, wait=False)

        # the retry must see the cancel before it calls the model again
        failure = await retry_failure(temporal_client, settings, workspace, task_id)
        assert "the task was cancelled; not calling the model" in failure
        assert len(srv.requests) == 1

        async with create_worker(temporal_client, settings):
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert info.status == TaskStatus.CANCELLED and len(srv.requests) == 1
