"""OpenAI Chat Completions (and any OpenAI-compatible server: Ollama, vLLM)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durable_subagents.types import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec, Usage

from ._profiles import Profile, detect_profile
from ._stream import PerLoop, SSEEvents, StreamReader, use_aiohttp
from ._text import encodable_sink

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = [
    "OpenAIProvider",
    "estimate_usage",
    "import_sdk",
    "openai_usage",
    "parse_arguments",
    "to_openai_messages",
    "to_openai_tools",
]


def parse_arguments(raw: str) -> dict[str, Any]:
    """Decode a tool call's JSON arguments, keeping invalid text as ``{"_raw": text}``.

    The workflow then returns a tool error to the model instead of failing the turn.
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {"_raw": raw[:2000]}
    return value if isinstance(value, dict) else {"_raw": raw}


IMAGES_FOLLOW = "[its images follow in the next message]"
"""What a tool message with images ends with: the API takes images only from a user."""


def to_openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Translate the neutral transcript into Chat Completions messages.

    A ``tool`` message takes only text, so the images of tool results go in a user
    message right after the results of the turn's calls (the API wants every call's
    result before any other message), each labelled with its call.
    """
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    images: list[dict[str, Any]] = []
    for message in request.messages:
        if images and message.role != "tool":
            out.append({"role": "user", "content": images})
            images = []
        out.append(_message(message))
        if message.role == "tool" and message.images:
            out[-1]["content"] = f"{message.content}\n{IMAGES_FOLLOW}"
            images.extend(_image_parts(message))
    if images:
        out.append({"role": "user", "content": images})
    return out


def _image_parts(message: Message) -> list[dict[str, Any]]:
    tool = message.tool_name or "the tool"
    label = f"The images of the result of {tool} call {message.tool_call_id}:"
    return [
        {"type": "text", "text": label},
        *(
            {
                "type": "image_url",
                "image_url": {"url": f"data:{image.media_type};base64,{image.data}"},
            }
            for image in message.images
        ),
    ]


def _message(message: Message) -> dict[str, Any]:
    if message.role == "assistant":
        wire: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ]
        elif wire["content"] is None:
            wire["content"] = ""
        return wire
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    return {"role": message.role, "content": message.content}


PROMPT_CACHE_KEY_LIMIT = 64
"""Longest ``prompt_cache_key`` sent as it is; a longer task id is sent as its hash."""


def cache_key_value(key: str) -> str:
    """The ``prompt_cache_key`` for a task id: the id, or a hash of a long one."""
    if len(key) <= PROMPT_CACHE_KEY_LIMIT and key.isascii():
        return key
    return hashlib.sha256(key.encode(errors="replace")).hexdigest()


def to_openai_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Translate tool specs into Chat Completions function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def openai_usage(usage: dict[str, Any]) -> Usage:
    """A Chat Completions ``usage`` object as ``Usage``.

    ``prompt_tokens`` includes the cached tokens (``prompt_tokens_details.cached_tokens``)
    and, on models that report them, those written to the cache (``cache_write_tokens``);
    ``completion_tokens`` includes the reasoning tokens
    (``completion_tokens_details.reasoning_tokens``).
    """
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    completion = usage.get("completion_tokens_details")
    completion = completion if isinstance(completion, dict) else {}
    return Usage(
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        cache_read_tokens=_count(details.get("cached_tokens")),
        cache_write_tokens=_count(details.get("cache_write_tokens")),
        reasoning_tokens=_count(completion.get("reasoning_tokens")),
    )


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    fragments: list[str] = field(default_factory=list)


@dataclass
class _Accumulator:
    """Builds a ``ModelResponse`` out of streamed ``chat.completion.chunk`` objects.

    The chunks are the decoded JSON of each event: reading them as plain dicts costs a
    third of building the SDK's chunk models, which dominated a busy worker's CPU.
    """

    model: str
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PendingCall] = field(default_factory=dict)
    usage: Usage | None = None
    stop_reason: str | None = None
    on_text: Callable[[str], None] | None = None
    on_thinking: Callable[[str], None] | None = None
    thinking: list[str] = field(default_factory=list)

    def add(self, chunk: dict[str, Any]) -> None:
        """Take one chunk (an event of ``SSEEvents``: always a dict)."""
        if chunk.get("model"):
            self.model = str(chunk["model"])
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = openai_usage(usage)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason"):
                self.stop_reason = str(choice["finish_reason"])
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            if content := delta.get("content"):
                self.text.append(str(content))
                if self.on_text is not None:
                    self.on_text(self.text[-1])
            # vLLM, llama.cpp, Ollama, LiteLLM and DeepSeek stream a reasoning model's
            # thinking beside the answer (``reasoning`` in newer vLLM and OpenRouter).
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str) and thought:
                self.thinking.append(thought)
                if self.on_thinking is not None:
                    self.on_thinking(thought)
            for fragment in delta.get("tool_calls") or ():
                if isinstance(fragment, dict):
                    self._add_call(fragment)

    def _add_call(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index")
        if not isinstance(index, int):  # a server that leaves it out: an id starts a call
            index = len(self.calls) - (1 if self.calls and not fragment.get("id") else 0)
        pending = self.calls.setdefault(index, _PendingCall())
        if fragment.get("id"):
            pending.id = str(fragment["id"])
        function = fragment.get("function")
        if isinstance(function, dict):
            if name := function.get("name"):
                pending.name += str(name)
            if arguments := function.get("arguments"):
                pending.fragments.append(str(arguments))

    def response(self, request_chars: int) -> ModelResponse:
        """The turn; ``request_chars`` sizes the usage estimate of a server that sent none.

        A call without an id, or with an id an earlier call of the turn had (Ollama and
        llama.cpp have sent both), gets one made from its position, so that each result
        goes back to its own call.
        """
        calls: list[ToolCall] = []
        seen: set[str] = set()
        for index, pending in sorted(self.calls.items()):
            call_id = pending.id
            if not call_id or call_id in seen:
                call_id = f"call_{index}_{len(calls)}"
                while call_id in seen:
                    call_id += "_"
            seen.add(call_id)
            calls.append(
                ToolCall(
                    id=call_id,
                    name=pending.name,
                    arguments=parse_arguments("".join(pending.fragments)),
                )
            )
        text = "".join(self.text)
        usage = self.usage
        if usage is None:
            answer = len(text) + len("".join(self.thinking))
            answer += sum(len(p.name) + len("".join(p.fragments)) for p in self.calls.values())
            usage = estimate_usage(request_chars, answer)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=usage,
            stop_reason=self.stop_reason,
            model=self.model,
        )


CHARS_PER_TOKEN = 4
"""The estimate's ratio for a server that reports no usage (as the fake servers count)."""


def estimate_usage(request_chars: int, answer_chars: int) -> Usage:
    """Usage for a turn a server reported none for: 4 characters a token, ``estimated``.

    Args:
        request_chars: Characters of the request's JSON (messages and tools).
        answer_chars: Characters of the answer: text, thinking, tool names and arguments.
    """
    return Usage(
        input_tokens=max(1, request_chars // CHARS_PER_TOKEN),
        output_tokens=max(1, answer_chars // CHARS_PER_TOKEN),
        estimated=True,
    )


def sdk_client(
    api_key: str = "unused",
    base_url: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> AsyncOpenAI:
    """An ``openai`` SDK client as both OpenAI wires use it.

    No retries of its own (the activity's retry policy retries); on aiohttp where it is
    installed. The SDK is imported here, once a provider is built: a worker imports only the SDKs
    of the providers it runs (importing both took seconds).
    """
    from openai import AsyncOpenAI, DefaultAioHttpClient

    return AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        default_headers=dict(headers or {}),
        max_retries=0,
        http_client=DefaultAioHttpClient() if use_aiohttp() else None,
    )


def import_sdk() -> None:
    """Import the SDK and the modules its first streamed request would import.

    The SDK loads its resources, and its HTTP stack its TLS module, when first used: a
    client built and dropped here imports them, so that a worker can do it in a thread
    while it starts instead of in its first model turn.
    """
    sdk_client().chat.completions.with_streaming_response  # noqa: B018


class OpenAIProvider:
    """Chat Completions with tools, streamed.

    Streaming keeps a long answer from hitting read timeouts and lets a cancelled
    activity close the HTTP connection at once (the stream is closed on
    ``asyncio.CancelledError``), which stops the server generating. A stream that
    stalls for ``idle_timeout`` seconds, breaks, or ends without a ``finish_reason``
    or with an empty answer is a retryable error, never a turn.

    Args:
        api_key: The key (``OPENAI_API_KEY``; any text for local servers).
        base_url: A custom OpenAI-compatible endpoint, e.g. ``http://localhost:11434/v1``.
        idle_timeout: Seconds without data (headers or a chunk) before the attempt is
            abandoned; None: no limit.
        prompt_cache_key: Send ``prompt_cache_key`` (the request's ``cache_key``, the
            task id) so the API routes a task's requests to the machines that cached
            its prefix. Off by default: not every OpenAI-compatible server accepts it.
        profile: What the server does differently (see ``_profiles``); None: the one
            ``base_url`` suggests.
        headers: Sent with every request (an endpoint's ``headers``).
    """

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        idle_timeout: float | None = None,
        prompt_cache_key: bool = False,
        profile: Profile | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        from openai import APIError

        self._key = api_key
        self._secrets = [api_key, *(headers or {}).values()]
        self._api_error = APIError
        self.prompt_cache_key = prompt_cache_key
        self.profile = profile or detect_profile(base_url)
        self._clients = PerLoop(lambda: sdk_client(api_key, base_url, headers))
        self.idle_timeout = idle_timeout

    async def complete(
        self,
        request: ModelRequest,
        on_text: Callable[[str], None] | None = None,
        on_thinking: Callable[[str], None] | None = None,
    ) -> ModelResponse:
        """Run one streamed Chat Completions turn.

        Args:
            request: The neutral request; ``request.model`` is e.g. ``gpt-4.1-mini``.
            on_text: Called with each text delta as it arrives.
            on_thinking: Called with each piece of ``reasoning_content`` (or
                ``reasoning``) a compatible server streams; never part of the answer.

        Returns:
            Text, tool calls (arguments decoded), usage (reasoning tokens included, as
            ``completion_tokens_details`` reports them) and finish reason.

        Raises:
            temporalio.exceptions.ApplicationError: The API failed (retryable or not as
                the status says); or, retryable, the stream stalled, broke, ended
                without a finish reason, or had neither text nor tool calls.
        """
        # The request is wire-format already: sent as ``extra_body``, the SDK does not
        # walk it again against its typed parameters (its transform took 55 ms per turn
        # at 400 messages, more than the rest of the turn, and hashing the annotations of
        # even the small fields showed in a worker's profile).
        body: dict[str, Any] = {"messages": to_openai_messages(request)}
        if self.profile.usage == "stream_options":
            body["stream_options"] = {"include_usage": True}
        params: dict[str, Any] = {
            "model": request.model,
            "messages": [],
            "stream": True,
            "extra_body": body,
        }
        body[self.profile.max_tokens_field] = request.max_tokens
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
        if request.reasoning_effort is not None:
            body["reasoning_effort"] = request.reasoning_effort
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if self.prompt_cache_key and request.prompt_cache and request.cache_key:
            body["prompt_cache_key"] = cache_key_value(request.cache_key)
        accumulator = _Accumulator(
            model=request.model,
            on_text=encodable_sink(on_text),
            on_thinking=encodable_sink(on_thinking),
        )
        reader = StreamReader(
            provider="openai",
            key_env="OPENAI_API_KEY",
            secrets=self._secrets,
            idle_timeout=self.idle_timeout,
        )
        client = self._clients.get()
        await reader.read(
            lambda: SSEEvents(
                client.chat.completions.with_streaming_response.create(**params),
                provider="openai",
                error=self._api_error,
            ).open(),
            accumulator.add,
        )
        sized = len(json.dumps(body["messages"])) + len(json.dumps(body.get("tools") or []))
        return reader.check(
            accumulator.response(sized),
            finished=accumulator.stop_reason is not None,
            what="a finish_reason",
        )

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop."""
        await self._clients.aclose()
