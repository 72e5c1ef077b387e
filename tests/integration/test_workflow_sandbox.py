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

from ..helpers import CEILING
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
