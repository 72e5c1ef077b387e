"""Workflow definitions (deterministic; no I/O)."""

from durable_subagents.workflows._subagent import (
    MODEL_TURN_ACTIVITY,
    RUN_TOOL_ACTIVITY,
    SubagentWorkflow,
)

__all__ = ["MODEL_TURN_ACTIVITY", "RUN_TOOL_ACTIVITY", "SubagentWorkflow"]
