"""A workflow of a user's own that tells whether the workflow sandbox restricts it."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError

from durable_subagents.workflows._background import Background


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


@workflow.defn
class BackgroundProbeWorkflow:
    """A handler starts work and the run ends at once: the run waits for that work.

    ``SubagentWorkflow`` routes decisions to its children and reports pauses to its
    parent this way (``Background``); here the work is a timer and a note.
    """

    def __init__(self) -> None:
        self.background = Background()
        self.notes: list[str] = []
        self.go = False

    @workflow.signal
    def route(self, what: str) -> None:
        async def later() -> None:
            await workflow.sleep(0.3)
            self.notes.append(f"routed {what}")

        self.background.start(later(), "routing")
        self.go = True

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: self.go)
        await self.background.settle()
        return self.notes
