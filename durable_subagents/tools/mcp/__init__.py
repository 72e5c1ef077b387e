"""Tools from MCP servers: the servers a worker declares, and their tools as its own.

``_config``: the servers, as Claude Code declares them (``.mcp.json``).
``_sessions``: the worker's sessions with them (``McpServers``), imported only by a
worker that has servers (it loads the MCP SDK).
"""

from durable_subagents.tools.mcp._config import McpConfig, McpServer, load_mcp_config

__all__ = ["McpConfig", "McpServer", "load_mcp_config"]
