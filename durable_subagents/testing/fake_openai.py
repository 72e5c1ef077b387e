"""A local server that speaks OpenAI's Chat Completions wire protocol.

Tests (yours too) point the real ``openai`` SDK at it: it plays queued replies,
streams them as Server-Sent Events in small fragments, injects HTTP errors, random
5xx failures and stream faults (reset, truncated, hanging), and records every
request, when it came and what it got, and every client disconnect. Usage reports
reasoning tokens as the API does (``completion_tokens_details.reasoning_tokens``, part
of ``completion_tokens``), by the request's ``reasoning_effort``.

Example:
    >>> async with FakeOpenAIServer() as srv:  # doctest: +SKIP
    ...     srv.add_reply(text="hi", usage=(12, 3))
    ...     client = AsyncOpenAI(base_url=srv.base_url, api_key="test")
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from ._compat_quirks import SERVER_QUIRKS, ServerQuirks, unknown_parameter
from ._fake_server import (
    FAULTS,
    FakeModelServer,
    FakeReply,
    Fault,
    arguments_text,
    fragments,
    text_deltas,
)
from ._prompt_cache import OpenAICache, tokens
from ._wire_images import openai_problem

__all__ = [
    "FAULTS",
    "REASONING_EFFORTS",
    "REASONING_TOKENS",
    "SERVER_QUIRKS",
    "FakeModelServer",
    "FakeOpenAIServer",
    "FakeReply",
    "Fault",
    "ServerQuirks",
    "arguments_text",
    "fragments",
    "text_deltas",
]

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
"""The ``reasoning_effort`` values the fake OpenAI server takes (others get the API's 400)."""
REASONING_TOKENS = {"none": 0, "minimal": 16, "low": 64, "medium": 256, "high": 1024, "xhigh": 4096}
"""Reasoning tokens a reply reports for each effort, unless it sets its own."""


def _sse(data: Any) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


class FakeOpenAIServer(FakeModelServer):
    """Speaks ``POST /v1/chat/completions``, streamed (SSE) and not.

    ``base_url`` ends in ``/v1``, as ``AsyncOpenAI(base_url=...)`` expects. Text is
    streamed word by word and tool-call arguments in 7-character fragments; the usage
    chunk is sent when the request asks for it with ``stream_options.include_usage``.
    Prompts are cached automatically, as OpenAI does (see ``_prompt_cache``).

    ``quirks`` (a ``ServerQuirks``, or the name of one of ``SERVER_QUIRKS``) makes it
    answer as an OpenAI-compatible server that differs from the API: usage never or
    always sent, call ids missing or reused, arguments whole, thinking streamed as
    ``reasoning_content``, a 400 for a parameter it does not know.
    """

    route = "/v1/chat/completions"

    def __init__(self, *, quirks: ServerQuirks | str | None = None, **options: Any) -> None:
        super().__init__(**options)
        self._cache = OpenAICache(self.cache_ttl)
        if isinstance(quirks, str):
            quirks = SERVER_QUIRKS[quirks]
        self.quirks = quirks or ServerQuirks()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"{self.url}/v1"

    def error_body(self, status: int) -> Any:
        """OpenAI's error shape."""
        kind = {401: "invalid_request_error", 429: "rate_limit_exceeded"}.get(status, "error")
        return {
            "error": {"message": f"fake error {status}", "type": kind, "param": None, "code": None}
        }

    def _finish(self, reply: FakeReply) -> str:
        return reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")

    def _calls(self, reply: FakeReply) -> list[tuple[str, str, str]]:
        ids = {"missing": "", "reused": "call_0"}
        return [
            (
                ids.get(self.quirks.call_ids) or c.get("id") or self.next_id("call_fake_"),
                c["name"],
                arguments_text(c.get("arguments", {})),
            )
            for c in reply.tool_calls
        ]

    def _sends_usage(self, body: dict[str, Any]) -> bool:
        if self.quirks.usage != "stream_options":
            return self.quirks.usage == "always"
        return bool((body.get("stream_options") or {}).get("include_usage"))

    def refusal(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """A 400 with the API's message for a ``reasoning_effort`` it does not know.

        Or for messages it would refuse: a tool message with other than text parts, an
        image it does not take, a call's result missing after its call (``_wire_images``).
        Or, with ``quirks``, for a parameter the server does not know.
        """
        unknown = unknown_parameter(body, self.quirks.refuse)
        if unknown is not None:
            return unknown
        problem = openai_problem(body.get("messages") or [])
        if problem is not None:
            error = {"message": problem, "type": "invalid_request_error", "param": "messages"}
            return 400, {"error": {**error, "code": None}}
        effort = body.get("reasoning_effort")
        if effort is None or effort in REASONING_EFFORTS:
            return None
        supported = ", ".join(f"'{e}'" for e in REASONING_EFFORTS)
        message = (
            f"Invalid value: '{effort}'. Supported values are: {supported}."
            if isinstance(effort, str)
            else f"Invalid type for 'reasoning_effort': expected a string, but got {effort!r}."
        )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "reasoning_effort",
            "code": "invalid_value" if isinstance(effort, str) else "invalid_type",
        }
        return 400, {"error": error}

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """Every prompt token of a request: its tools and messages."""
        text, _ = OpenAICache.render(body)
        return tokens(text)

    def too_long(self, body: dict[str, Any], tokens: int) -> tuple[int, Any]:
        """OpenAI's ``context_length_exceeded`` error."""
        _, tool_tokens = OpenAICache.render(body)
        message = (
            f"This model's maximum context length is {self.context_window} tokens. "
            f"However, your messages resulted in {tokens} tokens"
        )
        if tool_tokens:
            message += (
                f" ({tokens - tool_tokens} in the messages, {tool_tokens} in the functions). "
                "Please reduce the length of the messages or functions."
            )
        else:
            message += ". Please reduce the length of the messages."
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        return 400, {"error": error}

    def usage(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """Chat Completions usage: ``prompt_tokens`` includes the cached tokens."""
        if reply.usage is not None:
            prompt, completion, cached = *reply.usage, 0
        else:
            prompt, cached = self._cache.use(body)
            completion = self.output_tokens(reply)
        reasoning = reply.reasoning_tokens
        if reasoning is None:
            reasoning = REASONING_TOKENS.get(str(body.get("reasoning_effort")), 0)
        completion += reasoning
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def render(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """A ``chat.completion`` object."""
        calls = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in self._calls(reply)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": self.next_id("chatcmpl-fake-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish(reply)}],
            "usage": reply.reported if self.quirks.usage != "never" else None,
        }

    def events(self, reply: FakeReply, body: dict[str, Any]) -> Iterator[bytes]:
        """``chat.completion.chunk`` frames, then ``[DONE]``."""
        base = {
            "id": self.next_id("chatcmpl-fake-"),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return _sse({**base, "choices": [choice]})

        yield chunk({"role": "assistant", "content": ""})
        if self.quirks.reasoning_field and self.quirks.thinking:
            for word in self.quirks.thinking.split(" "):
                yield chunk({self.quirks.reasoning_field: f"{word} ", "content": None})
        for piece in text_deltas(reply):
            yield chunk({"content": piece})
        for index, (cid, name, args) in enumerate(self._calls(reply)):
            whole = args if self.quirks.whole_arguments else ""
            head: dict[str, Any] = {
                "type": "function",
                "function": {"name": name, "arguments": whole},
            }
            if cid:
                head["id"] = cid
            yield chunk({"tool_calls": [{"index": index, **head}]})
            for piece in fragments(args) if not whole else ():
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, self._finish(reply))
        if self._sends_usage(body):
            yield _sse({**base, "choices": [], "usage": reply.reported})
        yield b"data: [DONE]\n\n"
