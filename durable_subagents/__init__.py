"""Durable LLM subagents on Temporal.

Spawn a subagent and get its id at once; check it, wait on it, cancel it. Each task
is a Temporal workflow, so it survives crashes of workers and of the parent.
"""

from durable_subagents.agents import AgentSpec, PermissionRule, ToolLimits
from durable_subagents.client import SubagentClient
from durable_subagents.errors import (
    BlobCorrupt,
    BlobError,
    BlobNotFound,
    BlobStoreUnavailable,
    InvalidRequest,
    PayloadCorrupt,
    PayloadEncryptionError,
    PayloadKeyMissing,
    PayloadTooLarge,
    SubagentError,
    TaskNotFound,
    TemporalUnavailable,
    UnknownCallId,
    WrongTaskState,
)
from durable_subagents.types import Message, TaskEvent, TaskInfo, TaskStatus, Usage

__all__ = [
    "AgentSpec",
    "BlobCorrupt",
    "BlobError",
    "BlobNotFound",
    "BlobStoreUnavailable",
    "InvalidRequest",
    "Message",
    "PayloadCorrupt",
    "PayloadEncryptionError",
    "PayloadKeyMissing",
    "PayloadTooLarge",
    "PermissionRule",
    "SubagentClient",
    "SubagentError",
    "TaskEvent",
    "TaskInfo",
    "TaskNotFound",
    "TaskStatus",
    "TemporalUnavailable",
    "ToolLimits",
    "UnknownCallId",
    "Usage",
    "WrongTaskState",
]
