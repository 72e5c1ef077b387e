"""Anthropic Messages API with tools, streamed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from durable_subagents.types import (
    THINKING_SEPARATOR,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningBlock,
    ToolCall,
    ToolSpec,
    Usage,
)

from ._stream import PerLoop, SSEEvents, StreamReader, use_aiohttp
from ._text import encodable_sink
from ._thinking import thinking_params, without_reasoning
from .openai import parse_arguments

__all__ = [
    "CACHE_BREAKPOINTS",
    "AnthropicProvider",
    "add_cache_breakpoints",
    "import_sdk",
    "to_anthropic_messages",
    "to_anthropic_tools",
]


def to_anthropic_messages(request: ModelRequest) -> tuple[str, list[dict[str, Any]]]:
    """Translate the neutral transcript into a system string and Messages API turns.

    Tool results become ``tool_result`` blocks of a user message; consecutive
    messages of one role are merged (the API requires roles to alternate), so the
    results of several parallel tool calls arrive in one user message. An answer's
    thinking blocks come first in its message, as the model sent them.

    Returns:
        ``(system, messages)``.
    """
    system_parts = [request.system] if request.system else []
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks: list[dict[str, Any]] = []
        if message.role == "system":
            if message.content:
                system_parts.append(message.content)
            continue
        if message.role == "tool":
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id or "",
                    "content": _result_content(message),
                    "is_error": message.is_error,
                }
            )
        else:
            blocks.extend(_reasoning_block(b) for b in message.reasoning if b.type in _REASONING)
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            for call in message.tool_calls:
                blocks.append(
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                )
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(system_parts), turns


def _result_content(message: Message) -> str | list[dict[str, Any]]:
    """A tool result's content: its text, and its images as image blocks after it."""
    text = message.content or "(no output)"
    if not message.images:
        return text
    return [
        {"type": "text", "text": text},
        *(
            {
                "type": "image",
                "source": {"type": "base64", "media_type": image.media_type, "data": image.data},
            }
            for image in message.images
        ),
    ]


def _reasoning_block(block: ReasoningBlock) -> dict[str, Any]:
    if block.type == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}


def to_anthropic_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Translate tool specs into Messages API tools."""
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in tools
    ]


CACHE_BREAKPOINTS = 4
"""Most ``cache_control`` breakpoints the Messages API accepts in one request."""
_EPHEMERAL = {"type": "ephemeral"}


def add_cache_breakpoints(params: dict[str, Any]) -> None:
    """Mark what Anthropic may cache, within its limit of four breakpoints.

    The API caches the prefix up to a marked block (tools, then system, then messages)
    and, for a marked block, finds an earlier cached prefix only within the 20 blocks
    before it. So: the last tool and the system prompt (the same every turn), the end
    of the conversation (what the next turn will extend), and the end of the previous
    turn's request (written then, read now however many blocks this turn added).
    """
    tools = params.get("tools")
    if tools:
        params["tools"] = [*tools[:-1], {**tools[-1], "cache_control": _EPHEMERAL}]
    system = params.get("system")
    if isinstance(system, str) and system:
        params["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
    messages: list[dict[str, Any]] = params["messages"]
    marks = {len(messages) - 1} if messages else set()
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if assistants and assistants[-1] > 0:
        marks.add(assistants[-1] - 1)
    for i in marks:
        content = messages[i]["content"]
        if content:
            messages[i] = {
                **messages[i],
                "content": [*content[:-1], {**content[-1], "cache_control": _EPHEMERAL}],
            }


@dataclass
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    start_input: dict[str, Any] = field(default_factory=dict)
    signature: str = ""
    """A thinking block's signature (``signature_delta``)."""
    data: str = ""
    """A redacted thinking block's data."""
    shown: bool = False
    """Some of a thinking block's text went to ``on_thinking``."""


_REASONING = ("thinking", "redacted_thinking")


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _tokens(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _index(event: dict[str, Any]) -> int:
    index = event.get("index")
    return index if isinstance(index, int) else 0


@dataclass
class _Accumulator:
    """Builds a ``ModelResponse`` out of raw Messages API stream events."""

    model: str
    blocks: dict[int, _Block] = field(default_factory=dict)
    input_tokens: int = 0
    """Input tokens after the last cache breakpoint (the API's ``input_tokens``)."""
    cache_read: int = 0
    cache_write: int = 0
    output_tokens: int = 0
    thinking_tokens: int = 0
    """Output tokens spent thinking (``output_tokens_details.thinking_tokens``)."""
    stop_reason: str | None = None
    stopped: bool = False
    """``message_stop`` arrived: the answer is complete."""
    on_text: Callable[[str], None] | None = None
    on_thinking: Callable[[str], None] | None = None
    thought: bool = False
    """Thinking text went to ``on_thinking`` (a later block's starts after a separator)."""

    def add(self, event: dict[str, Any]) -> None:
        """Take one stream event (an event of ``SSEEvents``: always a dict)."""
        kind = event.get("type")
        if kind == "message_stop":
            self.stopped = True
        elif kind == "message_start":
            message = _dict(event.get("message"))
            self.model = str(message.get("model") or self.model)
            self._usage(message.get("usage"))
        elif kind == "content_block_start":
            self._start(_index(event), _dict(event.get("content_block")))
        elif kind == "content_block_delta":
            target = self.blocks.setdefault(_index(event), _Block("text"))
            delta = _dict(event.get("delta"))
            thinking = target.kind in _REASONING
            # thinking and text never pass into each other's blocks, whatever the stream says
            if delta.get("type") == "text_delta" and not thinking:
                target.parts.append(str(delta.get("text") or ""))
                if target.kind == "text":
                    self._live(target.parts[-1])
            elif delta.get("type") == "input_json_delta" and not thinking:
                target.parts.append(str(delta.get("partial_json") or ""))
            elif delta.get("type") == "thinking_delta" and target.kind == "thinking":
                target.parts.append(str(delta.get("thinking") or ""))
                self._think(target)
            elif delta.get("type") == "signature_delta" and target.kind == "thinking":
                target.signature += str(delta.get("signature") or "")
        elif kind == "message_delta":
            stop_reason = _dict(event.get("delta")).get("stop_reason")
            if stop_reason:
                self.stop_reason = str(stop_reason)
            self._usage(event.get("usage"))

    def _start(self, index: int, block: dict[str, Any]) -> None:
        kind = str(block.get("type") or "")
        if kind == "tool_use":
            start = block.get("input")
            self.blocks[index] = _Block(
                "tool_use",
                str(block.get("id") or ""),
                str(block.get("name") or ""),
                [],
                start if isinstance(start, dict) else {},
            )
        elif kind == "text":
            self.blocks[index] = _Block("text", parts=[str(block.get("text") or "")])
            self._live(self.blocks[index].parts[0])
        elif kind == "thinking":
            self.blocks[index] = _Block(
                "thinking",
                parts=[str(block.get("thinking") or "")],
                signature=str(block.get("signature") or ""),
            )
            self._think(self.blocks[index])
        elif kind == "redacted_thinking":
            self.blocks[index] = _Block("redacted_thinking", data=str(block.get("data") or ""))
        else:
            self.blocks[index] = _Block(kind)

    def _live(self, text: str) -> None:
        if text and self.on_text is not None:
            self.on_text(text)

    def _think(self, block: _Block) -> None:
        """Pass a thinking block's latest piece on, the blocks apart as ``thinking_text``."""
        text = block.parts[-1]
        if not text or block.kind != "thinking" or self.on_thinking is None:
            return
        if not block.shown and self.thought:
            self.on_thinking(THINKING_SEPARATOR)
        block.shown = self.thought = True
        self.on_thinking(text)

    def _usage(self, usage: Any) -> None:
        """Take the counts of ``message_start`` or ``message_delta`` (both cumulative)."""
        if not isinstance(usage, dict):
            return
        self.input_tokens = max(self.input_tokens, _tokens(usage.get("input_tokens")))
        self.cache_write = max(self.cache_write, _tokens(usage.get("cache_creation_input_tokens")))
        self.cache_read = max(self.cache_read, _tokens(usage.get("cache_read_input_tokens")))
        if isinstance(usage.get("output_tokens"), int):
            self.output_tokens = usage["output_tokens"]
        details = _dict(usage.get("output_tokens_details"))
        self.thinking_tokens = max(self.thinking_tokens, _tokens(details.get("thinking_tokens")))

    def response(self) -> ModelResponse:
        text: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[ReasoningBlock] = []
        for _, block in sorted(self.blocks.items()):
            if block.kind == "text":
                text.append("".join(block.parts))
            elif block.kind == "thinking":
                thinking = "".join(block.parts)
                reasoning.append(ReasoningBlock(thinking=thinking, signature=block.signature))
            elif block.kind == "redacted_thinking":
                reasoning.append(ReasoningBlock(type="redacted_thinking", data=block.data))
            elif block.kind == "tool_use":
                raw = "".join(block.parts)
                arguments = parse_arguments(raw) if raw.strip() else block.start_input
                calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
        return ModelResponse(
            text="".join(text),
            tool_calls=calls,
            usage=Usage(
                # every input token: the API's input_tokens counts only those after
                # the last cache breakpoint
                input_tokens=self.input_tokens + self.cache_read + self.cache_write,
                output_tokens=self.output_tokens,
                reasoning_tokens=self.thinking_tokens,
                cache_read_tokens=self.cache_read,
                cache_write_tokens=self.cache_write,
            ),
            stop_reason=self.stop_reason,
            model=self.model,
            reasoning=reasoning,
        )


def import_sdk() -> None:
    """Import the SDK and the modules its first streamed request would import.

    The SDK loads its resources, and its HTTP stack its TLS module, when first used: a
    client built and dropped here imports them, so that a worker can do it in a thread
    while it starts instead of in its first model turn.
    """
    from anthropic import AsyncAnthropic, DefaultAioHttpClient

    client = AsyncAnthropic(
        api_key="unused",
        max_retries=0,
        http_client=DefaultAioHttpClient() if use_aiohttp() else None,
    )
    client.messages.with_streaming_response  # noqa: B018


class AnthropicProvider:
    """Messages API with tools, streamed.

    A stream that stalls for ``idle_timeout`` seconds (``ping`` events do not count
    as data), breaks, or ends without ``message_stop`` or with an empty answer is a
    retryable error, never a turn. Claude on a cloud (``bedrock``, ``vertex``) is this
    provider with the cloud's client, auth and stream framing.

    Args:
        api_key: The key (``ANTHROPIC_API_KEY``).
        base_url: A custom endpoint (``ANTHROPIC_BASE_URL``), e.g. a proxy.
        idle_timeout: Seconds without data (headers or an event) before the attempt is
            abandoned; None: no limit.
        headers: Sent with every request (an endpoint's ``headers``).
    """

    name = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    """What a 401 or 403 tells the operator to check."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        idle_timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        # The SDK is imported once a provider is built: a worker imports only the SDKs
        # of the providers it runs (importing both took seconds).
        from anthropic import APIError, AsyncAnthropic, DefaultAioHttpClient

        self._secrets: list[str] = [api_key, *(headers or {}).values()]
        self._api_error: type[Any] = APIError
        self._clients: PerLoop[Any] = PerLoop(
            lambda: AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                default_headers=dict(headers or {}),
                max_retries=0,
                http_client=DefaultAioHttpClient() if use_aiohttp() else None,
            )
        )
        self.idle_timeout = idle_timeout

    def claude_model(self, model: str) -> str:
        """The model as Anthropic's API names it, which says how it thinks."""
        return model

    def advice(self, status: int, message: str) -> str | None:
        """What to check when the API refuses a request (None: the default advice)."""
        return None

    async def open_stream(self, params: dict[str, Any]) -> Any:
        """Send the streamed request; the events of its answer, as objects."""
        client = self._clients.get()
        return await SSEEvents(
            client.messages.with_streaming_response.create(**params),
            provider=self.name,
            error=self._api_error,
        ).open()

    async def complete(
        self,
        request: ModelRequest,
        on_text: Callable[[str], None] | None = None,
        on_thinking: Callable[[str], None] | None = None,
    ) -> ModelResponse:
        """Run one streamed Messages API turn.

        Args:
            request: The neutral request; ``request.model`` is e.g. ``claude-haiku-4-5``.
                Its ``reasoning_effort`` turns extended thinking on as the model takes
                it (see ``_thinking``).
            on_text: Called with each text delta as it arrives.
            on_thinking: Called with each piece of thinking text as it arrives.

        Returns:
            Text, tool calls, thinking blocks as sent, usage (input from
            ``message_start``, output and thinking tokens from ``message_delta``) and
            the API's stop reason.

        Raises:
            temporalio.exceptions.ApplicationError: The API failed (retryable or not as
                the status says); or, retryable, the stream stalled, broke, ended
                without ``message_stop``, or had neither text nor tool calls.
        """
        system, messages = to_anthropic_messages(request)
        thinking = thinking_params(
            self.claude_model(request.model),
            request.reasoning_effort,
            request.max_tokens,
            messages,
        )
        if not thinking:
            # without thinking the API takes no thinking blocks in the turn it continues
            messages = without_reasoning(messages)
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": messages,
            "stream": True,
            **thinking,
        }
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = to_anthropic_tools(request.tools)
        if request.temperature is not None and not thinking:
            # Not among the SDK's typed parameters; the API takes 0-1 (OpenAI's 0-2), and
            # only its default with thinking.
            params["extra_body"] = {"temperature": min(request.temperature, 1.0)}
        if request.prompt_cache:
            add_cache_breakpoints(params)
        accumulator = _Accumulator(
            model=request.model,
            on_text=encodable_sink(on_text),
            on_thinking=encodable_sink(on_thinking),
        )
        reader = StreamReader(
            provider=self.name,
            key_env=self.key_env,
            secrets=self._secrets,
            idle_timeout=self.idle_timeout,
            advice=self.advice,
        )
        await reader.read(lambda: self.open_stream(params), accumulator.add)
        return reader.check(
            accumulator.response(), finished=accumulator.stopped, what="message_stop"
        )

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop."""
        await self._clients.aclose()
