"""Workflow definitions (deterministic; no I/O), and subagents as child workflows."""

from durable_subagents.wire._payloads import MODEL_TURN_ACTIVITY, RUN_TOOL_ACTIVITY
from durable_subagents.workflows._notify import NotifyWorkflow
from durable_subagents.workflows._start_subagent import start_subagent
from durable_subagents.workflows._subagent import SubagentWorkflow

__all__ = [
    "MODEL_TURN_ACTIVITY",
    "RUN_TOOL_ACTIVITY",
    "NotifyWorkflow",
    "SubagentWorkflow",
    "start_subagent",
]
