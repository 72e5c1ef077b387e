"""The workflow runner that can run the library's own workflows outside the sandbox."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.workflow import _Definition


class LibraryOutsideSandbox(WorkflowRunner):
    """Runs the given workflow classes unsandboxed and every other through ``sandboxed``.

    Temporal's workflow sandbox re-checks every import and global of a workflow and
    enters its own interpreter state several times per activation (the payload
    visitor asks the workflow for each payload's serialization context); for
    ``SubagentWorkflow`` that was about a fifth of a worker's CPU per turn. The
    library's workflows are deterministic by construction and replay-tested, so they
    can run without it, while a user's workflows registered on the same worker keep
    the sandbox and its restrictions. Classes are matched by identity, never by
    name: a user's class cannot opt itself out.

    Args:
        sandboxed: The runner of every other workflow (the worker's sandbox).
        unsandboxed: The classes that run outside it.
    """

    def __init__(self, sandboxed: WorkflowRunner, unsandboxed: Collection[type]) -> None:
        self.sandboxed = sandboxed
        self.unsandboxed_classes = frozenset(unsandboxed)
        self._plain = UnsandboxedWorkflowRunner()

    def _runner(self, defn: _Definition) -> WorkflowRunner:
        return self._plain if defn.cls in self.unsandboxed_classes else self.sandboxed

    def prepare_workflow(self, defn: _Definition) -> None:
        """Prepare ``defn`` with the runner it runs on."""
        self._runner(defn).prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        """An instance of the workflow on the runner it runs on."""
        return self._runner(det.defn).create_instance(det)

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        """Pass the worker's failure exception types to both runners."""
        self.sandboxed.set_worker_level_failure_exception_types(types)
        self._plain.set_worker_level_failure_exception_types(types)
