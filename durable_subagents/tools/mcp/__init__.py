"""Tools from MCP servers: the servers a worker declares, and their tools as its own.

``_config``: the servers, as Claude Code declares them (``.mcp.json``).
"""

from durable_subagents.tools.mcp._config import McpConfig, McpServer, load_mcp_config

__all__ = ["McpConfig", "McpServer", "load_mcp_config"]
