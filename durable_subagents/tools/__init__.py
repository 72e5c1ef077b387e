"""Tools a subagent can call: the ``@tool`` decorator, the built-ins and the registry."""

from durable_subagents.tools._bash import bash
from durable_subagents.tools._decorator import Tool, ToolContext, ToolError, tool
from durable_subagents.tools._files import edit_file, read_file, write_file
from durable_subagents.tools._registry import BUILTIN_TOOLS, ToolRegistry
from durable_subagents.tools._sandbox import SandboxedProcess, spawn_sandboxed
from durable_subagents.tools._sandbox_host import SANDBOX_MODES, SandboxUnavailable, detect_sandbox
from durable_subagents.tools._search import grep, list_files
from durable_subagents.tools._workspace_paths import open_in_workspace, resolve_in_workspace

__all__ = [
    "BUILTIN_TOOLS",
    "SANDBOX_MODES",
    "SandboxUnavailable",
    "SandboxedProcess",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "bash",
    "detect_sandbox",
    "edit_file",
    "grep",
    "list_files",
    "open_in_workspace",
    "read_file",
    "resolve_in_workspace",
    "spawn_sandboxed",
    "tool",
    "write_file",
]
