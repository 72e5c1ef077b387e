"""Durable LLM subagents on Temporal.

Spawn a subagent and get its id at once; check it, wait on it, cancel it. Each task
is a Temporal workflow, so it survives crashes of workers and of the parent.
"""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from durable_subagents._connect import connect_client
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

if TYPE_CHECKING:
    from durable_subagents.worker import SubagentsPlugin

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
    "SubagentsPlugin",
    "TaskEvent",
    "TaskInfo",
    "TaskNotFound",
    "TaskStatus",
    "TemporalUnavailable",
    "ToolLimits",
    "UnknownCallId",
    "Usage",
    "WrongTaskState",
    "__version__",
    "connect_client",
]

try:
    __version__ = version("durable-subagents")
    """The installed distribution's version (``subagents --version`` prints it)."""
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    # The worker side (activities, tools, workflow code) is imported only when asked for.
    if name == "SubagentsPlugin":
        from durable_subagents.worker import SubagentsPlugin

        return SubagentsPlugin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
