"""OpenAI's Responses API, stateless: reasoning items go back with every request.

Requests are sent with ``store: false`` and ``include: ["reasoning.encrypted_content"]``:
OpenAI keeps nothing between turns, and each reasoning item the model writes comes back
whole (its ``id``, ``summary`` and ``encrypted_content``). The item is kept as the
``output_item.done`` event sent it, as a ``ReasoningBlock`` of type ``reasoning``
(``data`` is its JSON, ``thinking`` its summary), and sent again unchanged before the
answer it came with, on every later turn: a reasoning model then goes on from its own
reasoning between tool calls instead of starting over. It lives in the transcript
like Anthropic's signed thinking, so it survives a worker's crash and a compaction
that keeps the turn.

Function calls and their outputs are paired by ``call_id``; reasoning summaries stream
as thinking, the answer's text as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.exceptions import ApplicationError

from durable_subagents._output_schema import FINAL_ANSWER_TOOL
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

from ._errors import CONTEXT_LENGTH_ERROR, model_request_error, model_unavailable
from ._stream import PerLoop, SSEEvents, StreamReader, use_aiohttp
from ._text import encodable_sink
from .openai import cache_key_value, parse_arguments

__all__ = [
    "INCLUDE",
    "OpenAIResponsesProvider",
    "import_sdk",
    "reasons",
    "responses_usage",
    "to_responses_input",
    "to_responses_tools",
]

INCLUDE = ["reasoning.encrypted_content"]
"""What a stateless request asks to get back: the reasoning it must send again."""
_REASONING_MODEL = re.compile(r"(?:.*/)?(?:o\d|codex|gpt-oss|gpt-(?:[5-9]|\d{2,}))", re.IGNORECASE)
"""Names of OpenAI's reasoning models: the o-series, GPT-5 and later, Codex, gpt-oss."""
PROVIDER = "openai-responses"

_STOP_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""An incomplete response's ``incomplete_details.reason`` in Chat Completions' words."""
UNVERIFIED = "must be verified to generate reasoning summaries"
"""What the API says when an organization that is not verified asks for summaries."""
_NOT_RETRIED = {"invalid_prompt", "invalid_encrypted_content"}
"""Codes of a failed response that a retry of the same request cannot fix."""


def to_responses_input(request: ModelRequest) -> list[dict[str, Any]]:
    """Translate the neutral transcript into Responses API input items.

    An answer becomes its reasoning items (as the API sent them), its text as an
    assistant message, then a ``function_call`` item per call; a tool result a
    ``function_call_output`` with the call's ``call_id``. An answer with neither text
    nor calls sends no reasoning: the API refuses a reasoning item without the item
    that followed it; nor does a reasoning item without ``encrypted_content`` (from a
    request that did not ask for it) go back, since the API kept nothing to find it by.
    """
    out: list[dict[str, Any]] = []
    for message in request.messages:
        out.extend(_items(message))
    return out


def _items(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id or "",
                "output": message.content or "(no output)",
            }
        ]
    if message.role != "assistant":
        if not message.content:
            return []
        return [{"type": "message", "role": message.role, "content": message.content}]
    items: list[dict[str, Any]] = []
    if message.content or message.tool_calls:
        kept = (reasoning_item(b) for b in message.reasoning if b.type == "reasoning")
        # an item without its encrypted content cannot come back: store=false kept nothing
        items.extend(item for item in kept if item.get("encrypted_content"))
    if message.content:
        items.append({"type": "message", "role": "assistant", "content": message.content})
    for call in message.tool_calls:
        items.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": json.dumps(call.arguments),
            }
        )
    return items


def reasons(model: str, effort: str | None) -> bool:
    """Whether to ask for a model's reasoning (``include``): it is a reasoning model.

    The API refuses ``include: ["reasoning.encrypted_content"]`` from models that do
    not reason (GPT-4o, GPT-4.1, the ``-chat`` models): a model is taken to reason when
    the task gives it an effort or its name is of a reasoning family.
    """
    if effort is not None:
        return True
    return bool(_REASONING_MODEL.match(model)) and "-chat" not in model.lower()


def reasoning_item(block: ReasoningBlock) -> dict[str, Any]:
    """The reasoning item a block holds, exactly as the API sent it."""
    item = json.loads(block.data)
    if not isinstance(item, dict):
        raise ValueError("a reasoning block's data is not a reasoning item")
    return item


def to_responses_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Translate tool specs into Responses API function tools.

    ``strict`` is off: the API's strict mode needs every property required and no
    additional ones, which tools' schemas do not promise.
    """
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
            "strict": False,
        }
        for tool in tools
    ]


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def responses_usage(usage: dict[str, Any]) -> Usage:
    """A Responses API ``usage`` object as ``Usage``.

    ``input_tokens`` includes the cached ones (``input_tokens_details.cached_tokens``),
    ``output_tokens`` the reasoning ones (``output_tokens_details.reasoning_tokens``).
    """
    inputs = _dict(usage.get("input_tokens_details"))
    outputs = _dict(usage.get("output_tokens_details"))
    return Usage(
        input_tokens=_count(usage.get("input_tokens")),
        output_tokens=_count(usage.get("output_tokens")),
        cache_read_tokens=_count(inputs.get("cached_tokens")),
        cache_write_tokens=_count(inputs.get("cache_write_tokens")),
        reasoning_tokens=_count(outputs.get("reasoning_tokens")),
    )


def failure(error: dict[str, Any]) -> ApplicationError:
    """The error of a response that failed inside its stream (``response.failed``, ``error``).

    A context-length failure is the same ``ContextLengthExceeded`` as an HTTP 400 with
    it (the task compacts), an invalid prompt a request error; anything else (a server
    error, a rate limit met mid-stream) is retried.
    """
    code = str(error.get("code") or "")
    message = str(error.get("message") or "the response failed")
    if code == "context_length_exceeded":
        return ApplicationError(
            f"{PROVIDER} API: {message}; the conversation is longer than the model's "
            "context window",
            {"tokens": None, "maximum": 0},
            type=CONTEXT_LENGTH_ERROR,
            non_retryable=True,
        )
    if code in _NOT_RETRIED:
        return model_request_error(f"{PROVIDER} API refused the request ({code}): {message}")
    kind = f" ({code})" if code else ""
    return model_unavailable(
        f"{PROVIDER} API failed during the response{kind}: {message} (will retry)"
    )


@dataclass
class _Accumulator:
    """Builds a ``ModelResponse`` out of the Responses API's stream events.

    Each output item is taken as ``response.output_item.done`` sends it (the API says
    a reasoning item's ``encrypted_content`` is whole only there); deltas feed the live
    text and thinking, and stand in for an item whose ``done`` event never came.
    """

    model: str
    items: dict[int, dict[str, Any]] = field(default_factory=dict)
    texts: dict[int, list[str]] = field(default_factory=dict)
    arguments: dict[int, list[str]] = field(default_factory=dict)
    started: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    finished: bool = False
    on_text: Callable[[str], None] | None = None
    on_thinking: Callable[[str], None] | None = None
    thought: bool = False
    """Thinking went to ``on_thinking`` (the next summary part starts after a separator)."""

    def add(self, event: dict[str, Any]) -> None:
        """Take one stream event (an event of ``SSEEvents``: always a dict)."""
        kind = event.get("type")
        index = event.get("output_index")
        index = index if isinstance(index, int) else 0
        if kind == "response.output_text.delta":
            delta = str(event.get("delta") or "")
            self.texts.setdefault(index, []).append(delta)
            if delta and self.on_text is not None:
                self.on_text(delta)
        elif kind == "response.reasoning_summary_part.added":
            if self.thought and self.on_thinking is not None:
                self.on_thinking(THINKING_SEPARATOR)
        elif kind == "response.reasoning_summary_text.delta":
            delta = str(event.get("delta") or "")
            if delta and self.on_thinking is not None:
                self.thought = True
                self.on_thinking(delta)
        elif kind == "response.function_call_arguments.delta":
            self.arguments.setdefault(index, []).append(str(event.get("delta") or ""))
        elif kind == "response.output_item.added":
            self.started[index] = _dict(event.get("item"))
        elif kind == "response.output_item.done":
            self.items[index] = _dict(event.get("item"))
        elif kind in ("response.completed", "response.incomplete"):
            self._finish(_dict(event.get("response")))
        elif kind == "response.failed":
            raise failure(_dict(_dict(event.get("response")).get("error")))
        elif kind == "error":
            raise failure(event)

    def _finish(self, response: dict[str, Any]) -> None:
        self.finished = True
        self.model = str(response.get("model") or self.model)
        self.usage = responses_usage(_dict(response.get("usage")))
        for index, item in enumerate(response.get("output") or ()):
            if isinstance(item, dict):
                self.items.setdefault(index, item)
        if response.get("status") == "incomplete":
            reason = str(_dict(response.get("incomplete_details")).get("reason") or "")
            self.stop_reason = _STOP_REASONS.get(reason, reason or "incomplete")

    def _item(self, index: int) -> dict[str, Any]:
        if index in self.items:
            return self.items[index]
        item = dict(self.started.get(index, {}))
        if item.get("type") == "message" or (not item and index in self.texts):
            text = "".join(self.texts.get(index, []))
            item = {"type": "message", "content": [{"type": "output_text", "text": text}]}
        elif item.get("type") == "function_call":
            item["arguments"] = "".join(self.arguments.get(index, []))
        return item

    def response(self) -> ModelResponse:
        text: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[ReasoningBlock] = []
        indices = sorted({*self.items, *self.started, *self.texts})
        for index in indices:
            item = self._item(index)
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or ():
                    if isinstance(part, dict) and part.get("type") == "output_text":
                        text.append(str(part.get("text") or ""))
            elif kind == "function_call":
                calls.append(
                    ToolCall(
                        id=str(item.get("call_id") or item.get("id") or f"call_{index}"),
                        name=str(item.get("name") or ""),
                        arguments=parse_arguments(str(item.get("arguments") or "")),
                    )
                )
            elif kind == "reasoning":
                summary = [
                    str(p.get("text") or "")
                    for p in item.get("summary") or ()
                    if isinstance(p, dict)
                ]
                reasoning.append(
                    ReasoningBlock(
                        type="reasoning",
                        thinking=THINKING_SEPARATOR.join(s for s in summary if s),
                        data=json.dumps(item),
                    )
                )
        stop = self.stop_reason or ("tool_calls" if calls else "stop")
        return ModelResponse(
            text="".join(text),
            tool_calls=calls,
            usage=self.usage,
            stop_reason=stop,
            model=self.model,
            reasoning=reasoning,
        )


def import_sdk() -> None:
    """Import the SDK and the modules its first streamed request would import."""
    from openai import AsyncOpenAI, DefaultAioHttpClient

    client = AsyncOpenAI(
        api_key="unused",
        max_retries=0,
        http_client=DefaultAioHttpClient() if use_aiohttp() else None,
    )
    client.responses.with_streaming_response  # noqa: B018


class OpenAIResponsesProvider:
    """The Responses API with tools, streamed and stateless.

    A stream that stalls for ``idle_timeout`` seconds, breaks, or ends without
    ``response.completed`` (or ``response.incomplete``) or with an empty answer is a
    retryable error, never a turn.

    Args:
        api_key: The key (``OPENAI_API_KEY``).
        base_url: A custom endpoint (``OPENAI_BASE_URL``).
        idle_timeout: Seconds without data (headers or an event) before the attempt is
            abandoned; None: no limit.
        prompt_cache_key: Send ``prompt_cache_key`` (the request's ``cache_key``, the
            task id) so the API routes a task's requests to the machines that cached
            its prefix.
    """

    name = PROVIDER

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        idle_timeout: float | None = None,
        prompt_cache_key: bool = False,
    ) -> None:
        from openai import APIError, AsyncOpenAI, DefaultAioHttpClient

        self._key = api_key
        self._api_error = APIError
        self.prompt_cache_key = prompt_cache_key
        self._clients = PerLoop(
            lambda: AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                max_retries=0,
                http_client=DefaultAioHttpClient() if use_aiohttp() else None,
            )
        )
        self.idle_timeout = idle_timeout
        self.summaries = True
        """Ask for reasoning summaries; off once the API said the organization may not."""

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The request's JSON body (without ``model`` and ``stream``)."""
        body: dict[str, Any] = {
            "input": to_responses_input(request),
            "store": False,
            "max_output_tokens": request.max_tokens,
        }
        if reasons(request.model, request.reasoning_effort):
            body["include"] = list(INCLUDE)
        if request.system:
            body["instructions"] = request.system
        if request.tools:
            body["tools"] = to_responses_tools(request.tools)
        if request.reasoning_effort is not None:
            body["reasoning"] = {"effort": request.reasoning_effort}
            if self.summaries:
                body["reasoning"]["summary"] = "auto"
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.output_schema is not None:
            # not strict: the API's strict mode takes a subset of JSON Schema only
            body["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": FINAL_ANSWER_TOOL,
                    "schema": request.output_schema,
                    "strict": False,
                }
            }
        if self.prompt_cache_key and request.prompt_cache and request.cache_key:
            body["prompt_cache_key"] = cache_key_value(request.cache_key)
        return body

    async def complete(
        self,
        request: ModelRequest,
        on_text: Callable[[str], None] | None = None,
        on_thinking: Callable[[str], None] | None = None,
    ) -> ModelResponse:
        """Run one streamed Responses API turn.

        Args:
            request: The neutral request; ``request.model`` is e.g. ``gpt-5-mini``. Its
                ``reasoning_effort`` is sent as ``reasoning.effort``, with summaries
                unless the API refused them (an organization that is not verified):
                then the request goes again without, and so do later ones.
            on_text: Called with each text delta as it arrives.
            on_thinking: Called with each piece of the reasoning summaries.

        Returns:
            Text, tool calls, reasoning items as sent, usage (cached and reasoning
            tokens included) and a stop reason in Chat Completions' words (``stop``,
            ``tool_calls``, ``length``).

        Raises:
            temporalio.exceptions.ApplicationError: The API failed (retryable or not as
                the status says); or, retryable, the stream stalled, broke, ended
                unfinished, or had neither text nor tool calls.
        """
        summaries = self.summaries
        try:
            return await self._complete(request, on_text, on_thinking)
        except ApplicationError as err:
            # Summaries need a verified organization; the reasoning itself does not.
            if not (summaries and request.reasoning_effort and UNVERIFIED in err.message):
                raise
            self.summaries = False
        return await self._complete(request, on_text, on_thinking)

    async def _complete(
        self,
        request: ModelRequest,
        on_text: Callable[[str], None] | None,
        on_thinking: Callable[[str], None] | None,
    ) -> ModelResponse:
        # Sent as ``extra_body``: the SDK does not walk the request against its typed
        # parameters again (see ``OpenAIProvider.complete``).
        params: dict[str, Any] = {
            "model": request.model,
            "stream": True,
            "extra_body": self.body(request),
        }
        accumulator = _Accumulator(
            model=request.model,
            on_text=encodable_sink(on_text),
            on_thinking=encodable_sink(on_thinking),
        )
        reader = StreamReader(
            provider=PROVIDER,
            key_env="OPENAI_API_KEY",
            secrets=[self._key],
            idle_timeout=self.idle_timeout,
        )
        client = self._clients.get()
        await reader.read(
            lambda: SSEEvents(
                client.responses.with_streaming_response.create(**params),
                provider=PROVIDER,
                error=self._api_error,
            ).open(),
            accumulator.add,
        )
        return reader.check(
            accumulator.response(),
            finished=accumulator.finished,
            what="response.completed",
        )

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop."""
        await self._clients.aclose()
