"""The public face of the package, pinned: a name that comes or goes is a decision."""

from __future__ import annotations

import durable_subagents

PUBLIC = {
    # the parent's side
    "SubagentClient", "SubagentTools", "connect_client", "Settings",
    # what tasks are and say
    "TaskInfo", "TaskStatus", "TaskEvent", "Message", "Usage",
    "AgentSpec", "PermissionRule", "ToolLimits",
    # a worker's and an agent's activity timeouts and retries
    "ActivityOptions", "ActivityConfig",
    # errors a caller handles (storage and encryption ones are in durable_subagents.errors)
    "SubagentError", "InvalidRequest", "PayloadTooLarge", "WrongTaskState",
    "UnknownCallId", "TaskNotFound", "TemporalUnavailable",
    # your own tools and workflows
    "tool", "ToolContext", "ToolError", "ToolRegistry", "start_subagent", "SubagentsPlugin",
    "__version__",
}  # fmt: skip


def test_the_public_names_are_pinned() -> None:
    assert set(durable_subagents.__all__) == PUBLIC


def test_every_public_name_resolves_to_its_definition() -> None:
    from durable_subagents import errors, tools
    from durable_subagents.client import SubagentClient
    from durable_subagents.workflows import start_subagent

    for name in PUBLIC:
        assert getattr(durable_subagents, name) is not None, name
    assert durable_subagents.SubagentClient is SubagentClient
    assert durable_subagents.tool is tools.tool
    assert durable_subagents.start_subagent is start_subagent
    assert durable_subagents.InvalidRequest is errors.InvalidRequest
    assert not hasattr(durable_subagents, "BlobError")  # in durable_subagents.errors
