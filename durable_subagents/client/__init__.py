"""The parent's side: ``SubagentClient``."""

from durable_subagents.client._client import SubagentClient

__all__ = ["SubagentClient"]
