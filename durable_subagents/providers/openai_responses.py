"""OpenAI's Responses API, stateless: reasoning items go back with every request.

Requests are sent with ``store: false``, and a reasoning model's with ``include:
["reasoning.encrypted_content"]``: OpenAI keeps nothing between turns, and each
reasoning item the model writes comes back whole (its ``id``, ``summary`` and
``encrypted_content``). The item is kept as the ``output_item.done`` event sent it,
as a ``ReasoningBlock`` of type ``reasoning`` (``data`` is its JSON, ``thinking`` its
summary), and sent again unchanged before the answer it came with, on every later
turn: a reasoning model then goes on from its own reasoning between tool calls
instead of starting over. It lives in the transcript like Anthropic's signed
thinking, so it survives a worker's crash and a compaction that keeps the turn.

Function calls and their outputs are paired by ``call_id``; reasoning summaries stream
as thinking, the answer's text as text (see ``_responses_events``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from temporalio.exceptions import ApplicationError

from durable_subagents.context._output_schema import FINAL_ANSWER_TOOL
from durable_subagents.types import (
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningBlock,
    ToolSpec,
)

from ._responses_events import PROVIDER, ResponsesAccumulator
from ._stream import PerLoop, SSEEvents, StreamReader
from ._text import encodable_sink
from .openai import cache_key_value, sdk_client

__all__ = [
    "INCLUDE",
    "OpenAIResponsesProvider",
    "import_sdk",
    "reasons",
    "to_responses_input",
    "to_responses_tools",
]

INCLUDE = ["reasoning.encrypted_content"]
"""What a stateless request asks to get back: the reasoning it must send again."""
_REASONING_MODEL = re.compile(r"(?:.*/)?(?:o\d|codex|gpt-oss|gpt-(?:[5-9]|\d{2,}))", re.IGNORECASE)
"""Names of OpenAI's reasoning models: the o-series, GPT-5 and later, Codex, gpt-oss."""

UNVERIFIED = "must be verified to generate reasoning summaries"
"""What the API says when an organization that is not verified asks for summaries."""


def to_responses_input(request: ModelRequest) -> list[dict[str, Any]]:
    """Translate the neutral transcript into Responses API input items.

    An answer becomes its reasoning items (as the API sent them), its text as an
    assistant message, then a ``function_call`` item per call; a tool result a
    ``function_call_output`` with the call's ``call_id`` (its images, if any, beside
    its text in the output). An answer with neither text
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
        output: str | list[dict[str, Any]] = message.content or "(no output)"
        if message.images:  # a function call's output takes images beside its text
            output = [
                {"type": "input_text", "text": output},
                *(
                    {
                        "type": "input_image",
                        "image_url": f"data:{image.media_type};base64,{image.data}",
                        "detail": "auto",
                    }
                    for image in message.images
                ),
            ]
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id or "",
                "output": output,
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


def import_sdk() -> None:
    """Import the SDK and the modules its first streamed request would import."""
    sdk_client().responses.with_streaming_response  # noqa: B018


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
        headers: Sent with every request (an endpoint's ``headers``).
    """

    name = PROVIDER

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        idle_timeout: float | None = None,
        prompt_cache_key: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        from openai import APIError

        self._key = api_key
        self._secrets = [api_key, *(headers or {}).values()]
        self._api_error = APIError
        self.prompt_cache_key = prompt_cache_key
        self._clients = PerLoop(lambda: sdk_client(api_key, base_url, headers))
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
        accumulator = ResponsesAccumulator(
            model=request.model,
            on_text=encodable_sink(on_text),
            on_thinking=encodable_sink(on_thinking),
        )
        reader = StreamReader(
            provider=PROVIDER,
            key_env="OPENAI_API_KEY",
            secrets=self._secrets,
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
