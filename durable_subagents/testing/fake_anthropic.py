"""A local server that speaks Anthropic's Messages API wire protocol.

Extended thinking is played as the API plays it: a request that asks for thinking
(``thinking.type`` ``enabled`` or ``adaptive``) gets thinking blocks before the answer,
each signed (a ``thinking`` block's ``signature``, a ``redacted_thinking`` block's
``data``, both bound to this server). Every block that comes back must be unchanged,
in its order, else the request gets the API's 400; so does a tool loop whose first
answer does not start with thinking while manual thinking is on, thinking with a
``temperature`` other than 1 or with a forced tool, and a budget under 1,024 tokens or
not under ``max_tokens`` (unless the interleaved-thinking beta is on).

Example:
    >>> async with FakeAnthropicServer() as srv:  # doctest: +SKIP
    ...     srv.add_reply(tool_calls=[{"name": "grep", "arguments": {"pattern": "def "}}])
    ...     client = AsyncAnthropic(base_url=srv.base_url, api_key="test")
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Iterator
from typing import Any

from ._prompt_cache import ANTHROPIC_MAX_BREAKPOINTS, AnthropicCache, tokens
from ._wire_images import anthropic_problem
from .fake_openai import FakeModelServer, FakeReply, arguments_text, fragments, text_deltas

__all__ = ["REDACTED", "THINKING_DOCS", "FakeAnthropicServer"]

REDACTED = None
"""A ``redacted_thinking`` block among a reply's ``thinking`` blocks."""
THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
REDACTED_TOKENS = 32
"""Output tokens a redacted thinking block counts."""
_REASONING = ("thinking", "redacted_thinking")

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


def _event_object(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": name, **data}


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

    def __init__(
        self,
        *,
        min_cache_tokens: int | None = None,
        default_thinking: str = "Let me think about what the task needs first.",
        **options: Any,
    ) -> None:
        """Options as ``FakeModelServer``'s.

        ``min_cache_tokens`` overrides the model's minimum cacheable prompt length
        (``anthropic_min_tokens``); ``default_thinking`` is the thought of a reply that
        names none, to a request that asks for thinking.
        """
        super().__init__(**options)
        self._cache = AnthropicCache(self.cache_ttl, min_cache_tokens)
        self.default_thinking = default_thinking
        self._key = os.urandom(32)
        self._issued: set[tuple[str, ...]] = set()
        """The reasoning blocks of each answer sent (their signatures and data)."""

    def error_body(self, status: int) -> Any:
        """Anthropic's error shape."""
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": f"fake error {status}"}}

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """Every input token of a request: tools, system and messages."""
        return AnthropicCache.prompt_tokens(body)

    def refusal(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        """The API's 400s for thinking (see the module's docstring), and for images."""
        problem = anthropic_problem(body.get("messages") or [])
        if problem is not None:
            return 400, _error("invalid_request_error", problem)
        for i, message in enumerate(body.get("messages") or []):
            problem = self._returned(i, message)
            if problem is not None:
                return 400, _error("invalid_request_error", problem)
        thinking = body.get("thinking") or {}
        kind = thinking.get("type")
        if kind not in ("enabled", "adaptive"):
            problem = _thinking_in_final_turn(body.get("messages") or [])
            return None if problem is None else (400, _error("invalid_request_error", problem))
        problem = None
        budget = thinking.get("budget_tokens")
        interleaved = "interleaved-thinking" in self.request_headers[-1].get("anthropic-beta", "")
        if kind == "enabled" and (not isinstance(budget, int) or budget < 1024):
            problem = (
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            )
        elif kind == "enabled" and body.get("max_tokens", 0) <= budget and not interleaved:
            problem = (
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult "
                f"our documentation at {THINKING_DOCS}#max-tokens-and-context-window-size"
            )
        elif body.get("temperature", 1) != 1:
            problem = (
                "`temperature` may only be set to 1 when thinking is enabled. Please consult "
                f"our documentation at {THINKING_DOCS}#important-considerations-when-using-"
                "extended-thinking"
            )
        elif (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
            problem = "Thinking may not be enabled when tool_choice forces tool use."
        elif kind == "enabled":
            problem = _thinking_first(body.get("messages") or [])
        return None if problem is None else (400, _error("invalid_request_error", problem))

    def _returned(self, index: int, message: dict[str, Any]) -> str | None:
        """Why an assistant message's reasoning blocks are not those this server sent."""
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            return None
        seen: list[str] = []
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "thinking" and block.get("signature") != self._sign(block.get("thinking")):
                return f"messages.{index}.content.{j}: Invalid `signature` in `thinking` block"
            if kind == "redacted_thinking" and not self._issued_data(block.get("data")):
                return f"messages.{index}.content.{j}: Invalid `data` in `redacted_thinking` block"
            if kind in _REASONING:
                seen.append(str(block.get("signature") or block.get("data")))
        if seen and tuple(seen) not in self._issued:
            # every block is genuine, but not in the order (or company) it was sent in
            first = next(j for j, b in enumerate(content) if b.get("type") in _REASONING)
            return f"messages.{index}.content.{first}: Invalid `signature` in `thinking` block"
        return None

    def _sign(self, thinking: Any) -> str:
        data = str(thinking).encode("utf-8", "surrogatepass")
        digest = hmac.new(self._key, b"thinking\0" + data, hashlib.sha256).digest()
        return base64.b64encode(b"\x12\x08" + digest).decode()

    def _redacted(self) -> str:
        nonce = os.urandom(24)
        mac = hmac.new(self._key, b"redacted\0" + nonce, hashlib.sha256).digest()
        return base64.b64encode(nonce + mac).decode()

    def _issued_data(self, data: Any) -> bool:
        try:
            raw = base64.b64decode(str(data), validate=True)
        except ValueError:
            return False
        nonce, mac = raw[:24], raw[24:]
        expected = hmac.new(self._key, b"redacted\0" + nonce, hashlib.sha256).digest()
        return len(raw) > 24 and hmac.compare_digest(mac, expected)

    def _thoughts(self, reply: FakeReply, body: dict[str, Any]) -> list[str | None]:
        """The reply's thinking blocks for this request (None: a redacted one)."""
        if (body.get("thinking") or {}).get("type") not in ("enabled", "adaptive"):
            return []
        return [self.default_thinking] if reply.thinking is None else list(reply.thinking)

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
        thoughts = self._thoughts(reply, body)
        thinking = sum(REDACTED_TOKENS if t is None else tokens(t) for t in thoughts)
        details = {"output_tokens_details": {"thinking_tokens": thinking}} if thoughts else {}
        if reply.usage is not None:
            inputs = {
                "input_tokens": reply.usage[0],
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            }
            return {**inputs, "output_tokens": reply.usage[1] + thinking, **details}
        output = self.output_tokens(reply) + thinking  # thinking tokens are output tokens
        return {**self._cache.use(body), "output_tokens": output, **details}

    def _stop(self, reply: FakeReply) -> str:
        return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")

    def _blocks(self, reply: FakeReply, body: dict[str, Any]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        for thought in self._thoughts(reply, body):
            if thought is None:
                blocks.append({"type": "redacted_thinking", "data": self._redacted()})
            else:
                blocks.append({"type": "thinking", "thinking": thought, "signature": ""})
                blocks[-1]["signature"] = self._sign(thought)
        if blocks:
            self._issued.add(tuple(b.get("signature") or b["data"] for b in blocks))
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
            for b in self._blocks(reply, body)
        ]
        message["stop_reason"] = self._stop(reply)
        message["usage"] = reply.reported
        return message

    def events(self, reply: FakeReply, body: dict[str, Any]) -> Iterator[bytes]:
        """The Messages API stream events, as server-sent events."""
        for event in self.stream_events(reply, body):
            yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

    def stream_events(self, reply: FakeReply, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The Messages API stream events, as objects (each wire frames them its way)."""
        yield _event_object("message_start", {"message": self._message(reply, body)})
        for index, block in enumerate(self._blocks(reply, body)):
            if block["type"] == "thinking":
                empty = {"type": "thinking", "thinking": "", "signature": ""}
                yield _event_object("content_block_start", {"index": index, "content_block": empty})
                for piece in text_deltas(FakeReply(text=block["thinking"])):
                    delta = {"type": "thinking_delta", "thinking": piece}
                    yield _event_object("content_block_delta", {"index": index, "delta": delta})
                delta = {"type": "signature_delta", "signature": block["signature"]}
                yield _event_object("content_block_delta", {"index": index, "delta": delta})
            elif block["type"] == "redacted_thinking":
                yield _event_object("content_block_start", {"index": index, "content_block": block})
            elif block["type"] == "text":
                yield _event_object(
                    "content_block_start",
                    {"index": index, "content_block": {"type": "text", "text": ""}},
                )
                for piece in text_deltas(reply):
                    delta = {"type": "text_delta", "text": piece}
                    yield _event_object("content_block_delta", {"index": index, "delta": delta})
            else:
                start = {**block, "input": {}}
                yield _event_object("content_block_start", {"index": index, "content_block": start})
                for piece in fragments(arguments_text(block["input"])):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    yield _event_object("content_block_delta", {"index": index, "delta": delta})
            yield _event_object("content_block_stop", {"index": index})
        yield _event_object(
            "message_delta",
            {
                "delta": {"stop_reason": self._stop(reply), "stop_sequence": None},
                "usage": reply.reported,  # cumulative, as the API sends it
            },
        )
        yield _event_object("message_stop", {})


def _thinking_first(messages: list[dict[str, Any]]) -> str | None:
    """Manual thinking's rule: a tool loop's first answer starts with thinking."""
    turn = _final_turn(messages)
    if turn is None:
        return None
    index, content = turn[0], messages[turn[0]]["content"]
    first = content[0].get("type") if isinstance(content, list) and content else "text"
    if first in _REASONING:
        return None
    return (
        f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
        f"found `{first}`. When `thinking` is enabled, a final `assistant` message must "
        "start with a thinking block (preceeding the lastmost set of `tool_use` and "
        "`tool_result` blocks). We recommend you include thinking blocks from previous "
        "turns. To avoid this requirement, disable `thinking`. Please consult our "
        f"documentation at {THINKING_DOCS}"
    )


def _thinking_in_final_turn(messages: list[dict[str, Any]]) -> str | None:
    """Without thinking, the turn a request continues may hold no thinking blocks."""
    for i in _final_turn(messages) or []:
        content = messages[i]["content"]
        if isinstance(content, list) and any(b.get("type") in _REASONING for b in content):
            return "When thinking is disabled, an `assistant` message cannot contain `thinking`"
    return None


def _final_turn(messages: list[dict[str, Any]]) -> list[int] | None:
    """The assistant messages of the tool loop a request continues (None: it continues none).

    A loop continues when the request ends with tool results; it began after the last
    user message that is more than tool results.
    """
    if not messages or not _results_only(messages[-1]):
        return None
    turn: list[int] = []
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            turn.insert(0, i)
        elif not _results_only(messages[i]):
            break
    return turn or None


def _results_only(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )
