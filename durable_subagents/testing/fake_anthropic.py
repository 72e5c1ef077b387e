"""A local server that speaks Anthropic's Messages API wire protocol.

Example:
    >>> async with FakeAnthropicServer() as srv:  # doctest: +SKIP
    ...     srv.add_reply(tool_calls=[{"name": "grep", "arguments": {"pattern": "def "}}])
    ...     client = AsyncAnthropic(base_url=srv.base_url, api_key="test")
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ._prompt_cache import ANTHROPIC_MAX_BREAKPOINTS, AnthropicCache
from .fake_openai import FakeModelServer, FakeReply, arguments_text, fragments, text_deltas

__all__ = ["FakeAnthropicServer"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


class FakeAnthropicServer(FakeModelServer):
    """Speaks ``POST /v1/messages``, streamed (SSE events) and not.

    ``base_url`` is the server root, as ``AsyncAnthropic(base_url=...)`` expects.
    Streams ``message_start``, per block ``content_block_start``/``_delta``/``_stop``
    (``text_delta`` word by word, ``input_json_delta`` in 7-character fragments),
    ``message_delta`` with usage and stop reason, and ``message_stop``. Prompts are
    cached behind ``cache_control`` breakpoints, as Anthropic does (see
    ``_prompt_cache``).
    """

    route = "/v1/messages"

    def __init__(self, *, min_cache_tokens: int | None = None, **options: Any) -> None:
        """Options as ``FakeModelServer``'s.

        ``min_cache_tokens`` overrides the model's minimum cacheable prompt length
        (``anthropic_min_tokens``).
        """
        super().__init__(**options)
        self._cache = AnthropicCache(self.cache_ttl, min_cache_tokens)

    def error_body(self, status: int) -> Any:
        """Anthropic's error shape."""
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": f"fake error {status}"}}

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """Every input token of a request: tools, system and messages."""
        return AnthropicCache.prompt_tokens(body)

    def check(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """Anthropic's 400 for more than 4 breakpoints, or for a prompt over the window."""
        marks = self._cache.breakpoints(body)
        if marks > ANTHROPIC_MAX_BREAKPOINTS:
            message = (
                f"A maximum of {ANTHROPIC_MAX_BREAKPOINTS} blocks with cache_control may be "
                f"provided. Found {marks}."
            )
            return 400, _error("invalid_request_error", message)
        return super().check(body)

    def too_long(self, body: dict[str, Any], tokens: int) -> tuple[int, Any]:
        """Anthropic's "prompt is too long" error."""
        message = f"prompt is too long: {tokens} tokens > {self.context_window} maximum"
        return 400, _error("invalid_request_error", message)

    def usage(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """Messages usage: ``input_tokens`` leaves out the cache's reads and writes."""
        if reply.usage is not None:
            inputs = {
                "input_tokens": reply.usage[0],
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            }
            return {**inputs, "output_tokens": reply.usage[1]}
        return {**self._cache.use(body), "output_tokens": self.output_tokens(reply)}

    def _stop(self, reply: FakeReply) -> str:
        return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")

    def _blocks(self, reply: FakeReply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.text:
            blocks.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or self.next_id("toolu_fake_"),
                    "name": call["name"],
                    "input": call.get("arguments", {}),
                }
            )
        return blocks

    def _message(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.next_id("msg_fake_"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**reply.reported, "output_tokens": 1},
        }

    def render(self, reply: FakeReply, body: dict[str, Any]) -> dict[str, Any]:
        """A ``message`` object."""
        message = self._message(reply, body)
        message["content"] = [
            {**b, "input": {}} if isinstance(b.get("input"), str) else b
            for b in self._blocks(reply)
        ]
        message["stop_reason"] = self._stop(reply)
        message["usage"] = reply.reported
        return message

    def events(self, reply: FakeReply, body: dict[str, Any]) -> Iterator[bytes]:
        """The Messages API stream events."""
        yield _event("message_start", {"message": self._message(reply, body)})
        for index, block in enumerate(self._blocks(reply)):
            if block["type"] == "text":
                yield _event(
                    "content_block_start",
                    {"index": index, "content_block": {"type": "text", "text": ""}},
                )
                for piece in text_deltas(reply):
                    delta = {"type": "text_delta", "text": piece}
                    yield _event("content_block_delta", {"index": index, "delta": delta})
            else:
                start = {**block, "input": {}}
                yield _event("content_block_start", {"index": index, "content_block": start})
                for piece in fragments(arguments_text(block["input"])):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    yield _event("content_block_delta", {"index": index, "delta": delta})
            yield _event("content_block_stop", {"index": index})
        yield _event(
            "message_delta",
            {
                "delta": {"stop_reason": self._stop(reply), "stop_sequence": None},
                "usage": reply.reported,  # cumulative, as the API sends it
            },
        )
        yield _event("message_stop", {})
