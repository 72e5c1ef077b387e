"""What the activities' steps use of the worker's activities object.

``SubagentActivities`` holds the worker's resources and registers the activities; the
steps (a tool call, a compaction, a person's decision on held changes) live in modules
of their own and take it as an ``ActivityRole``, so that none of them imports the
module that imports them.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from durable_subagents.activities._workspaces import HeldWorkspace
    from durable_subagents.context._live_text import LiveText
    from durable_subagents.pricing import PriceTable
    from durable_subagents.providers import ModelProvider, TextSink
    from durable_subagents.storage._blobstore import BlobStore
    from durable_subagents.storage._transcript import Transcript
    from durable_subagents.tools import ToolContext, ToolRegistry
    from durable_subagents.types import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec
    from durable_subagents.wire._payloads import (
        ContextInput,
        ModelTurnInput,
        ToolCallInput,
        ToolCallResult,
    )

__all__ = ["ActivityRole"]


class ActivityRole(Protocol):
    """The worker's resources and judgements a step of an activity uses."""

    store: BlobStore
    transcript: Transcript
    tools: ToolRegistry
    tool_user: tuple[int, int] | None
    compact_at: float
    prices: PriceTable

    async def complete(
        self,
        provider: ModelProvider,
        request: ModelRequest,
        on_text: TextSink | None = None,
        on_thinking: TextSink | None = None,
    ) -> ModelResponse:
        """One model call, within the worker's turn timeout."""
        ...

    def heartbeating(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Heartbeat in the background meanwhile."""
        ...

    def context_window(self, context: ContextInput, model: str) -> int | None:
        """The window a task's turns must fit (None: unknown)."""
        ...

    def offered_tools(self, input: ModelTurnInput) -> list[str]:
        """The tools a turn offers the model."""
        ...

    def tools_offered(self, input: ModelTurnInput, offered: list[str]) -> dict[str, Any]:
        """A turn result's tool fields, or ``same_tools`` if the workflow has them."""
        ...

    async def with_stored_results(self, input: ModelTurnInput) -> list[Message]:
        """A turn's new messages, with results passed by record name read back in full."""
        ...

    async def model_request(
        self, task_id: str, messages: list[Message], tools: list[ToolSpec], model: str
    ) -> ModelRequest:
        """The request for ``messages``: their context view, blob references expanded."""
        ...

    def with_path(self, call: ToolCall, workspace: HeldWorkspace) -> ToolCall:
        """The call with its path resolved for the rules (tools that take a ``path``)."""
        ...

    def with_hint(self, call: ToolCall) -> ToolCall:
        """The call with what an MCP tool's server says of it, for a person deciding."""
        ...

    def provider(self, model: str) -> tuple[ModelProvider, str, str]:
        """The provider of ``model``, its name, and the model as the provider names it."""
        ...

    async def read_in_turn(self, input: ToolCallInput, live: LiveText) -> ToolCallResult:
        """Run a read within the model turn that asked for it."""
        ...

    def read_only(self, name: str) -> bool:
        """Whether tool ``name`` changes nothing."""
        ...

    def tool_context(
        self, input: ToolCallInput, workspace: HeldWorkspace, call: ToolCall | None = None
    ) -> ToolContext:
        """What a call's tool may see and use."""
        ...

    def workspace(self, requested: str | None) -> HeldWorkspace:
        """The task's workspace for one step, checked and held."""
        ...
