"""The Responses API's stream events, read into one model turn.

Each output item is taken as ``response.output_item.done`` sends it (the API says a
reasoning item's ``encrypted_content`` is whole only there); the deltas feed the live
text and thinking. A response that fails inside its stream (``response.failed``, an
``error`` event) raises the error the same failure would as an HTTP status.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.exceptions import ApplicationError

from durable_subagents.types import (
    THINKING_SEPARATOR,
    ModelResponse,
    ReasoningBlock,
    ToolCall,
    Usage,
)

from ._errors import CONTEXT_LENGTH_ERROR, model_request_error, model_unavailable
from .openai import parse_arguments

__all__ = ["PROVIDER", "ResponsesAccumulator", "failure", "responses_usage"]

PROVIDER = "openai-responses"
_STOP_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""An incomplete response's ``incomplete_details.reason`` in Chat Completions' words."""
_NOT_RETRIED = {"invalid_prompt", "invalid_encrypted_content"}
"""Codes of a failed response that a retry of the same request cannot fix."""


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
class ResponsesAccumulator:
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
