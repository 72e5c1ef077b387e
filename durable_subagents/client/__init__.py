"""The parent's side: ``SubagentClient`` and the orchestrator tools ``SubagentTools``."""

from typing import TYPE_CHECKING, Any

from durable_subagents.client._client import SubagentClient

if TYPE_CHECKING:
    from durable_subagents.client._tools import SubagentTools

__all__ = ["SubagentClient", "SubagentTools"]


def __getattr__(name: str) -> Any:
    # The orchestrator tools (their models and the built-in agents' texts) are imported
    # by an LLM tool loop that asks for them, not by every client.
    if name == "SubagentTools":
        from durable_subagents.client._tools import SubagentTools

        return SubagentTools
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
