"""Activities: every I/O a task does (model calls, tools, blob store)."""

from durable_subagents.activities._activities import SubagentActivities
from durable_subagents.activities._notify import Notifier

__all__ = ["Notifier", "SubagentActivities"]
