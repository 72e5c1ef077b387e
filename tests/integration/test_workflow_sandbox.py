"""``subagent_workflow_sandbox``: the library's workflows out of the sandbox, yours in it."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer
from durable_subagents.worker import SubagentsPlugin, create_worker

from ..helpers import CEILING, eventually
from ..helpers.tasks import script
from ..probe_workflows import SandboxProbeWorkflow

CEILING_TD = timedelta(seconds=CEILING)

SEEN: list[tuple[str, bool]] = []
"""``(workflow type, ran in the sandbox)`` of every run the interceptor saw start."""


class _Recorder(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        SEEN.append((workflow.info().workflow_type, workflow.unsafe.in_sandbox()))
        return await super().execute_workflow(input)


class SandboxSeen(Interceptor):
    """Records, for each workflow run, whether its code runs in the sandbox."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _Recorder


async def run_both(temporal: Client, settings: Settings, workspace: Path) -> str:
    """A subagent task with a tool call, then the user's probe; the probe's answer."""
    SEEN.clear()
    (workspace / "notes.txt").write_text("the answer is 42\n")
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    model = script(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"text": "Found: {last_tool_result}"},
    )
    task_id = await client.spawn_task("explore", "What is the answer?", model=model)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    assert "the answer is 42" in (info.result or "")
    return await temporal.execute_workflow(
        SandboxProbeWorkflow.run,
        id=f"probe-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        execution_timeout=CEILING_TD,
    )


@pytest.mark.parametrize("sandboxed", [True, False], ids=["default", "library-unsandboxed"])
async def test_only_the_library_workflow_leaves_the_sandbox(
    temporal_client: Client, settings: Settings, workspace: Path, sandboxed: bool
) -> None:
    own = Settings.model_validate({**settings.model_dump(), "subagent_workflow_sandbox": sandboxed})
    worker = create_worker(
        temporal_client, own, workflows=[SandboxProbeWorkflow], interceptors=[SandboxSeen()]
    )
    async with worker:
        probe = await run_both(temporal_client, own, workspace)
    # The user's workflow is restricted either way: the wall clock is refused.
    assert probe.startswith("restricted:"), probe
    assert "datetime.datetime.now" in probe
    assert ("SandboxProbeWorkflow", True) in SEEN
    assert ("SubagentWorkflow", sandboxed) in SEEN
    assert ("SubagentWorkflow", not sandboxed) not in SEEN


async def test_create_worker_parameter_wins_over_the_settings(
    temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    worker = create_worker(
        temporal_client,
        settings,
        workflows=[SandboxProbeWorkflow],
        interceptors=[SandboxSeen()],
        subagent_workflow_sandbox=False,
    )
    async with worker:
        probe = await run_both(temporal_client, settings, workspace)
    assert probe.startswith("restricted:"), probe
    assert sorted(set(SEEN)) == [("SandboxProbeWorkflow", True), ("SubagentWorkflow", False)]


async def test_the_plugin_follows_the_setting(
    dev_server: DevServer, settings: Settings, workspace: Path
) -> None:
    own = Settings.model_validate({**settings.model_dump(), "subagent_workflow_sandbox": False})
    temporal = await Client.connect(
        dev_server.address, namespace=dev_server.namespace, plugins=[SubagentsPlugin(own)]
    )
    worker = Worker(
        temporal,
        task_queue=own.task_queue,
        workflows=[SandboxProbeWorkflow],
        interceptors=[SandboxSeen()],
    )
    async with worker:
        probe = await run_both(temporal, own, workspace)
    assert probe.startswith("restricted:"), probe
    assert sorted(set(SEEN)) == [("SandboxProbeWorkflow", True), ("SubagentWorkflow", False)]


def test_the_setting_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().subagent_workflow_sandbox is True
    monkeypatch.setenv("SUBAGENTS_SUBAGENT_WORKFLOW_SANDBOX", "false")
    assert Settings().subagent_workflow_sandbox is False


PROBE = '''
"""A workflow module planted in the library's workflow package by a test."""

import datetime
import os
import random

from temporalio import workflow


@workflow.defn(name="PlantedProbe{tag}")
class PlantedProbe:
    @workflow.run
    async def run(self, what: str) -> str:
        if what == "clock":
            return str(datetime.datetime.now())
        if what == "environment":
            return os.environ.get("HOME", "")
        return str(random.random())
'''


async def test_the_sandbox_checks_the_librarys_own_workflow_code(
    temporal_client: Client, settings: Settings
) -> None:
    """Wall-clock time, the environment and randomness, planted in a module of the
    library's workflow package, are each refused by the sandbox (the package is checked
    like any workflow code, never passed through)."""
    import importlib

    import durable_subagents.workflows as package

    tag = uuid.uuid4().hex[:8]
    path = Path(package.__path__[0]) / f"_planted_{tag}.py"
    path.write_text(PROBE.replace("{tag}", tag))
    try:
        module = importlib.import_module(f"durable_subagents.workflows._planted_{tag}")
        async with create_worker(temporal_client, settings, workflows=[module.PlantedProbe]):
            for what, refused in [
                ("clock", "datetime.datetime.now"),
                ("environment", "os.environ"),
                ("randomness", "random.random"),
            ]:
                handle = await temporal_client.start_workflow(
                    f"PlantedProbe{tag}",
                    what,
                    id=f"planted-{tag}-{what}",
                    task_queue=settings.task_queue,
                )
                failure = await workflow_task_failure(handle)
                assert "RestrictedWorkflowAccessError" in failure, failure
                assert refused in failure, failure
                await handle.terminate()
    finally:
        path.unlink()


async def workflow_task_failure(handle: Any) -> str:
    """The first workflow task failure of a run (its type and message), once there is one."""
    from temporalio.api.enums.v1 import EventType

    async def failed() -> str | None:
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                failure = event.workflow_task_failed_event_attributes.failure
                kind = failure.application_failure_info.type
                return f"{kind}: {failure.message}"
        return None

    return await eventually(failed, "a workflow task failure")


async def test_a_run_ends_only_once_what_its_handlers_started_has_finished(
    temporal_client: Client, settings: Settings
) -> None:
    """A routed decision in flight when the run would close is not lost: the run waits."""
    from ..probe_workflows import BackgroundProbeWorkflow

    async with create_worker(temporal_client, settings, workflows=[BackgroundProbeWorkflow]):
        handle = await temporal_client.start_workflow(
            BackgroundProbeWorkflow.run,
            id=f"bg-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        await handle.signal(BackgroundProbeWorkflow.route, "decision")
        assert await handle.result() == ["routed decision"]
