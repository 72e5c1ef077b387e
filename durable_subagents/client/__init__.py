"""The parent's side: ``SubagentClient`` and the orchestrator tools ``SubagentTools``."""

from durable_subagents.client._client import SubagentClient
from durable_subagents.client._tools import SubagentTools

__all__ = ["SubagentClient", "SubagentTools"]
