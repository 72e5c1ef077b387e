"""A workflow of a user's own that tells whether the workflow sandbox restricts it."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError


@workflow.defn
class SandboxProbeWorkflow:
    """Reads the wall clock, which the sandbox forbids; returns what happened."""

    @workflow.run
    async def run(self) -> str:
        try:
            datetime.now()
        except RestrictedWorkflowAccessError as err:
            return f"restricted: {err}"
        return "unrestricted"
