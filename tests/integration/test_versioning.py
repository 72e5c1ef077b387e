"""Versioned upgrades: a run stays on the build it started on, new tasks go to the current one.

Two in-process workers of one Worker Deployment (build IDs v1 and v2) on a fresh task
queue; the versions are made current with the very commands ``subagents dev`` prints.
Which build ran a step is read from the history: every ``WorkflowTaskCompleted`` names
its worker's deployment version, every ``ActivityTaskStarted`` its worker's identity.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rich.console import Console
from temporalio.api.enums.v1 import EventType, VersioningBehavior
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.cli._dev_run import run_dev
from durable_subagents.config import Settings
from durable_subagents.testing import free_port, temporal_binary
from durable_subagents.worker import create_worker
from durable_subagents.worker._deployment import (
    current_build_id,
    describe_version_command,
    set_current_command,
)

from ..helpers import CEILING
from ..helpers.tasks import TEST_MODELS, script

CAREFUL = AgentSpec(
    name="careful",
    tools=["bash", "read_file"],
    permissions=[PermissionRule(tool="bash", action="ask")],
    may_spawn=True,
)
"""Asks before bash: a task pauses on v1 until the test approves, after the upgrade."""

WAIT = {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]}
READ = {"tool_calls": [{"name": "read_file", "arguments": {"path": "note.txt"}}]}


def bash(command: str) -> dict:  # type: ignore[type-arg]
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def spawn(agent: str, prompt: str, model: str) -> dict:  # type: ignore[type-arg]
    arguments = {"agent": agent, "prompt": prompt, "model": model}
    return {"tool_calls": [{"name": "spawn_subagent", "arguments": arguments}]}


@dataclass
class Run:
    """What ran one workflow run, from its history."""

    builds: list[str] = field(default_factory=list)
    """Build ID of each completed workflow task, in order."""
    activity_workers: list[str] = field(default_factory=list)
    """Identity of the worker that started each activity, in order."""
    continued_as: str | None = None
    """The next run's id, if this one continued as new."""


async def run_of(temporal: Client, workflow_id: str, run_id: str) -> Run:
    run = Run()
    handle = temporal.get_workflow_handle(workflow_id, run_id=run_id)
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            attrs = event.workflow_task_completed_event_attributes
            run.builds.append(attrs.deployment_version.build_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            run.activity_workers.append(event.activity_task_started_event_attributes.identity)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            attrs_can = event.workflow_execution_continued_as_new_event_attributes
            run.continued_as = attrs_can.new_execution_run_id
    return run


async def run_id(temporal: Client, workflow_id: str) -> str:
    """The latest run's id."""
    return (await temporal.get_workflow_handle(workflow_id).describe()).run_id


async def temporal_cli(command: str, address: str) -> str:
    """Run a printed ``temporal ...`` command with the bundled binary; its stdout."""
    argv = shlex.split(command)
    assert argv[0] == "temporal" and f"--address {address}" in command, command
    proc = await asyncio.create_subprocess_exec(
        str(temporal_binary()), *argv[1:],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(err.decode() or out.decode())
    return out.decode()


async def set_current(version: WorkerDeploymentVersion, address: str) -> None:
    """The README's ``set-current-version``; a version exists once its worker has polled."""
    deadline = time.monotonic() + CEILING
    while True:
        try:
            await temporal_cli(set_current_command(version, address), address)
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


async def drainage(version: WorkerDeploymentVersion, address: str) -> str:
    out = await temporal_cli(describe_version_command(version, address), address)
    [status] = [line.split()[1] for line in out.splitlines() if "DrainageStatus" in line]
    return status


async def until_drainage(version: WorkerDeploymentVersion, address: str, status: str) -> None:
    deadline = time.monotonic() + CEILING
    while (seen := await drainage(version, address)) != status:
        assert time.monotonic() < deadline, f"{version.build_id} is still {seen}, not {status}"
        await asyncio.sleep(0.5)


@asynccontextmanager
async def versioned_worker(
    temporal: Client, settings: Settings, version: WorkerDeploymentVersion
) -> AsyncIterator[None]:
    worker = create_worker(temporal, settings, deployment=version, identity=version.build_id)
    async with worker:
        yield


LONG = AgentSpec(
    name="long",
    tools=["bash", "read_file"],
    permissions=[
        PermissionRule(tool="bash", action="allow"),
        PermissionRule(tool="bash", pattern="echo go", action="ask"),
    ],
)
"""Asks before ``echo go`` only: a task waits on v1 until the upgrade, then runs on."""


@pytest.fixture
def careful(client: SubagentClient) -> SubagentClient:
    client.agents["careful"] = CAREFUL
    client.agents["long"] = LONG
    return client


@pytest.fixture
def versions() -> tuple[WorkerDeploymentVersion, WorkerDeploymentVersion]:
    name = f"subagents-test-{uuid.uuid4().hex[:8]}"
    return WorkerDeploymentVersion(name, "v1"), WorkerDeploymentVersion(name, "v2")


async def test_an_upgrade_leaves_running_tasks_on_their_build_and_starts_new_ones_on_the_new(
    careful: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    versions: tuple[WorkerDeploymentVersion, WorkerDeploymentVersion],
) -> None:
    v1, v2 = versions
    address = settings.address
    old_model = script(
        bash("echo approved > old.txt"),  # pauses on v1; approved after the upgrade
        spawn("general", "help out", script({"text": "child answer"})),
        WAIT,
        {"text": "old done: {last_tool_result}"},
        {"text": "follow-up answer"},  # the follow-up run
    )
    async with versioned_worker(temporal_client, settings, v1):
        await set_current(v1, address)
        old = await careful.spawn_task("careful", "the old task", model=old_model)
        paused = await careful.check_task(old, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED, paused.error
        first_run = await run_id(temporal_client, old)

        async with versioned_worker(temporal_client, settings, v2):
            await set_current(v2, address)
            assert await current_build_id(temporal_client, v1.deployment_name) == "v2"
            await until_drainage(v1, address, "draining")  # the paused task holds v1

            (workspace / "note.txt").write_text("hello\n")
            new = await careful.spawn_task(
                "careful", "the new task", model=script(READ, {"text": "new done"})
            )
            new_info = await careful.check_task(new, wait=True, timeout=CEILING)
            assert new_info.status == TaskStatus.COMPLETED, new_info.error

            await careful.approve(old)
            done = await careful.check_task(
                old, wait=True, timeout=CEILING, after_pause=paused.pause_id
            )
            assert done.status == TaskStatus.COMPLETED, done.error
            assert done.result is not None and "child answer" in done.result
            assert (workspace / "old.txt").read_text() == "approved\n"

            # v1 ran every step of the old run, those after the upgrade included ...
            old_run = await run_of(temporal_client, old, first_run)
            assert set(old_run.builds) == {"v1"}, old_run.builds
            assert set(old_run.activity_workers) == {"v1"}, old_run.activity_workers
            assert len(old_run.activity_workers) >= 4  # bash and three model turns
            description = await temporal_client.get_workflow_handle(
                old, run_id=first_run
            ).describe()
            info = description.raw_description.workflow_execution_info.versioning_info
            assert info.behavior == VersioningBehavior.VERSIONING_BEHAVIOR_PINNED
            assert info.deployment_version.build_id == "v1"
            # ... and of the child it started after the upgrade: children start pinned
            # to their parent's version
            transcript = await careful.get_transcript(old)
            [spawned] = [m for m in transcript if m.tool_name == "spawn_subagent"]
            child = json.loads(spawned.content)["task_id"]
            child_run = await run_of(temporal_client, child, await run_id(temporal_client, child))
            assert set(child_run.builds) == {"v1"} and set(child_run.activity_workers) == {"v1"}

            # the new task ran on v2 only
            new_run = await run_of(temporal_client, new, await run_id(temporal_client, new))
            assert set(new_run.builds) == {"v2"} and set(new_run.activity_workers) == {"v2"}

            # a follow-up to the old task is a new run: it starts on the current version
            await careful.send_input(old, "and then?")
            followed = await careful.check_task(old, wait=True, timeout=CEILING)
            assert followed.status == TaskStatus.COMPLETED, followed.error
            assert followed.result == "follow-up answer"
            latest = await run_id(temporal_client, old)
            assert latest != first_run
            follow_up = await run_of(temporal_client, old, latest)
            assert set(follow_up.builds) == {"v2"}, follow_up.builds

            # nothing is pinned to v1 any more: its workers may stop
            await until_drainage(v1, address, "drained")


async def test_a_long_task_continues_as_new_on_the_current_version(
    careful: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    versions: tuple[WorkerDeploymentVersion, WorkerDeploymentVersion],
) -> None:
    """A run keeps its version, but the run it continues as starts on the current one.

    Temporal's default would keep the next run on v1 too: a task that lives long enough
    to continue as new would hold v1 up for as long as it lives.
    """
    v1, v2 = versions
    (workspace / "note.txt").write_text("hello\n")
    # conftest's server suggests continue-as-new at 600 events: ~14 turns of 40 reads,
    # each a local activity's marker (with a token budget the workflow runs them itself)
    busy = {"tool_calls": READ["tool_calls"] * 40}
    model = script(bash("echo go"), *[busy] * 16, {"text": "long done"})
    async with versioned_worker(temporal_client, settings, v1):
        await set_current(v1, settings.address)
        task_id = await careful.spawn_task("long", "a long task", model=model, token_budget=10**9)
        paused = await careful.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED, paused.error
        first_run = await run_id(temporal_client, task_id)
        async with versioned_worker(temporal_client, settings, v2):
            await set_current(v2, settings.address)
            await careful.approve(task_id)
            done = await careful.check_task(task_id, wait=True, timeout=CEILING)
            assert done.status == TaskStatus.COMPLETED, done.error
            assert done.result == "long done" and done.turns == 18

    runs = [await run_of(temporal_client, task_id, first_run)]
    while runs[-1].continued_as is not None:
        runs.append(await run_of(temporal_client, task_id, runs[-1].continued_as))
    assert len(runs) >= 2, "the task never continued as new"
    # the first run stayed on v1 to its end, well after v2 became current ...
    assert set(runs[0].builds) == {"v1"} and len(runs[0].builds) >= 10
    # ... and every later run started and stayed on v2
    for later in runs[1:]:
        assert set(later.builds) == {"v2"}, later.builds
        assert set(later.activity_workers) == {"v2"}, later.activity_workers


async def test_dev_makes_its_version_current_and_prints_the_upgrade(tmp_path: Path) -> None:
    out = io.StringIO()
    port = free_port()
    address = f"127.0.0.1:{port}"
    settings = Settings(
        data_dir=tmp_path / "data",
        task_queue="versioned-dev",
        workspace=tmp_path,
        deployment_name="app",
        build_id="v1",
    )
    task = asyncio.create_task(
        run_dev(
            settings=settings,
            port=port,
            ui_port=free_port(),
            db=None,
            retention=None,
            workspace=None,
            console=Console(file=out, width=80),
        )
    )
    try:
        deadline = time.monotonic() + CEILING
        while "Ctrl-C to stop" not in out.getvalue():
            assert not task.done() and time.monotonic() < deadline, out.getvalue()
            await asyncio.sleep(0.05)
        text = out.getvalue()
        assert "Deployment:   app, build ID v1, current (made current" in text
        lines = text.splitlines()  # each command whole on its line, however narrow
        steps = [
            f"subagents worker --address {address} --task-queue versioned-dev "
            "--deployment-name app --build-id NEW_BUILD_ID",
            f"temporal worker deployment set-current-version --address {address} "
            "--deployment-name app --build-id NEW_BUILD_ID --yes",
            f"temporal worker deployment describe-version --address {address} "
            "--deployment-name app --build-id v1",
        ]
        at = [next(i for i, line in enumerate(lines) if line.strip() == s) for s in steps]
        assert at == sorted(at), text
        assert "Then stop the v1 workers." in text
        client = await Client.connect(address)
        assert await current_build_id(client, "app") == "v1"
        # the printed command runs as printed
        described = await temporal_cli(steps[2], address)
        assert re.search(r"BuildID\s+v1\n", described) and "CurrentSinceTime" in described
    finally:
        task.cancel()
        await asyncio.wait_for(task, 15)


async def test_the_worker_command_says_how_to_make_its_version_current(
    careful: SubagentClient,
    settings: Settings,
    versions: tuple[WorkerDeploymentVersion, WorkerDeploymentVersion],
) -> None:
    v1, _ = versions
    assert settings.workspace is not None
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SUBAGENTS_", "TEMPORAL_"))},
        **TEST_MODELS,
        "CI": "true",
        "TEMPORAL_ADDRESS": settings.address,
        "SUBAGENTS_TASK_QUEUE": settings.task_queue,
        "SUBAGENTS_DATA_DIR": str(settings.data_dir),
        "SUBAGENTS_BLOB_DIR": str(settings.resolved_blob_dir),
        "SUBAGENTS_DEPLOYMENT_NAME": v1.deployment_name,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "durable_subagents", "worker", "--build-id", "v1",
        "--workspace", str(settings.workspace),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    try:
        out = ""
        while "To make it current" not in out:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, out + (await proc.stderr.read()).decode()
            out += line.decode()
        command = (await asyncio.wait_for(proc.stdout.readline(), 5)).decode().strip()
        flat = " ".join(out.split())
        assert f"deployment {v1.deployment_name} build ID v1: not current" in flat
        assert "new tasks go to unversioned workers" in flat
        assert command == set_current_command(v1, settings.address)
        await temporal_cli(command, settings.address)  # as printed, it works
        task_id = await careful.spawn_task("careful", "hi", model=script({"text": "on v1"}))
        info = await careful.check_task(task_id, wait=True, timeout=CEILING)
        assert info.status == TaskStatus.COMPLETED and info.result == "on v1", info.error
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 15) == 128 + signal.SIGTERM


def test_the_worker_command_refuses_a_half_given_version_before_connecting(
    tmp_path: Path,
) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SUBAGENTS_BUILD_ID": "v2"}
    result = subprocess.run(
        [sys.executable, "-m", "durable_subagents", "worker", "--address", "127.0.0.1:1"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1, result
    flat = " ".join(result.stderr.split())
    assert "build ID 'v2' without a deployment name: add --deployment-name NAME" in flat
    assert "SUBAGENTS_DEPLOYMENT_NAME" in flat and "Traceback" not in flat
    assert "cannot reach" not in flat  # it did not try to connect
