"""Durable LLM subagents on Temporal.

Spawn a subagent and get its id at once; check it, wait on it, cancel it. Each task
is a Temporal workflow, so it survives crashes of workers and of the parent.
"""

import importlib
from typing import TYPE_CHECKING, Any

from durable_subagents.errors import (
    InvalidRequest,
    PayloadTooLarge,
    SubagentError,
    TaskNotFound,
    TemporalUnavailable,
    UnknownCallId,
    WrongTaskState,
)

if TYPE_CHECKING:
    from durable_subagents.agents import (
        ActivityConfig,
        ActivityOptions,
        AgentSpec,
        PermissionRule,
        ToolLimits,
    )
    from durable_subagents.client import SubagentClient, SubagentTools
    from durable_subagents.config import Settings
    from durable_subagents.connection._connect import connect_client
    from durable_subagents.tools import ToolContext, ToolError, ToolRegistry, tool
    from durable_subagents.types import Message, TaskEvent, TaskInfo, TaskStatus, Usage
    from durable_subagents.worker import SubagentsPlugin
    from durable_subagents.workflows import start_subagent

    __version__: str
    """The installed distribution's version (``subagents --version`` prints it)."""

__all__ = [
    "ActivityConfig",
    "ActivityOptions",
    "AgentSpec",
    "InvalidRequest",
    "Message",
    "PayloadTooLarge",
    "PermissionRule",
    "Settings",
    "SubagentClient",
    "SubagentError",
    "SubagentTools",
    "SubagentsPlugin",
    "TaskEvent",
    "TaskInfo",
    "TaskNotFound",
    "TaskStatus",
    "TemporalUnavailable",
    "ToolContext",
    "ToolError",
    "ToolLimits",
    "ToolRegistry",
    "UnknownCallId",
    "Usage",
    "WrongTaskState",
    "__version__",
    "connect_client",
    "start_subagent",
    "tool",
]
"""The public face. Storage and encryption errors (``BlobError``, ``PayloadCorrupt``...)
are in ``durable_subagents.errors``; the roles' own names in their packages."""

_LAZY = {
    "connect_client": "durable_subagents.connection._connect",
    "ActivityConfig": "durable_subagents.agents",
    "ActivityOptions": "durable_subagents.agents",
    "AgentSpec": "durable_subagents.agents",
    "PermissionRule": "durable_subagents.agents",
    "ToolLimits": "durable_subagents.agents",
    "SubagentClient": "durable_subagents.client",
    "SubagentTools": "durable_subagents.client",
    "Settings": "durable_subagents.config",
    "tool": "durable_subagents.tools",
    "ToolContext": "durable_subagents.tools",
    "ToolError": "durable_subagents.tools",
    "ToolRegistry": "durable_subagents.tools",
    "start_subagent": "durable_subagents.workflows",
    "Message": "durable_subagents.types",
    "TaskEvent": "durable_subagents.types",
    "TaskInfo": "durable_subagents.types",
    "TaskStatus": "durable_subagents.types",
    "Usage": "durable_subagents.types",
    "SubagentsPlugin": "durable_subagents.worker",
}
"""Public names imported when first asked for, and the modules that define them.

Importing the package, or any of its modules (``subagents --help`` imports the CLI's),
runs this file: what it imports at once every command pays for. The client's names
bring in Temporal's client, the worker's its SDK worker and the tools.
"""


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _version() -> str:
    # importlib.metadata reads the installed distributions: tens of milliseconds that
    # only ``--version`` needs.
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("durable-subagents")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
