"""A worker's MCP servers: their tools listed when it starts, the servers stopped with it.

The servers come from the workspace root's ``.mcp.json`` and ``SUBAGENTS_MCP_CONFIG`` /
``--mcp-config`` (``Settings.mcp_config_files``). When the worker starts, each server
lists its tools (a stdio server started in the workspace root); the tools that can be
offered join the worker's registry as ``mcp__<server>__<tool>``, and what cannot (a
server that does not start, a name or schema no model API takes) is said once, in the
log. When the worker stops, every server's process and session is closed. A worker
without MCP servers imports none of this.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from temporalio.worker import Worker

from durable_subagents.tools.mcp import McpConfig
from durable_subagents.worker._lifecycle import RunOnlyPlugin

if TYPE_CHECKING:
    from durable_subagents.activities import SubagentActivities
    from durable_subagents.telemetry._metrics import Labels

__all__ = ["McpTools"]

log = logging.getLogger("durable_subagents.worker")


class McpTools(RunOnlyPlugin):
    """Offers the tools of a worker's MCP servers while it runs (see the module's doc).

    Args:
        activities: The worker's activities: their registry gets the tools.
        config: The servers, and what kept others out.
        labels: The metrics' bounded label values (the tools' names join them).
    """

    def __init__(self, activities: SubagentActivities, config: McpConfig, labels: Labels) -> None:
        self.activities = activities
        self.config = config
        self.labels = labels
        self._started = False

    def name(self) -> str:
        """The plugin's name."""
        return "durable_subagents.McpTools"

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """List the servers' tools, run the worker, stop the servers."""
        if self._started:  # one worker of the activities starts them (the tool worker shares)
            await next(worker)
            return
        self._started = True
        from durable_subagents.tools._sandbox_host import tool_user
        from durable_subagents.tools.mcp._sessions import McpServers
        from durable_subagents.tools.mcp._tools import discover

        acts = self.activities
        servers = McpServers(
            self.config.servers,
            env=acts.tool_environment(None),
            run_as=lambda fd: tool_user(fd, acts.tool_user),
        )
        try:
            with acts.workspace(None) as root:
                tools, problems = await discover(
                    servers, self.config.servers, root.path, root.fd, set(acts.tools.names)
                )
            for problem in [*self.config.problems, *problems]:
                log.warning("%s", problem)
            for tool in tools:
                acts.tools.register(tool)
            self.labels.tools = self.labels.tools | {t.name for t in tools}
            offered = sorted({t.server for t in tools})
            log.info("MCP: %d tools from %s", len(tools), ", ".join(offered) or "no server")
            await next(worker)
        finally:
            await servers.aclose()


def mcp_tools(activities: SubagentActivities, settings: Any, labels: Labels) -> McpTools | None:
    """The plugin for ``settings``' MCP servers; None (and no cost) where there are none."""
    import os

    from durable_subagents.tools.mcp import load_mcp_config

    files = settings.mcp_config_files()
    if not files:
        return None
    config = load_mcp_config(files, os.environ)
    if not config.servers:
        for problem in config.problems:
            log.warning("%s", problem)
        return None
    return McpTools(activities, config, labels)
