"""Tools from MCP servers: the servers a worker declares, and their tools as its own.

``_config``: the servers, as Claude Code declares them (``.mcp.json``).
``_sessions``: the worker's sessions with them (``McpServers``): tools listed, called.
"""

from durable_subagents.tools.mcp._config import McpConfig, McpServer, load_mcp_config
from durable_subagents.tools.mcp._sessions import (
    McpResult,
    McpServers,
    McpToolInfo,
    McpUnavailable,
)

__all__ = [
    "McpConfig",
    "McpResult",
    "McpServer",
    "McpServers",
    "McpToolInfo",
    "McpUnavailable",
    "load_mcp_config",
]
